"""Contiguous row partitions: rank r owns global rows ``starts[r]:starts[r+1]``."""
import numpy as np

from .errors import collective_check

__all__ = ["RowPartition"]


class RowPartition:
    """A contiguous block-row partition of ``n`` rows over ``comm``.

    Parameters
    ----------
    comm : mpi4py communicator
    starts : sequence of int, length ``comm.size + 1``
        ``starts[0] == 0``, nondecreasing, ``starts[-1] == n``.  Every rank passes the
        same array (checked, collectively).
    """

    def __init__(self, comm, starts):
        self.comm = comm
        with collective_check(comm, "RowPartition"):
            starts = np.asarray(starts, dtype=np.int64)
            size = comm.Get_size()
            if starts.shape != (size + 1,):
                raise ValueError(f"partition needs {size + 1} offsets for {size} ranks, got {starts.shape[0]}")
            if starts[0] != 0 or np.any(np.diff(starts) < 0):
                raise ValueError(f"partition offsets must start at 0 and not decrease: {starts.tolist()}")
        with collective_check(comm, "RowPartition"):
            if size > 1 and not np.array_equal(comm.bcast(starts, root=0), starts):
                raise ValueError("ranks were given different partitions")
        self.starts = starts
        self.n = int(starts[-1])
        rank = comm.Get_rank()
        self.start, self.end = int(starts[rank]), int(starts[rank + 1])
        self.nlocal = self.end - self.start

    @classmethod
    def uniform(cls, comm, n):
        """Equal row counts (within one).  Collective."""
        size = comm.Get_size()
        return cls(comm, [n * r // size for r in range(size + 1)])

    @classmethod
    def balanced(cls, comm, cumulative_nnz):
        """Row blocks with (about) equal nonzeros.  Collective.

        ``cumulative_nnz`` is the global row-pointer array (length n + 1) or any
        nondecreasing per-row cost prefix, the same on every rank.
        """
        cumulative_nnz = np.asarray(cumulative_nnz, dtype=np.int64)
        size = comm.Get_size()
        total = cumulative_nnz[-1]
        targets = total * np.arange(size + 1) // size
        starts = np.searchsorted(cumulative_nnz, targets, side="left")
        starts[0], starts[-1] = 0, len(cumulative_nnz) - 1
        return cls(comm, np.maximum.accumulate(starts))

    def owner(self, rows):
        """The rank owning each global row."""
        return np.searchsorted(self.starts, rows, side="right") - 1

    def __eq__(self, other):
        return isinstance(other, RowPartition) and np.array_equal(self.starts, other.starts)

    def __repr__(self):
        return f"RowPartition(n={self.n}, starts={self.starts.tolist()})"
