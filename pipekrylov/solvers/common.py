"""Input handling, convergence test, monitor and timings shared by every solver."""
import functools
import os
import sys
import time
import zlib

import numpy as np

from ..parallel import collective_check
from ..parallel.errors import format_ranks
from ..parallel.reduction import FusedReduction
from ..precond import PreconditionerFailure, make_preconditioner
from .result import REASONS, Breakdown, SolveResult

__all__ = ["SolverRun", "Breakdown"]


def _world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


class SolverRun:
    """Everything a solver loop needs besides its own recurrences.

    Normalizes the inputs once (scipy's contract: ``atol = max(atol, rtol * ||b||)``),
    distributes a matrix given whole, builds the preconditioner, owns the reduction
    object, runs the convergence test and the monitor, and packs the result.
    """

    def __init__(self, method, A, b, x0, rtol, atol, maxiter, M, callback, comm,
                 monitor=False, latency=0.0, loop=None, derivation=None):
        self.method = method
        self.t_start = time.perf_counter()
        if comm is None:
            comm = A.comm if _distributed(A) else _world()
        self.comm = comm
        _check_same_on_every_rank(comm, method, A, b, rtol=rtol, atol=atol, maxiter=maxiter,
                                  M=M, latency=latency, loop=loop, derivation=derivation)
        # the same scalars on every rank (checked above): these fail everywhere alike
        if not (np.isfinite(rtol) and np.isfinite(atol)) or rtol < 0 or atol < 0:
            raise ValueError(f"{method}: tolerances must be finite and nonnegative: rtol={rtol}, atol={atol}")
        if maxiter is not None and int(maxiter) < 1:
            raise ValueError(f"{method}: maxiter must be positive, got {maxiter}")
        self.whole = not _distributed(A)
        if self.whole:
            from ..matrix.distributed import DistributedCSR
            A = DistributedCSR.from_scipy(_as_sparse(A), comm)
        self.A = A
        p = A.partition
        with collective_check(comm, method):
            self.b = _local_vector(b, p, "b")
            self.x = np.zeros(p.nlocal) if x0 is None else _local_vector(x0, p, "x0").copy()
        self.reduction = FusedReduction(comm, latency=latency)
        self.pc_error = None
        try:
            self.M = make_preconditioner(M, A)
        except PreconditionerFailure as exc:
            self.M, self.pc_error = None, exc
        self.callback = callback
        self.monitor = monitor
        self.maxiter = 10 * p.n if maxiter is None else int(maxiter)
        self.bnorm = float(np.sqrt(self.reduction.allreduce([self.b @ self.b], "||b||")[0]))
        self.rtol, self.atol_given = float(rtol), float(atol)
        self.atol = max(self.atol_given, self.rtol * self.bnorm)
        self.history = []
        # what some methods report besides the common result (SolveResult has them too)
        self.replacements = 0   # a pipelined method's residual replacements and restarts from x
        self.restarts = 0       # BiCGStab's shadow-space restarts; a deep pipeline's restarts
        self.shifts = None      # a deep pipeline's basis shifts
        self.handed_over = None  # the iteration p(l)-CG handed over to p-CG at
        self.last_breakdown = None
        self.spmv_before = (A.spmv_time, A.spmv_count)
        self.pc_before = self.M.time if self.M is not None else 0.0   # a preconditioner given may be reused

    # -------------------------------------------------------------- loop helpers
    def precondition(self, r, z):
        """z = M^{-1} r (a copy of r without a preconditioner).

        A user's M that raises on this rank is reported on every rank at the next
        reduction (:meth:`user_failed`); until then this rank goes on with z = r."""
        if self.M is None:
            z[:] = r
        else:
            try:
                self.M(r, z)
            except Exception as exc:  # noqa: BLE001 - raised on every rank at the next reduction
                z[:] = r
                self.user_failed(exc, "M")
        return z

    def user_failed(self, exc, what):
        """User code (``what``: callback, M, monitor) raised on this rank: record it, to be
        raised on every rank as the original exception where the ranks next meet (the
        next reduction, or the end of the solve); one rank alone raises at once."""
        if hasattr(exc, "add_note"):  # Python >= 3.11: the failing rank's traceback says so
            exc.add_note(f"raised by the {what} given to {self.method}, on rank {self.comm.Get_rank()}")
        self.reduction.fail(exc)

    def converged(self, iteration, rnorm):
        """Record ``rnorm`` (global), print the monitor line; True when converged.

        Raises Breakdown('diverged_nanorinf') on a non-finite norm.
        """
        self.history.append(rnorm)
        if callable(self.monitor):
            try:
                self.monitor(iteration, rnorm)
            except Exception as exc:  # noqa: BLE001 - raised on every rank at the next reduction
                self.user_failed(exc, "monitor")
        elif self.monitor and self.comm.Get_rank() == 0:
            print(f"{iteration:4d} KSP Residual norm {rnorm:.12e}", file=_stream(self.monitor), flush=True)
        if not np.isfinite(rnorm):
            raise Breakdown("diverged_nanorinf", "residual norm is not finite")
        return rnorm <= self.atol

    def note(self, message):
        """An event worth a line in a printing monitor (a restart, say); rank 0 prints it."""
        if self.monitor and not callable(self.monitor) and self.comm.Get_rank() == 0:
            print(f"     {self.method}: {message}", file=_stream(self.monitor), flush=True)

    def iterated(self, x):
        """Call the user's callback with the current iterate (whole if A was whole)."""
        if self.callback is not None:
            xk = self.A.gather(x) if self.whole else x
            try:
                self.callback(xk)
            except Exception as exc:  # noqa: BLE001 - raised on every rank at the next reduction
                self.user_failed(exc, "callback")

    def norm(self, v, label):
        return float(np.sqrt(self.reduction.allreduce([v @ v], label)[0]))

    @functools.cached_property
    def norm_inf_a(self):
        """``||A||_inf`` (collective at first use); 0 for operators that cannot tell."""
        return self.A.norm_inf() if hasattr(self.A, "norm_inf") else 0.0

    def true_residual_passes(self, x, natural=False):
        """Recurrences' residuals drift from the true one: a pipelined method accepts
        convergence only if ``||b - A x||`` (``||.||_M`` with ``natural``) passes too;
        if not, the true norm replaces the last history entry and the caller restarts
        from ``x``.  Collective (one operator application, one reduction)."""
        r = self.b - self.A.matvec(x)
        mr = self.precondition(r, np.empty_like(r)) if natural and self.M is not None else r
        true = float(np.sqrt(max(self.reduction.allreduce([r @ mr], "true ||r||")[0], 0.0)))
        if true <= self.atol:
            return True
        self.history[-1] = true
        return False

    # -------------------------------------------------------------- result
    def finish(self, x, iterations, reason=None, message=""):
        if reason is None:
            reason = "diverged_its"
        if reason == "diverged_its":
            info = iterations
            message = message or f"{iterations} iterations without converging"
        elif REASONS[reason] > 0:
            info = 0
            if not message:
                message = "converged"
        else:
            info = REASONS[reason]
        A, red = self.A, self.reduction
        timings = {
            "total": time.perf_counter() - self.t_start,
            "spmv": A.spmv_time - self.spmv_before[0],
            "spmv_count": A.spmv_count - self.spmv_before[1],
            "pc": self.M.time - self.pc_before if self.M is not None else 0.0,
            "reductions_blocked": red.blocked_time,
            "reductions": red.count,
        }
        out = A.gather(x) if self.whole else x
        return SolveResult(out, info, reason=reason, message=message, iterations=iterations,
                           residual_norms=self.history, timings=timings, reductions=red,
                           method=self.method, replacements=self.replacements, restarts=self.restarts,
                           shifts=self.shifts, handed_over=self.handed_over)

    def run(self, loop):
        """Run a solver loop ``loop(self) -> (x, iterations, reason)``; turn breakdowns into info < 0."""
        if self.pc_error is not None:
            return self.finish(self.x, 0, "diverged_pc_failed", str(self.pc_error))
        if self.bnorm == 0.0:
            self.history.append(0.0)
            return self.finish(np.zeros_like(self.b), 0, "converged_atol", "b is zero: x = 0")
        self.iterations = 0
        try:
            x, iterations, reason = loop(self)
        except Breakdown as exc:
            self.reduction.agree()
            if self._solved_to_rounding(self.x):
                return self.finish(self.x, self.iterations, "converged_atol",
                                   f"b - A x at the rounding level where the recurrence broke down ({exc})")
            return self.finish(self.x, self.iterations, exc.reason, str(exc))
        self.reduction.agree()   # user code that failed after the last reduction
        return self.finish(x, iterations, reason)

    def _solved_to_rounding(self, x):
        """A breakdown of the recurrences once ``b - A x`` is down to its own rounding
        error (as with rtol = atol = 0, run to the exact solution) is the solution, not
        a failure.  Collective: one SpMV, one reduction."""
        r = self.b - self.A.matvec(x)
        rr, xx = self.reduction.allreduce([r @ r, x @ x], "true ||r|| at a breakdown")
        floor = np.finfo(float).eps * (self.norm_inf_a * np.sqrt(xx) + self.bnorm)
        return bool(np.isfinite(floor) and np.sqrt(rr) <= max(self.atol, 10 * floor))

    def stop_reason(self):
        return "converged_atol" if self.atol > self.rtol * self.bnorm or self.atol == 0 else "converged_rtol"


def _check_same_on_every_rank(comm, method, A, b, **arguments):
    """Every rank must call the same solver with the same arguments, or the ranks walk
    into different collectives and wait forever.  Compares the method, the scalar
    arguments, the kind of M and, for a matrix or b given whole, a checksum of it (a
    CRC32 pass over its arrays, O(nnz) per rank; PIPEKRYLOV_CHECK_WHOLE=0 skips it for
    huge inputs).  Collective: one allgather of a few short strings."""
    if comm.Get_size() == 1:
        return
    mine = {"solver": method, **{k: _describe(v) for k, v in arguments.items()}}
    if os.environ.get("PIPEKRYLOV_CHECK_WHOLE", "1") != "0":
        mine.update(_whole_checksums(A, b))
    everyone = comm.allgather(mine)
    differ = sorted({k for f in everyone for k in set(f) | set(mine) if f.get(k) != mine.get(k)})
    if differ:
        what = "; ".join(f"{k}: " + ", ".join(f"{value} on rank(s) {ranks}" for value, ranks in
                                              _group(f.get(k, "-") for f in everyone).items())
                         for k in differ)
        if differ in (["derivation"], ["method_key"]):   # the same call, set up differently on some rank
            raise ValueError(f"{method}: the ranks derived or set up different methods ({what}): a "
                             "nondeterministic pass, or different versions of pipekrylov on the ranks")
        raise ValueError(f"{method}: the ranks were called with different arguments ({what}); "
                         f"every rank must make the same call")


def _group(values):
    """{value: the ranks holding it, as a message shows them}."""
    ranks = {}
    for rank, value in enumerate(values):
        ranks.setdefault(value, []).append(rank)
    return {v: format_ranks(r) for v, r in ranks.items()}


def _describe(value):
    if value is None or isinstance(value, (str, bool, int)):
        return repr(value)
    if isinstance(value, float):
        return repr(float(value))
    if isinstance(value, np.generic):
        return repr(value.item())
    return type(value).__name__


def _whole_checksums(A, b):
    """CRC32s of what was given whole (the same on every rank by contract)."""
    sums = {}
    try:
        n = A.partition.n if _distributed(A) else A.shape[0]
        if not _distributed(A):
            S = _as_sparse(A).tocsr()
            sums["A"] = _crc(S.indptr, S.indices, S.data, np.array(S.shape))
        v = np.asarray(b)
        if v.size == n:
            sums["b"] = _crc(v)
    except Exception:  # noqa: BLE001 - malformed inputs are reported by the checks that follow
        pass
    return sums


def _crc(*arrays):
    value = 0
    for a in arrays:
        value = zlib.crc32(np.ascontiguousarray(a).view(np.uint8), value)
    return f"crc32 {value:08x}"


def _distributed(A):
    """A distributed operator: a DistributedCSR, or anything with its interface
    (partition, comm, matvec(x, y, progress), gather, spmv_time, spmv_count)."""
    return hasattr(A, "partition") and hasattr(A, "matvec")


def _stream(monitor):
    return monitor if hasattr(monitor, "write") else sys.stdout


def _as_sparse(A):
    import scipy.sparse as sp
    if sp.issparse(A):
        return A
    if isinstance(A, np.ndarray) and A.ndim == 2:
        return sp.csr_matrix(A)
    raise TypeError(f"A must be a DistributedCSR, a scipy.sparse matrix or a 2-D array, "
                    f"got {type(A).__name__}")


def _local_vector(v, partition, name):
    v = np.asarray(v)
    if v.dtype.kind == "c":
        raise TypeError(f"unsupported dtype {v.dtype} for {name}: real systems only")
    # a copy: user code (a callable M, a callback) must not reach the caller's array
    v = v.astype(np.float64).ravel() if v.ndim == 2 and 1 in v.shape else v.astype(np.float64)
    if v.ndim != 1:
        raise ValueError(f"{name} must be a vector, got shape {v.shape}")
    if v.shape[0] == partition.nlocal:
        out = v
    elif v.shape[0] == partition.n:
        out = v[partition.start:partition.end]
    else:
        raise ValueError(f"{name} has length {v.shape[0]}: expected {partition.n} (whole) or "
                         f"{partition.nlocal} (this rank's rows)")
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} has non-finite entries")
    return np.ascontiguousarray(out)
