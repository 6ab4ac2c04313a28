"""pipekrylov: pipelined (communication-hiding) Krylov solvers on a distributed CSR runtime.

Importing the package loads neither mpi4py nor petsc4py nor Numba: each loads when the
part that needs it is first used.
"""
__version__ = "0.1.0"

_LAZY = {
    "DistributedCSR": "pipekrylov.matrix",
    "poisson2d": "pipekrylov.matrix",
    "poisson3d": "pipekrylov.matrix",
    "anisotropic2d": "pipekrylov.matrix",
    "convection_diffusion2d": "pipekrylov.matrix",
    "read_matrix": "pipekrylov.matrix",
    "read_matrix_market": "pipekrylov.matrix",
    "read_petsc_binary": "pipekrylov.matrix",
    "write_petsc_binary": "pipekrylov.matrix",
    "cg": "pipekrylov.solvers",
    "sstep_cg": "pipekrylov.solvers",
    "pipecg2": "pipekrylov.solvers",
    "pipefcg": "pipekrylov.solvers",
    "pipegcr": "pipekrylov.solvers",
    "pipefgmres": "pipekrylov.solvers",
    "cr": "pipekrylov.solvers",
    "bicgstab": "pipekrylov.solvers",
    "gmres": "pipekrylov.solvers",
    "sstep_gmres": "pipekrylov.solvers",
    "SolveResult": "pipekrylov.solvers",
    "Solver": "pipekrylov.solvers",
    "pipelined": "pipekrylov.pipelining",
    "plcg": "pipekrylov.deep",
    "plgmres": "pipekrylov.deep",
    "Method": "pipekrylov.derive",
    "Jacobi": "pipekrylov.precond",
    "BlockJacobi": "pipekrylov.precond",
    "BlockCG": "pipekrylov.precond",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pipekrylov' has no attribute {name!r}")
