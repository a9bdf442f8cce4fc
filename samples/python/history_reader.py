#!/usr/bin/env python3
"""A worker that is not .NET: reads a directory dataset from the node's read-only tree, as any program reads files.

The job's environment names the tree ($HPCDATA_DATASET_PATH, exported by `hpcdata prestage`'s job scripts; on a node
`hpcdata path` prints it). For a folder of per-instrument market history files (`hpcdata generate --data
history-files`) it prints one JSON line: files and rows read, and each instrument's last close.
Nothing is written into the tree: it is read-only, shared by every worker on the node.
"""
import csv
import json
import os
import sys


def main() -> int:
    root = os.environ.get("HPCDATA_DATASET_PATH") or (sys.argv[1] if len(sys.argv) > 1 else None)
    if not root:
        print("history_reader: no tree (HPCDATA_DATASET_PATH or an argument)", file=sys.stderr)
        return 2
    files = rows = 0
    last_close = {}
    for directory, _, names in sorted(os.walk(root)):
        for name in sorted(names):
            if not name.endswith(".csv"):
                continue
            path = os.path.join(directory, name)
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                for row in reader:
                    rows += 1
                    last_close[row["symbol"]] = float(row["close"])
            files += 1
    print(json.dumps({"tree": root, "files": files, "rows": rows, "last_close": last_close}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
