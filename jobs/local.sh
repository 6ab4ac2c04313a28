#!/usr/bin/env bash
# Run one solve on this machine with N ranks (the batch scripts for Slurm and PBS follow
# the same pattern; see README).  Usage: jobs/local.sh [ranks] [method] [problem]
#   jobs/local.sh 2 p-cg poisson2d:500
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-2}
method=${2:-p-cg}
problem=${3:-poisson2d:500}
make -s env
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
exec mpiexec -n "$ranks" .venv/bin/python -m pipekrylov solve --problem "$problem" --method "$method" --pc jacobi
