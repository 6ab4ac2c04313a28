"""Classic Krylov solvers on the distributed runtime, with scipy's calling contract.

These are the baselines the pipelined methods are measured against.
"""
from .bicgstab import bicgstab
from .cg import cg
from .cr import cr
from .gmres import gmres
from .result import REASONS, SolveResult

__all__ = ["cg", "cr", "bicgstab", "gmres", "SolveResult", "REASONS"]
