"""Parallel plumbing: partitions, halo exchange, fused nonblocking reductions, errors.

Nothing here knows about Krylov methods; the solvers call only these objects and never
MPI directly.  Every function that communicates takes its communicator as an argument.
(``halo`` and ``reduction`` import mpi4py; they are not imported here.)
"""
from .errors import CollectiveError, collective_check, raise_on_any
from .partition import RowPartition

__all__ = ["CollectiveError", "collective_check", "raise_on_any", "RowPartition"]
