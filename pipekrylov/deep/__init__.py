"""Deep pipelines: p(l)-CG and p(l)-GMRES, each reduction hidden behind l operator applications.

These are parametrized templates, not outputs of the derivation passes: a deep pipeline
changes the basis the method works in (Lanczos or Arnoldi on a shifted auxiliary basis
``Z = V G``, :mod:`.basis`), which is a global restructuring, while the passes of
:mod:`pipekrylov.derive` rewrite a method's own recurrences locally.
``pipekrylov.pipelined("cg", depth=l)`` and ``pipelined("gmres", depth=l)`` return them.
"""
from .basis import SqrtBreakdown
from .plcg import MAX_DEPTH, plcg
from .plgmres import plgmres
from .spectrum import chebyshev_shifts

__all__ = ["plcg", "plgmres", "chebyshev_shifts", "SqrtBreakdown", "MAX_DEPTH"]
