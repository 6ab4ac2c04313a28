#!/usr/bin/env bash
# Run one solve on this machine with N ranks (the batch scripts for Slurm and PBS follow
# the same pattern; see README).  Usage: jobs/local.sh [ranks] [method] [problem]
#   jobs/local.sh 2 p-cg poisson2d:500
# It uses the environment it is started from: the python and mpiexec on PATH (activate the
# environment first, e.g. `. .venv/bin/activate`), or PY=/path/to/python and
# LAUNCHER='srun -n {ranks}' (a template with {ranks}).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-2}
method=${2:-p-cg}
problem=${3:-poisson2d:500}
source jobs/environment.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
exec ${LAUNCHER//\{ranks\}/$ranks} "$PY" -m pipekrylov solve --problem "$problem" --method "$method" --pc jacobi
