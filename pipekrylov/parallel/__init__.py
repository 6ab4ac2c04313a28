"""Parallel plumbing: partitions, halo exchange, fused nonblocking reductions, errors.

Nothing here knows about Krylov methods; the solvers call only these objects and never
MPI directly.  Every function that communicates takes its communicator as an argument.
"""
from .errors import CollectiveError, collective_check, raise_on_any

__all__ = ["CollectiveError", "collective_check", "raise_on_any"]
