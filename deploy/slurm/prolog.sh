#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/hpcdata.sh, PrologFlags=Alloc): makes sure this node's agent
# is up before any step of the job starts. The data itself is fetched by the job's node-preparation step
# (hpcdata prestage writes it into the job script), which knows the dataset and version.
systemctl is-active --quiet hpcdata-agent.service || systemctl start hpcdata-agent.service
exit 0
