"""What a solver is given, checked: the matrix and vectors in their accepted forms, and the
ranks' agreement on the call.

Every rank must set up the same solver and make the same solve, or the ranks walk into
different collectives and wait forever.  A set-up compares its arguments with one
allgather (it is made once); a solve only hashes its own, and the hash travels in the
loop's first reduction (:mod:`pipekrylov.runtime.reduce`), so a solve called alike pays
no message for the check.  Only when the hashes disagree do the ranks compare what they
were given, to say what differs.
"""
import os
import zlib

import numpy as np

from ..parallel.errors import format_ranks

__all__ = ["distributed", "as_sparse", "local_vector", "whole_checksum", "check_same_on_every_rank",
           "SolveCall", "raise_different_calls"]


def distributed(A):
    """A distributed operator: a DistributedCSR, or anything with its interface
    (partition, comm, matvec(x, y, progress), gather, spmv_time, spmv_count)."""
    return hasattr(A, "partition") and hasattr(A, "matvec")


def as_sparse(A):
    import scipy.sparse as sp
    if sp.issparse(A):
        return A
    if isinstance(A, np.ndarray) and A.ndim == 2:
        return sp.csr_matrix(A)
    raise TypeError(f"A must be a DistributedCSR, a scipy.sparse matrix or a 2-D array, "
                    f"got {type(A).__name__}")


def local_vector(v, partition, name, copy):
    """This rank's slice of ``v`` (given whole or as the slice) as float64, contiguous; a
    copy with ``copy`` (x0: the solve writes the iterate into it), else only if needed."""
    # (a read-only array, PETSc's VecGetArrayRead's, is copied: the loops' kernels take
    # writable arrays)
    if type(v) is np.ndarray and v.dtype == np.float64 and v.ndim == 1 and v.flags.c_contiguous and \
            v.flags.writeable:
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
    return _crc(S.indptr, S.indices, S.data, np.array(S.shape))


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
        raise ValueError(f"{method}: the ranks derived or set up different methods ({what}): a "
                         "nondeterministic pass, or different versions of pipekrylov on the ranks")
    if differ:
        raise ValueError(f"{method}: the ranks were called with different arguments ({what}); "
                         f"every rank must make the same call")


class SolveCall:
    """One solve's arguments as the ranks must agree on them, and their hash."""

    NAMES = ("rtol", "atol", "maxiter", "x0", "callback", "monitor", "b")

    def __init__(self, rtol, atol, maxiter, x0, callback, monitor, b, whole_n):
        # b given whole is compared by a checksum; a rank's own slice of it cannot be
        self.values = (rtol, atol, maxiter, "given" if x0 is not None else None,
                       "given" if callback is not None else None, bool(monitor),
                       _crc(np.asarray(b)) if whole_n and np.size(b) == whole_n else None)

    def hash(self, size):
        """An integer small enough that ``p sum(h^2)`` and ``(sum h)^2`` over ``size``
        ranks are exact in double precision (the runtime compares them)."""
        bits = max(1, min(16, int(26 - np.log2(size))))
        return float(zlib.crc32(repr(self.values).encode()) & ((1 << bits) - 1))


def raise_different_calls(comm, method, call):
    """The ranks' hashes of their calls differ: say how, on every rank.  Collective."""
    _, what = _differences(comm, {k: v if k == "b" and v else _describe(v)     # b: its checksum
                                  for k, v in zip(SolveCall.NAMES, call.values)})
    raise ValueError(f"{method}: the ranks were called with different arguments ({what or 'a hash collision'}); "
                     "every rank must make the same call")
