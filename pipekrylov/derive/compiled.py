"""The compiled loop at run time: a generated solver's iterations in one Numba call.

:class:`CompiledSolver` wraps a :class:`.codegen.GeneratedSolver` (the Python loop) and
runs the same algorithm with its iterations compiled (:mod:`.loopgen`).  Python is
entered once per solve, and again only for what the Python loop's own code then does:
the start-up and restarts, confirming convergence against ``b - A x``, residual
replacement, a breakdown's message, the callback and the monitor (each iteration when
given), and emptying the residual-history and trace buffers every
:data:`BUFFERED` iterations.  The two loops' residual histories agree bit for bit.

The compiled loop runs on a :class:`~pipekrylov.matrix.distributed.DistributedCSR`
(given as one, or a scipy matrix distributed for the solve) with M None, "jacobi",
"ilu0"/"ic0"/"bjacobi"; :func:`unsupported` says why another solve cannot.
"""
import threading
import time
import weakref

import numba
import numpy as np
from mpi4py import MPI

from ..kernels.compile import compile_for, compile_source, compiling_notice
from ..matrix.distributed import DistributedCSR
from ..parallel import native
from ..precond import BlockJacobi, Jacobi
from ..solvers.result import Breakdown
from .loopgen import EVENTS, RESUME_AFTER_TEST, RESUME_TOP, FloatSlot, IntSlot, loop_source, startup_source

__all__ = ["CompiledSolver", "LoopCompileError", "unsupported", "POKE_ROWS", "BUFFERED"]

_MATRICES = weakref.WeakKeyDictionary()   # DistributedCSR -> the loop's tuple of its arrays, their kinds
_REDUCTIONS = {}                          # communicator handle -> the loop's reduction handles, scratch

BUFFERED = 2048   # iterations of residual norms and trace kept in compiled code between two hand-backs
POKE_ROWS = 4096  # rows of the SpMV and Jacobi between two MPI_Test pokes of an outstanding reduction


class LoopCompileError(TypeError):
    """Numba cannot type a method's compiled loop (``loop="auto"`` then runs the Python loop)."""


def unsupported(run, state=None):
    """Why this solve cannot run on the compiled loop (None: it can)."""
    if state is not None:
        return "a warm start (a deep pipeline's hand-over) runs on the Python loop"
    if not isinstance(run.A, DistributedCSR):
        return f"A is a {type(run.A).__name__}, not a DistributedCSR or a matrix"
    if run.M is not None and type(run.M) not in (Jacobi, BlockJacobi):   # a subclass may apply otherwise
        return "M is a user operator (the compiled loop applies 'jacobi', 'ilu0', 'ic0' or none)"
    try:
        native.library()
    except RuntimeError as exc:
        return str(exc)
    return None


class CompiledSolver:
    """The compiled loop of one generated solver; call it with a SolverRun, as the
    Python loop is called."""

    def __init__(self, generated):
        self.python = generated
        m = generated.method
        startup = {st.target for st in m.parsed_startup if st.kind in ("apply", "zero", "lincomb")}
        names = sorted(set(generated.storage) | {"x", "b"} | set(m.constants) | startup)
        self.rows = {name: row for row, name in enumerate(names)}
        self.source, self.scalars, self.checks = loop_source(generated, self.rows)
        begin = startup_source(generated, self.rows)
        self.compiled_startup = begin is not None
        self.source += begin or ""
        self.constants = [(st.target, compile(st.expression, st.target, "eval"))
                          for st in m.parsed_startup if st.kind == "scalar"]
        self._kernel = self._begin = None
        self._entries = {}   # dtypes of A's and M's arrays -> the compiled (loop, begin)
        self._lock = threading.Lock()
        K = len(generated.segments)
        self.labels = [f"reduction {k}" for k in range(K)]
        self.width = 1 + max(len(ph.pairs) for ph in generated.schedule.phases)
        self.coefficients = (K, max(1, max(len(seg.scalars) for seg in generated.segments)))

    def kernel(self, args, key, speak):
        """The compiled loop and start-up for these arguments' types (loaded from the
        cache, or compiled under the lock, once per process and ``key``, what decides the types
        of A's and M's arrays (:func:`_kinds`): every other argument is made here, always
        of one type)."""
        entries = self._entries.get(key)
        if isinstance(entries, Exception):
            raise entries
        if entries is not None:
            return entries
        with self._lock:
            if self._kernel is None:
                self._begin = (compile_source(self.source, "begin", None, fastmath=False, error_model="numpy")
                               if self.compiled_startup else None)
                self._kernel = compile_source(self.source, "loop", None, fastmath=False, error_model="numpy")
            try:
                with compiling_notice(speak):
                    loop = compile_for(self._kernel, args)
                    begin = compile_for(self._begin, self._begin_args(args)) if self.compiled_startup else None
            except numba.core.errors.TypingError as exc:   # remembered: a solve does not retry it
                self._entries[key] = LoopCompileError(
                    f"the compiled loop does not compile ({str(exc).splitlines()[0]}); loop='python' runs "
                    "this method")
                raise self._entries[key] from exc
            self._entries[key] = loop, begin
        return loop, begin

    @staticmethod
    def _begin_args(args):
        V, S, D, C, ints, floats, hist, trace, send, A, P, R = args
        return V, send, ints, floats, A, P, R

    def _startup(self, run, vec, scal, V, args, begin):
        """The start-up (compiled where it can be) and the first local dots into send;
        its SpMV counts and times handed to Python."""
        if self.compiled_startup:
            for name, expression in self.constants:
                scal[name] = eval(expression, {}, scal)
            begin(*self._begin_args(args))
        else:
            self.python.startup(run, vec, scal)
            self._bind(vec, V)
            send = args[8]
            send[:len(self.python.schedule.phases[0].pairs)] = self.python.first_dots(vec)
        ints = args[4]
        self._collect(run, *args[4:8])
        if ints[IntSlot.MPI_ERROR]:
            raise MPI.Exception(int(ints[IntSlot.MPI_ERROR]))

    # -------------------------------------------------------------- running
    def __call__(self, run):
        """Run from ``run.x`` (a solve :func:`unsupported` accepts) -> (x, iterations, reason)."""
        g, sched = self.python, self.python.schedule
        # one array per vector, not rows of one: the noalias kernels' arguments must not
        # share a buffer (nor its reference count)
        V = tuple(np.zeros(len(run.b)) for _ in self.rows)
        vec = {name: V[row] for name, row in self.rows.items()}
        vec["x"][:] = run.x
        vec["b"][:] = run.b
        run.x = vec["x"]
        scal = {}
        S = np.zeros(max(1, len(self.scalars)))
        D, send = np.zeros(self.width), np.zeros(self.width)
        C = np.zeros(self.coefficients)
        ints, floats = self._state(run)
        hist, trace = np.empty(BUFFERED), np.empty((BUFFERED * len(self.labels), 6))   # read up to their counts
        (A, A_type), (P, P_type) = _matrix(run.A), _preconditioner(run.M)
        args = (V, S, D, C, ints, floats, hist, trace, send, A, P, _reduction(run.comm))
        kernel, begin = self.kernel(args, (A_type, P_type), run.comm.Get_rank() == 0)   # no collective yet
        self._startup(run, vec, scal, V, args, begin)
        natural = g.method.norm == "natural"
        run.replacements = 0
        restarted_at, resume = None, RESUME_TOP
        try:
            while True:
                S[:] = [scal.get(name, np.nan) for name in self.scalars]
                ints[IntSlot.RESUME] = resume
                floats[FloatSlot.FLAG] = float(run.reduction.failure is not None)
                event = EVENTS[kernel(*args)]
                scal.update(zip(self.scalars, S.tolist()))
                self._collect(run, ints, floats, hist, trace)
                iteration = int(ints[IntSlot.ITERATION])
                resume = RESUME_TOP
                if event == "flush":
                    continue
                if event == "mpi_error":
                    raise MPI.Exception(int(ints[IntSlot.MPI_ERROR]))
                if event == "failed":
                    run.reduction.raise_failure()
                if event == "tested":
                    if not run.converged(iteration, float(floats[FloatSlot.RNORM])):
                        if iteration == run.maxiter:
                            return self._stop(run, vec, iteration, "diverged_its")
                        resume = RESUME_AFTER_TEST
                        continue
                    event = "converged"
                if event == "nanorinf":
                    raise Breakdown("diverged_nanorinf", "residual norm is not finite")
                if event == "maxiter":
                    return self._stop(run, vec, iteration, "diverged_its")
                before = run.replacements
                if event == "converged":
                    if run.true_residual_passes(vec["x"], natural=natural):
                        return self._stop(run, vec, iteration, run.stop_reason())
                    self._restart(run, vec, scal, V, args, begin)
                elif event == "breakdown":
                    name, condition, why = self.checks[int(ints[IntSlot.CHECK])]
                    exc = Breakdown(why, f"p-{g.method.name}: {condition} fails "
                                         f"({name} = {floats[FloatSlot.VALUE]:.3e})")
                    if not g.may_restart(iteration, restarted_at):
                        g.raise_lost_accuracy(run, vec, exc)
                        raise exc
                    self._restart(run, vec, scal, V, args, begin)
                    restarted_at = iteration
                elif event == "iterated":
                    g.end_of_iteration(run, vec, iteration)
                if iteration + 1 > run.maxiter:
                    return self._stop(run, vec, run.maxiter, "diverged_its")
                if event == "iterated" and run.replacements != before:
                    send[:len(sched.phases[0].pairs)] = g.first_dots(vec)
                ints[IntSlot.ITERATION] = iteration + 1
        except BaseException:
            run.x = vec["x"].copy()   # a breakdown's result reports x (not the loop's array)
            raise

    @staticmethod
    def _stop(run, vec, iteration, reason):
        run.x = vec["x"].copy()
        return run.x, iteration, reason

    def _restart(self, run, vec, scal, V, args, begin):
        """Start again from x, as the Python loop does (the count goes on)."""
        self._startup(run, vec, scal, V, args, begin)
        run.replacements += 1

    def _bind(self, vec, V):
        """The start-up may make new arrays: copy them into the loop's."""
        for name, value in list(vec.items()):
            if name not in self.rows:
                raise RuntimeError(f"the compiled loop has no row for vector {name!r}")
            row = V[self.rows[name]]
            if value is not row:
                row[:] = value
                vec[name] = row

    def _state(self, run):
        I, F = IntSlot, FloatSlot
        ints = np.zeros(I.SIZE, dtype=np.int64)
        ints[I.ITERATION] = run.iterations
        ints[I.DONE] = run.iterations
        ints[I.MAXITER] = run.maxiter
        ints[I.STOP_AT_TEST] = callable(run.monitor) or bool(run.monitor)
        ints[I.STOP_EVERY] = run.callback is not None
        ints[I.REPLACE_EVERY] = self.python.replace_every or 0
        ints[I.CHECK_EVERY] = self.python.check_every or 0
        ints[I.POKE_ROWS] = POKE_ROWS
        ints[I.PC_KIND] = 0 if run.M is None else 1 if isinstance(run.M, Jacobi) else 2
        ints[I.RUNS] = run.A.local.runs is not None
        ints[I.RANKS] = run.comm.Get_size()
        floats = np.zeros(F.SIZE)
        floats[F.ATOL] = run.atol
        floats[F.LATENCY] = run.reduction.latency
        return ints, floats

    def _collect(self, run, ints, floats, hist, trace):
        """Hand the buffers to Python: residual norms, reductions, timings."""
        I, F = IntSlot, FloatSlot
        run.iterations = int(ints[I.DONE])
        if ints[I.HIST]:
            run.history.extend(hist[:ints[I.HIST]].tolist())
            ints[I.HIST] = 0
        if ints[I.TRACE]:
            offset = time.perf_counter() - MPI.Wtime()
            run.reduction.record_compiled(trace[:ints[I.TRACE]], self.labels, offset)
            ints[I.TRACE] = 0
        run.A.spmv_time += floats[F.SPMV_TIME]
        run.A.spmv_count += int(ints[I.SPMVS])
        if run.M is not None:
            run.M.time += floats[F.PC_TIME]
            run.M.count += int(ints[I.PCS])
        floats[F.SPMV_TIME] = floats[F.PC_TIME] = 0.0
        ints[I.SPMVS] = ints[I.PCS] = 0


def _kinds(arrays):
    """What decides the Numba types of ``arrays`` (dtype, dimensions, contiguity, flags):
    the key under which a compiled loop is called for them without Numba's typing."""
    return tuple((a.dtype.char, a.ndim, a.flags.c_contiguous, a.flags.writeable, a.flags.aligned) for a in arrays)


def _matrix(A):
    """The loop's tuple of A's arrays and their kinds, made once per matrix."""
    if A not in _MATRICES:
        arrays = _matrix_arrays(A)
        _MATRICES[A] = arrays, _kinds(arrays)
    return _MATRICES[A]


def _matrix_arrays(A):
    local, ghost, halo = A.local, A.ghost, A.halo
    runs = local.runs
    if runs is None:
        empty = np.zeros(1, dtype=np.int64)
        runs_arrays = (empty, empty, np.zeros(1, np.uint8), empty, empty, np.zeros((1, 1)))
    else:
        runs_arrays = (runs.start, runs.length, runs.diagonal, runs.offsets, runs.offset_ptr, runs.values)
    requests = native.handles(halo.requests)
    return (local.indptr, local.indices, local.data, *runs_arrays, A.ghost_rows, ghost.indptr,
            ghost.indices, ghost.data, halo.send_index, halo.send_values, halo.ghost_values, requests,
            native.status_buffer(len(requests)))


# what M does not use is passed as placeholders of the same types (read by nothing)
_UNUSED = (np.zeros(1), np.zeros(1, np.int64), np.zeros(1, np.uint32), np.zeros(1), np.zeros(1, np.int64))


def _preconditioner(M):
    """(Jacobi's inverse diagonal, the ILU/IC factors' indptr, indices, data, diagonal
    positions) and their kinds."""
    dinv, indptr, indices, data, diag = _UNUSED
    if isinstance(M, Jacobi):
        dinv = M.inverse_diagonal
    elif isinstance(M, BlockJacobi):
        indptr, indices, data, diag = M.block.indptr, M.block.indices, M.block.data, M.diag
    arrays = dinv, indptr, indices, data, diag
    return arrays, _kinds(arrays)


def _reduction(comm):
    key = MPI._handleof(comm)
    if key not in _REDUCTIONS:
        _REDUCTIONS[key] = (native.handles([MPI.DOUBLE, MPI.SUM, comm]), native.handles([MPI.REQUEST_NULL]),
                            np.zeros(1, dtype=np.int32), native.status_buffer())
    return _REDUCTIONS[key]
