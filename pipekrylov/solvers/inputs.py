"""What a solver is given, checked: the matrix and vectors in their accepted forms, and the
ranks' agreement on the call.

Every rank must set up the same solver and make the same solve, or the ranks walk into
different collectives and wait forever.  A set-up compares its arguments with one
allgather (it is made once); a solve only hashes its own, and the hash travels in the
loop's first reduction (:mod:`pipekrylov.runtime.reduce`), so a solve called alike pays
no message for the check.  Only when the hashes disagree do the ranks compare what they
were given, to say what differs.
"""
import functools
import os
import zlib

import numpy as np

from ..parallel.errors import format_ranks

__all__ = ["distributed", "as_sparse", "whole_operator", "WholeOperator", "result_dtype", "local_vector",
           "whole_checksum", "check_same_on_every_rank", "SolveCall", "raise_different_calls", "solve_comm", "fitted_restart", "check_latency"]


def distributed(A):
    """A distributed operator: a DistributedCSR, or anything with its interface
    (partition, comm, matvec(x, y, progress), gather, spmv_time, spmv_count)."""
    return hasattr(A, "partition") and hasattr(A, "matvec")


def solve_comm(A, comm, world):
    """The communicator a solve of ``A`` runs on: ``comm``, else A's (COMM_WORLD, ``world()``,
    for a matrix given whole).  Checked locally, alike on every rank (no message: a
    communicator that is not A's cannot carry one): an intercommunicator, or one that
    does not hold A's ranks in A's order, would leave the ranks waiting in collectives
    that never match."""
    from mpi4py import MPI
    if comm is None:
        return A.comm if distributed(A) else world()
    if not isinstance(comm, MPI.Comm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm must be an mpi4py intracommunicator, got {type(comm).__name__}")
    if comm.Is_inter():
        raise TypeError("comm must be an intracommunicator, got an intercommunicator: give the "
                        "communicator of the ranks that hold A (e.g. intercomm.Merge())")
    if distributed(A) and MPI.Comm.Compare(comm, A.comm) not in (MPI.IDENT, MPI.CONGRUENT):
        raise ValueError(f"comm is not A's communicator (A is distributed over {A.comm.Get_size()} ranks, comm "
                         f"has {comm.Get_size()}{'' if comm.Get_size() != A.comm.Get_size() else ', in another order'}): "
                         "omit comm, or give A's (or a Dup of it)")
    return comm


def check_latency(latency):
    """The injected latency as a float: finite and >= 0 (an infinite one waits forever)."""
    try:
        value = float(latency)
    except (TypeError, ValueError):
        value = float("nan")
    if not (np.isfinite(value) and value >= 0):
        raise ValueError(f"latency must be a finite number of seconds >= 0, got {latency!r}")
    return value


def fitted_restart(restart, n, least=1):
    """A restart length for ``n`` unknowns: at most ``n`` (scipy's clamp; a Krylov space has
    no more dimensions, and the cycle's workspace grows as restart^2), at least ``least``."""
    return max(least, min(int(restart), n))


def as_sparse(A):
    import scipy.sparse as sp
    if sp.issparse(A):
        return A
    if isinstance(A, np.ndarray) and A.ndim == 2:
        return sp.csr_matrix(A)
    raise TypeError(f"A must be a DistributedCSR, a scipy.sparse matrix, a 2-D array or a LinearOperator, "
                    f"got {type(A).__name__}")


def whole_operator(A):
    """Is ``A`` an operator given whole (scipy's LinearOperator, or anything with ``shape`` and
    ``matvec``), not a matrix the runtime distributes?"""
    import scipy.sparse as sp
    return not (distributed(A) or sp.issparse(A) or isinstance(A, np.ndarray)) and \
        hasattr(A, "shape") and (hasattr(A, "matvec") or hasattr(A, "__matmul__"))


class WholeOperator:
    """An operator given whole on every rank (a scipy LinearOperator) with the runtime's
    operator interface: each application gathers the vector (an Allgatherv on more than one
    rank), applies the operator to it on every rank, and keeps this rank's rows.  Rows
    split evenly.  Collective."""

    def __init__(self, A, comm):
        from ..parallel.partition import RowPartition
        shape = tuple(A.shape)
        if len(shape) != 2 or shape[0] != shape[1]:
            raise ValueError(f"A must be square, got shape {shape}")
        dtype = getattr(A, "dtype", None)
        if dtype is not None and np.dtype(dtype).kind == "c":
            raise TypeError(f"unsupported dtype {np.dtype(dtype)} for A: real systems only")
        self.operator, self.comm, self.shape = A, comm, shape
        self.partition = RowPartition.uniform(comm, shape[0])
        self.spmv_time, self.spmv_count = 0.0, 0

    def matvec(self, x, y=None, progress=None):
        import time
        t0 = time.perf_counter()
        p = self.partition
        if y is None:
            y = np.empty(p.nlocal)
        whole = self.gather(x) if self.comm.Get_size() > 1 else x
        A = self.operator
        out = np.asarray(A.matvec(whole) if hasattr(A, "matvec") else A @ whole)
        if out.dtype.kind == "c":
            raise TypeError(f"A's matvec returned {out.dtype} values: real systems only")
        if out.size != p.n:
            raise ValueError(f"A's matvec returned {out.size} values for a vector of {p.n}")
        y[:] = out.reshape(-1)[p.start:p.end]
        self.spmv_time += time.perf_counter() - t0
        self.spmv_count += 1
        return y

    def gather(self, x_local):
        p = self.partition
        out = np.empty(p.n)
        self.comm.Allgatherv(np.ascontiguousarray(x_local, dtype=np.float64), [out, np.diff(p.starts)])
        return out


def result_dtype(A, b):
    """The dtype scipy returns x in: float32 where A and b both are (scipy's coerce), else
    float64 (the solve runs in float64 either way)."""
    dtype = getattr(A, "dtype", None)
    try:
        single = np.dtype(dtype) == np.float32 and np.asarray(b).dtype == np.float32
    except TypeError:
        single = False
    return np.dtype(np.float32) if single else np.dtype(np.float64)


def local_vector(v, partition, name, copy):
    """This rank's slice of ``v`` (given whole or as the slice) as float64, contiguous; a
    copy with ``copy`` (x0: the solve writes the iterate into it), else only if needed."""
    # (a read-only array, PETSc's VecGetArrayRead's, is copied: the loops' kernels take
    # writable arrays)
    if type(v) is np.ndarray and v.dtype == np.float64 and v.ndim == 1 and v.flags.c_contiguous:
        copy = copy or not v.flags.writeable
        if v.shape[0] == partition.nlocal:
            return v.copy() if copy else v
        if v.shape[0] == partition.n:
            v = v[partition.start:partition.end]
            return v.copy() if copy else v
    v = np.asarray(v)
    if v.dtype.kind == "c":
        raise TypeError(f"unsupported dtype {v.dtype} for {name}: real systems only")
    v = v.astype(np.float64).ravel() if v.ndim == 2 and 1 in v.shape else v.astype(np.float64)
    if v.ndim != 1:
        raise ValueError(f"{name} must be a vector, got shape {v.shape}")
    if v.shape[0] == partition.n and v.shape[0] != partition.nlocal:
        v = v[partition.start:partition.end]
    elif v.shape[0] != partition.nlocal:
        raise ValueError(f"{name} has length {v.shape[0]}: expected {partition.n} (whole) or "
                         f"{partition.nlocal} (this rank's rows)")
    return np.ascontiguousarray(v)


# ---------------------------------------------------------------- the ranks' agreement
def _crc(*arrays):
    value = 0
    for a in arrays:
        value = zlib.crc32(np.ascontiguousarray(a).view(np.uint8), value)
    return f"crc32 {value:08x}"


def whole_checksum(A):
    """A CRC32 of a matrix given whole (the same on every rank by contract); None for a
    distributed one or an input the checks that follow reject."""
    if distributed(A):
        return None
    try:
        S = as_sparse(A).tocsr()
    except TypeError:
        return None
    return _crc(S.indptr, S.indices, _solved_values(S.data), np.array(S.shape))


def _solved_values(a):
    """The values as the solve takes them (float64): a longdouble's padding bytes, which
    differ between equal arrays, are not compared."""
    a = np.asarray(a)
    return a.astype(np.float64) if a.dtype.kind in "biuf" and a.dtype != np.float64 else a


def _describe(value):
    if value is None or isinstance(value, (str, bool, int)):
        return repr(value)
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, np.generic):
        return repr(value.item())
    return type(value).__name__


def _differences(comm, mine):
    """``"key: value on rank(s) ..., value on rank(s) ...; ..."`` for the keys whose values
    differ between the ranks, "" if none do.  Collective: one allgather."""
    everyone = comm.allgather(mine)
    differ = sorted({k for f in everyone for k in set(f) | set(mine) if f.get(k) != mine.get(k)})
    parts = []
    for k in differ:
        ranks = {}
        for rank, f in enumerate(everyone):
            ranks.setdefault(f.get(k, "-"), []).append(rank)
        parts.append(f"{k}: " + ", ".join(f"{value} on rank(s) {format_ranks(r)}" for value, r in ranks.items()))
    return differ, "; ".join(parts)


def check_same_on_every_rank(comm, method, A, **arguments):
    """Raise on every rank if the ranks set up ``method`` differently: the scalar
    arguments, the kind of M and, for a matrix given whole, a checksum of it (O(nnz) per
    rank; PIPEKRYLOV_CHECK_WHOLE=0 skips it for huge inputs).  Collective."""
    if comm.Get_size() == 1:
        return
    mine = {"solver": method, **{k: _describe(v) for k, v in arguments.items()}}
    if os.environ.get("PIPEKRYLOV_CHECK_WHOLE", "1") != "0":
        checksum = whole_checksum(A)
        if checksum is not None:
            mine["A"] = checksum
    differ, what = _differences(comm, mine)
    if differ in (["derivation"], ["method_key"]):   # the same call, set up differently on some rank
        raise ValueError(f"{method}: the ranks set up different methods ({what}): every rank must make the "
                         "same call, with the same options (else: a nondeterministic pass, or different "
                         "versions of pipekrylov on the ranks)")
    if differ:
        raise ValueError(f"{method}: the ranks were called with different arguments ({what}); "
                         f"every rank must make the same call")


class SolveCall:
    """One solve's arguments as the ranks must agree on them, and their hash."""

    NAMES = ("rtol", "atol", "maxiter", "x0", "callback", "monitor", "b", "divtol")

    def __init__(self, rtol, atol, maxiter, x0, callback, monitor, b, partition=None, divtol=None):
        """``partition``: A's, where A was given whole (and b should be too), else None."""
        # b given whole is compared by a checksum; a rank's own slice of it cannot be, nor
        # can anything where one rank owns every row (its slice is the whole: the ranks
        # may give whole vectors or their slices, and only its b counts)
        whole_n = partition.n if partition is not None and np.diff(partition.starts).max() < partition.n else 0
        self.values = (rtol, atol, maxiter, "given" if x0 is not None else None,
                       "given" if callback is not None else None, bool(monitor),
                       _crc(_solved_values(b)) if whole_n and np.size(b) == whole_n else None, divtol)

    def hash(self, size):
        """An integer small enough that ``p sum(h^2)`` and ``(sum h)^2`` over ``size``
        ranks are exact in double precision (the runtime compares them)."""
        return _call_hash(self.values, size)


@functools.lru_cache(maxsize=256)
def _call_hash(values, size):
    # kept: a time step's solves repeat their arguments (a few us a solve)
    bits = max(1, min(16, int(26 - np.log2(size))))
    return float(zlib.crc32(repr(values).encode()) & ((1 << bits) - 1))


def raise_different_calls(comm, method, call):
    """The ranks' hashes of their calls differ: say how, on every rank.  Collective."""
    _, what = _differences(comm, {k: v if k == "b" and v else _describe(v)     # b: its checksum
                                  for k, v in zip(SolveCall.NAMES, call.values)})
    raise ValueError(f"{method}: the ranks were called with different arguments ({what or 'a hash collision'}); "
                     "every rank must make the same call")
