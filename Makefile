# The two commands of the README.  Both set up the environment first (tools/setup_env.sh:
# idempotent, seconds when it is already there).  The environment is the active virtual
# environment if there is one (the pip route), else .venv; its bin/ goes first on PATH, so
# its python and (with the mpich wheel) its mpiexec are the ones used.  make test's
# SIZES: the MPI runs' process counts; TEST_ARGS: more arguments to tools/run_tests.py.
VENV   ?= $(or $(VIRTUAL_ENV),.venv)
PY     := $(VENV)/bin/python
SIZES  ?= 2 4
TEST_ARGS ?=
export PATH := $(abspath $(VENV))/bin:$(PATH)
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
export OMPI_MCA_rmaps_base_oversubscribe := 1

.PHONY: env test demo clean

env:
	@VENV=$(VENV) bash tools/setup_env.sh

test: env
	@bash tools/setup_env.sh --slurm
	$(PY) tools/run_tests.py --sizes $(SIZES) $(TEST_ARGS)

demo: env
	$(PY) -m pipekrylov demo

clean:
	rm -rf .venv results
