#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/epilog.d/hpcdata.sh): releases the job's pin on this node's copies even
# when the job was cancelled before its own release step could run. Never fails the node: a missing agent or dataset
# is not an error for node release.
/opt/hpcdata/hpcdata noderelease --job "$SLURM_JOB_ID" >/dev/null 2>&1 || true
exit 0
