"""The solvers as users call them: :class:`Solver` (set up once, solve many times) and the
classic methods' functions with scipy's calling contract, built on it; the one event
driver every loop runs under (:mod:`.driver`).

The classic methods are the baselines the pipelined methods are measured against.
"""
from .bicgstab import bicgstab
from .cg import cg, pipecg2, sstep_cg
from .cr import cr
from .flexible import pipefcg, pipefgmres, pipegcr
from .gmres import gmres, sstep_gmres
from .result import REASONS, SolveResult
from .solver import Solver

__all__ = ["Solver", "cg", "sstep_cg", "pipecg2", "pipefcg", "pipegcr", "pipefgmres", "cr", "bicgstab", "gmres", "sstep_gmres", "SolveResult", "REASONS"]
