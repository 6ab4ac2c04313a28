"""The distributed CSR matrix: contiguous row blocks, owned/ghost columns, overlapped SpMV."""
import functools
import time

import numpy as np
import scipy.sparse as sp

from ..kernels import csr_matvec_add_rows, csr_matvec_rows
from ..kernels.spmv import INDEX, RowRuns, pointer_dtype, runs_kernel
from ..parallel import collective_check
from ..parallel.halo import HaloExchange
from ..parallel.partition import RowPartition

__all__ = ["DistributedCSR"]


class DistributedCSR:
    """A square sparse matrix distributed by contiguous row blocks.

    Each rank stores its rows split in two CSR blocks, as PETSc's MPIAIJ does: the
    *local* block (columns this rank owns, numbered ``0..nlocal-1``) and the *ghost*
    block (columns owned elsewhere, numbered into the halo buffer), holding only the
    rows that have such columns.  ``matvec`` starts the halo exchange, multiplies the
    local block while the messages are in flight, then adds the ghost block.

    Build one with :meth:`from_local_rows`, :meth:`from_scipy`, the generators in
    :mod:`pipekrylov.matrix.generators` or the readers in :mod:`pipekrylov.matrix.io`.
    Vectors are this rank's slice, ``x[partition.start:partition.end]`` of the global one.
    """

    def __init__(self, partition, local, ghost_rows, ghost, ghosts):
        self.partition = partition
        self.comm = partition.comm
        self.shape = (partition.n, partition.n)
        self.dtype = np.dtype(np.float64)
        self.local = local
        local.runs                  # built here, not in the first (timed) product
        self.ghost_rows = ghost_rows
        self.ghost = ghost
        self.halo = HaloExchange(self.comm, partition, ghosts)
        self.ghost_columns = ghosts
        self.nnz_local = local.nnz + ghost.nnz
        self.nnz = self.comm.allreduce(self.nnz_local)
        self.spmv_time = 0.0
        self.spmv_count = 0

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_local_rows(cls, partition, indptr, indices, data, n_columns=None):
        """Build from this rank's rows in CSR with *global* column indices.  Collective.

        Duplicate entries are summed; explicit zeros are kept.
        """
        comm = partition.comm
        n = partition.n
        with collective_check(comm, "DistributedCSR"):
            if n_columns is not None and n_columns != n:
                raise ValueError(f"matrix must be square, got {n} x {n_columns}")
            indptr = np.asarray(indptr, dtype=np.int64)
            indices = np.asarray(indices)
            data = np.asarray(data)
            if indptr.shape != (partition.nlocal + 1,):
                raise ValueError(f"this rank owns {partition.nlocal} rows but got a row pointer "
                                 f"of length {indptr.shape[0]}")
            if indices.shape != data.shape or indptr[-1] != len(indices) or indptr[0] != 0:
                raise ValueError("inconsistent CSR arrays (indptr, indices, data)")
            data = _as_float64(data)
            if len(indices) and (indices.min() < 0 or indices.max() >= n):
                raise ValueError(f"column index out of range [0, {n})")
        rows = sp.csr_matrix((data, indices.astype(np.int64), indptr), shape=(partition.nlocal, n))
        rows.sum_duplicates()  # sorts the indices too
        coo = rows.tocoo()
        owned = (coo.col >= partition.start) & (coo.col < partition.end)
        local = sp.csr_matrix((coo.data[owned], (coo.row[owned], coo.col[owned] - partition.start)),
                              shape=(partition.nlocal, partition.nlocal))
        ghosts, ghost_col = np.unique(coo.col[~owned], return_inverse=True)
        ghost_full = sp.csr_matrix((coo.data[~owned], (coo.row[~owned], ghost_col)),
                                   shape=(partition.nlocal, len(ghosts)))
        ghost_rows = np.flatnonzero(np.diff(ghost_full.indptr)).astype(np.int64)
        ghost = ghost_full[ghost_rows]
        return cls(partition, CSRBlock(local), ghost_rows, CSRBlock(ghost), ghosts.astype(np.int64))

    @classmethod
    def from_scipy(cls, A, comm, root=None, partition=None):
        """Distribute a scipy.sparse matrix.  Collective.

        Parameters
        ----------
        A : scipy.sparse matrix or None
            The whole matrix on every rank (``root=None``) or on ``root`` only.
        root : int or None
            Rank holding ``A``; the others pass None and receive only their rows.
        partition : RowPartition, optional
            Default: row blocks balanced by nonzeros.
        """
        holder = comm.Get_rank() if root is None else root
        mine = comm.Get_rank() == holder
        with collective_check(comm, "DistributedCSR.from_scipy"):
            if mine:
                A = _check_scipy(A)
        if root is None:
            shape, indptr = A.shape, A.indptr
        else:
            shape = comm.bcast(A.shape if mine else None, root=root)
            indptr = comm.bcast(A.indptr if mine else None, root=root) if partition is None else None
        if partition is None:
            partition = RowPartition.balanced(comm, indptr)
        elif partition.n != shape[0]:
            raise ValueError(f"partition covers {partition.n} rows, matrix has {shape[0]}")
        if root is None:
            block = A[partition.start:partition.end]
            return cls.from_local_rows(partition, block.indptr, block.indices, block.data, shape[1])
        if mine:
            for rank in range(comm.Get_size()):
                block = A[partition.starts[rank]:partition.starts[rank + 1]]
                parts = (block.indptr.astype(np.int64), block.indices.astype(np.int64), block.data)
                if rank == root:
                    own = parts
                else:
                    for k, array in enumerate(parts):
                        comm.Send(np.ascontiguousarray(array), dest=rank, tag=90 + k)
            indptr, indices, data = own
        else:
            indptr = np.empty(partition.nlocal + 1, dtype=np.int64)
            comm.Recv(indptr, source=root, tag=90)
            indices = np.empty(indptr[-1], dtype=np.int64)
            comm.Recv(indices, source=root, tag=91)
            data = np.empty(indptr[-1], dtype=np.float64)
            comm.Recv(data, source=root, tag=92)
        return cls.from_local_rows(partition, indptr, indices, data, shape[1])

    # ---------------------------------------------------------------- products
    def matvec(self, x, y=None, progress=None, chunks=4):
        """y = A x on the local slices.  Collective (neighbours only).

        ``progress`` (optional) is called between row chunks of the local product, so
        an outstanding nonblocking reduction advances without a progress thread.
        """
        t0 = time.perf_counter()
        if y is None:
            y = np.empty(self.partition.nlocal)
        local = self.local
        self.halo.start(x)
        if progress is None:
            local.multiply_rows(0, self.partition.nlocal, x, y)
        else:
            n = self.partition.nlocal
            for c in range(chunks):
                local.multiply_rows(n * c // chunks, n * (c + 1) // chunks, x, y)
                progress()
        ghost_values = self.halo.finish()
        if len(self.ghost_rows):
            g = self.ghost
            csr_matvec_add_rows(self.ghost_rows, g.indptr, g.indices, g.data, ghost_values, y)
        self.spmv_time += time.perf_counter() - t0
        self.spmv_count += 1
        return y

    def diagonal(self):
        """The local part of the diagonal (a copy)."""
        return self._diagonal.copy()

    @functools.cached_property
    def _diagonal(self):
        # kept from the first use: a solve that builds Jacobi costs no scan (the values are
        # fixed at construction; a matrix with new values is a new DistributedCSR)
        return self.local.to_scipy().diagonal()

    def norm_inf(self):
        """max_i sum_j |a_ij| (bounds the 2-norm of a symmetric matrix).  Collective."""
        sums = np.zeros(self.partition.nlocal)
        np.add.at(sums, np.repeat(np.arange(self.partition.nlocal), np.diff(self.local.indptr.astype(np.int64))),
                  np.abs(self.local.data))
        np.add.at(sums, np.repeat(self.ghost_rows, np.diff(self.ghost.indptr.astype(np.int64))),
                  np.abs(self.ghost.data))
        from mpi4py import MPI
        return self.comm.allreduce(float(sums.max(initial=0.0)), op=MPI.MAX)

    def local_block(self):
        """The block of this rank's rows and columns, as scipy CSR (block Jacobi)."""
        return self.local.to_scipy()

    def to_scipy(self):
        """This rank's rows as a scipy CSR matrix with global column indices."""
        p = self.partition
        loc = self.local.to_scipy().tocoo()
        gho = self.ghost.to_scipy().tocoo()
        rows = np.concatenate([loc.row, self.ghost_rows[gho.row]])
        cols = np.concatenate([loc.col + p.start, self.ghost_columns[gho.col]])
        vals = np.concatenate([loc.data, gho.data])
        return sp.csr_matrix((vals, (rows, cols)), shape=(p.nlocal, p.n))

    def scatter(self, x_global):
        """This rank's slice of a global vector."""
        return np.array(x_global[self.partition.start:self.partition.end], dtype=np.float64)

    def gather(self, x_local):
        """The global vector on every rank.  Collective."""
        p = self.partition
        out = np.empty(p.n)
        self.comm.Allgatherv(np.ascontiguousarray(x_local, dtype=np.float64), [out, np.diff(p.starts)])
        return out

    def __repr__(self):
        return (f"DistributedCSR(n={self.shape[0]}, nnz={self.nnz}, ranks={self.comm.Get_size()}, "
                f"local rows={self.partition.nlocal}, ghosts={self.halo.nghosts})")


def _as_float64(data):
    if data.dtype.kind == "c":
        raise TypeError(f"unsupported dtype {data.dtype}: pipekrylov solves real systems (float64)")
    if data.dtype.kind not in "fiub":
        raise TypeError(f"unsupported dtype {data.dtype}")
    data = data.astype(np.float64)
    if not np.all(np.isfinite(data)):
        raise ValueError("matrix has non-finite entries (inf or nan)")
    return data


def _check_scipy(A):
    if not sp.issparse(A):
        raise TypeError(f"expected a scipy.sparse matrix, got {type(A).__name__}")
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"matrix must be square, got shape {A.shape}")
    A = sp.csr_matrix(A)
    _as_float64(A.data)
    return A


class CSRBlock:
    """CSR arrays with the kernels' index types (unsigned pointers, uint32 columns)."""

    def __init__(self, A):
        A = sp.csr_matrix(A)
        A.sum_duplicates()
        if A.shape[1] >= 2 ** 32:
            raise ValueError("more than 2^32 local columns")
        self.shape = A.shape
        self.data = np.ascontiguousarray(A.data, dtype=np.float64)
        self.indices = np.ascontiguousarray(A.indices, dtype=INDEX)
        self.indptr = np.ascontiguousarray(A.indptr, dtype=pointer_dtype(A.nnz))
        self.nnz = len(self.data)

    @functools.cached_property
    def runs(self):
        """The row runs of the SpMV (built at the first product: a factored copy never needs them)."""
        return RowRuns.of(self.indptr, self.indices, self.data, self.shape[1])

    def multiply_rows(self, first, last, x, y):
        """y[first:last] = (A x)[first:last], by runs of equal rows (and by diagonals
        within them) where they pay."""
        if self.runs is not None:
            r = self.runs
            runs_kernel()(first, last, r.start, r.length, r.diagonal, r.offsets, r.offset_ptr, r.values,
                          self.indptr, self.indices, self.data, x, y)
        else:
            csr_matvec_rows(first, last, self.indptr, self.indices, self.data, x, y)

    def to_scipy(self):
        return sp.csr_matrix((self.data, self.indices.astype(np.int64), self.indptr.astype(np.int64)),
                             shape=self.shape)
