#!/usr/bin/env python3
"""A job step whose software comes from the node: numpy and scipy imported from a tree staged as a dataset.

Stage the packages once (`hpcdata prestage /usr/lib/python3/dist-packages --name sw/numpy ... -- python3 risk_numpy.py`);
node prep puts them on every node and the job's environment has them on PYTHONPATH (`hpcdata path --shell`), so every
rank imports from the node's read-only copy instead of the shared file system. Prints one JSON line: where each package
was imported from, whether that is the node's copy ($HPCDATA_DATASET_PATH), how long the imports took, and a one-day
99% value at risk of a small portfolio, by Monte Carlo (numpy) and by the normal formula (scipy). Exit 3 when a package
came from elsewhere, so a job that silently used the wrong tree fails.
"""
import json
import os
import sys
import time


def main() -> int:
    started = time.perf_counter()
    import numpy
    import scipy.stats
    imported = time.perf_counter() - started

    tree = os.environ.get("HPCDATA_DATASET_PATH", "")
    sources = {"numpy": numpy.__file__, "scipy": scipy.__file__}
    from_node = bool(tree) and all(os.path.realpath(p).startswith(os.path.realpath(tree) + os.sep) for p in sources.values())

    # Three positions, daily volatilities and correlations; one day's loss at 99%.
    weights = numpy.array([4e6, 2.5e6, 1.5e6])
    vols = numpy.array([0.012, 0.018, 0.025])
    corr = numpy.array([[1.0, 0.6, 0.3], [0.6, 1.0, 0.4], [0.3, 0.4, 1.0]])
    cov = numpy.outer(vols, vols) * corr
    rng = numpy.random.default_rng(int(os.environ.get("SLURM_PROCID", os.environ.get("PMI_RANK", "0"))))
    returns = rng.multivariate_normal(numpy.zeros(3), cov, size=200_000)
    losses = -(returns @ weights)
    var_mc = float(numpy.percentile(losses, 99))
    var_normal = float(scipy.stats.norm.ppf(0.99) * numpy.sqrt(weights @ cov @ weights))

    print(json.dumps({"from_node_copy": from_node, "tree": tree, "sources": sources,
                      "import_seconds": round(imported, 3), "var99_monte_carlo": round(var_mc),
                      "var99_normal": round(var_normal), "numpy": numpy.__version__, "scipy": scipy.__version__}))
    return 0 if from_node else 3


if __name__ == "__main__":
    sys.exit(main())
