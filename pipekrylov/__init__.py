"""pipekrylov: pipelined (communication-hiding) Krylov solvers on a distributed CSR runtime.

Importing the package imports neither MPI's heavy parts nor petsc4py; those load when used.
"""
__version__ = "0.1.0"
