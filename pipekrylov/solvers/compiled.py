"""The Python side of the compiled solver loops, shared by the classic methods' and the
derived methods' (:mod:`pipekrylov.derive.compiled`).

A compiled loop is a Numba function written on :mod:`pipekrylov.parallel.runtime`.  Its
driver hands it the solve's operands as tuples of arrays (:func:`operands`), its state
(:func:`loop_state`), buffers for the residual norms and the trace, and reads them back
(:func:`collect`) when the loop returns an event.  :class:`LoopFunctions` compiles a
loop's module once per process and kind of operands, and calls the compiled functions
directly (Numba's dispatcher typed a tuple of many arrays in Python at every call).
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
from ..parallel.runtime import FloatSlot, IntSlot
from ..parallel.runtime import EVENTS, RESUME_AFTER_TEST, RESUME_TOP, runtime_source
from ..precond import BlockJacobi, Jacobi
from .result import Breakdown

__all__ = ["BUFFERED", "POKE_ROWS", "LOOPS", "LoopCompileError", "LoopFunctions", "ClassicLoop", "classic_source",
           "fused_call", "fused_import", "loop_choice",
           "unsupported", "check_loop", "run_on_loop", "operands", "loop_state", "collect", "kinds"]

LOOPS = ("auto", "compiled", "python")

_MATRICES = weakref.WeakKeyDictionary()   # DistributedCSR -> the loop's tuple of its arrays, their kinds
_REDUCTIONS = {}                          # communicator handle -> the loop's reduction handles, scratch

BUFFERED = 2048   # iterations of residual norms and trace kept in compiled code between two hand-backs
POKE_ROWS = 4096  # rows of the SpMV and Jacobi between two MPI_Test pokes of an outstanding reduction


class LoopCompileError(TypeError):
    """Numba cannot type a method's compiled loop (``loop="auto"`` then runs the Python loop)."""


def unsupported(run):
    """Why this solve cannot run on the compiled loop (None: it can)."""
    if not isinstance(run.A, DistributedCSR):
        return f"A is a {type(run.A).__name__}, not a DistributedCSR or a matrix"
    if run.M is not None and type(run.M) not in (Jacobi, BlockJacobi):   # a subclass may apply otherwise
        return "M is a user operator (the compiled loop applies 'jacobi', 'ilu0', 'ic0' or none)"
    try:
        native.library()
    except RuntimeError as exc:
        return str(exc)
    return None


def check_loop(loop):
    if loop not in LOOPS:
        raise ValueError(f"loop must be one of {', '.join(map(repr, LOOPS))}, got {loop!r}")


def loop_choice(run, loop, why=None):
    """``"compiled"`` where ``loop`` and the solve allow the compiled loop (``why``: why it
    cannot, when the caller knows; else :func:`unsupported` says), else ``"python"``;
    ``loop="compiled"`` on a solve it cannot run raises ValueError saying why."""
    if loop == "python":
        return "python"
    why = why or unsupported(run)
    if why is None:
        return "compiled"
    if loop == "compiled":
        raise ValueError(f"{run.method}: loop='compiled' cannot run this solve: {why}")
    return "python"


def run_on_loop(run, python, compiled, loop, why=None):
    """Run the solve on the loop :func:`loop_choice` picks (the Python loop where the
    compiled one does not compile, under ``"auto"``); ``result.loop`` says which ran."""
    chosen = compiled if loop_choice(run, loop, why) == "compiled" else python
    try:
        result = run.run(chosen)
    except LoopCompileError:   # raised before any collective, on every rank alike
        if loop != "auto":
            raise
        chosen = python
        result = run.run(chosen)
    result.loop = "python" if chosen is python else "compiled"
    return result


class LoopFunctions:
    """The functions of one loop module, compiled (or loaded from the cache) under a lock,
    once per process and ``key`` (what decides the types of the operands: :func:`kinds`;
    every other argument is made by the driver, always of one type)."""

    def __init__(self, source, names):
        self.source, self.names = source, names
        self._dispatchers = None
        self._entries = {}
        self._lock = threading.Lock()

    def get(self, key, speak, calls):
        """The compiled functions for ``calls``, ``[(name, arguments)]`` in the order of
        ``names``; a failure to type them is raised as :class:`LoopCompileError`, then
        and at every later call (a solve does not retry it)."""
        entries = self._entries.get(key)
        if isinstance(entries, Exception):
            raise entries
        if entries is not None:
            return entries
        with self._lock:
            if self._dispatchers is None:
                self._dispatchers = {name: compile_source(self.source, name, None, fastmath=False,
                                                          error_model="numpy") for name in self.names}
            try:
                with compiling_notice(speak):
                    entries = tuple(compile_for(self._dispatchers[name], args) for name, args in calls)
            except numba.core.errors.TypingError as exc:
                self._entries[key] = LoopCompileError(
                    f"the compiled loop does not compile ({str(exc).splitlines()[0]}); loop='python' runs "
                    "this method")
                raise self._entries[key] from exc
            self._entries[key] = entries
        return entries


def classic_source(title, kernels, vectors, state, reductions, begin, top, body, coefficients=1, norms=1):
    """The module of a classic method's compiled loop (source text), on the runtime.

    ``kernels``: {name: FusedKernel} the loop calls (``fused_call`` writes a call);
    ``vectors``: the vectors' names, x first; ``state``: the scalars kept in ``S`` between
    calls (and after them, whether an iteration was done); ``reductions`` per iteration;
    ``begin``, ``top`` and ``body``: the start-up, the top of an iteration (its reduction
    and the residual test; skipped when resuming after the test) and the rest, as lines
    that set ``event`` and ``break`` to end the call; ``coefficients``: the length of
    ``coef``, the fused kernels' scalars; ``norms``: the residual norms an iteration may
    record (BiCGStab's half step records a second)."""
    I = IntSlot
    names = ", ".join(vectors)
    load = ", ".join(f"S[{j}]" for j in range(len(state)))
    lines = [f"# the compiled loop of: {title}", runtime_source()]
    lines += [fused_import(k, name) for name, k in kernels.items()]
    lines += ["", "", f"def begin({names}, S, I, F, A, P, R):", *("    " + line for line in begin), "    return 0",
              "", "", f"def loop({names}, S, send, D, I, F, hist, trace, A, P, R):",
              f"    iteration = I[{I.ITERATION}]", f"    resume = I[{I.RESUME}]",
              f"    {', '.join(state)} = {load}", f"    coef, out = np.zeros({coefficients}), np.zeros(1)", "    event = -1",
              "    while True:", f"        if resume == {RESUME_TOP}:",
              f"            if I[{I.HIST}] + {norms} > hist.shape[0] or I[{I.TRACE}] + {reductions} > trace.shape[0]:",
              f"                event = {EVENTS.index('flush')}  # flush", "                break",
              *("            " + line for line in top),
              f"        resume = {RESUME_TOP}", f"        if iteration == I[{I.MAXITER}]:",
              f"            event = {EVENTS.index('maxiter')}  # maxiter", "            break",
              *("        " + line for line in body),
              f"        S[{len(state)}] = 1.0   # an iteration done", "        event = end_iteration(iteration, I)",
              "        iteration += 1", "        if event >= 0:", "            break",
              f"    I[{I.ITERATION}] = iteration", f"    {load} = {', '.join(state)}", "    return event", ""]
    return "\n".join(lines)


def fused_import(kernel, name):
    """The import of a fused kernel into a loop's module, as ``name``."""
    return f"from {kernel.module} import fused as {name}"


def fused_call(kernel, name, vectors=None, coef="coef", out="out"):
    """The call of a fused kernel in a loop's source: its vectors by name (or by the
    expressions ``vectors`` maps them to), then ``coef`` and ``out``."""
    return f"{name}({', '.join((vectors or {}).get(v, v) for v in kernel.vectors)}, {coef}, {out})"


class ClassicLoop:
    """A classic method's compiled loop, run on a SolverRun as its Python loop runs.

    ``source`` defines ``begin(*vectors, S, I, F, A, P, R)`` (the start-up) and
    ``loop(*vectors, S, send, D, I, F, hist, trace, A, P, R)``, which iterates until an
    event; ``vectors(run)`` makes the method's vectors, x first; ``labels`` name the
    reductions by the trace's label index; ``breakdown(check, value)`` is the Breakdown of
    the loop's check number ``check``; ``setup(run, S)`` and ``finish(run, S)``, where
    given, set scalars of ``S`` before the start-up and read them back at the end."""

    def __init__(self, source, vectors, labels, breakdown, scalars=8, setup=None, finish=None):
        self.source, self.vectors, self.labels, self.breakdown = source, vectors, labels, breakdown
        self.scalars, self.setup, self.finish = scalars, setup, finish
        self.functions = LoopFunctions(source, ["loop", "begin"])

    def __call__(self, run):
        vectors = self.vectors(run)
        x = vectors[0]
        S, send, D = np.zeros(self.scalars), np.zeros(4), np.zeros(4)
        ints, floats = loop_state(run)
        hist, trace = np.empty(BUFFERED), np.empty((len(self.labels) * BUFFERED, 6))
        A, P, R, key = operands(run)
        args = (*vectors, S, send, D, ints, floats, hist, trace, A, P, R)
        begin_args = (*vectors, S, ints, floats, A, P, R)
        loop, begin = self.functions.get(key, run.comm.Get_rank() == 0, [("loop", args), ("begin", begin_args)])
        if self.setup is not None:
            self.setup(run, S)
        begin(*begin_args)
        try:
            return self._iterate(run, x, loop, args, ints, floats, hist, trace)
        finally:
            if self.finish is not None:
                self.finish(run, S)

    def _iterate(self, run, x, loop, args, ints, floats, hist, trace):
        I, F = IntSlot, FloatSlot
        resume = RESUME_TOP
        while True:
            ints[I.RESUME] = resume
            floats[F.FLAG] = float(run.reduction.failure is not None)
            event = EVENTS[loop(*args)]
            collect(run, ints, floats, hist, trace, self.labels)
            iteration = int(ints[I.ITERATION])
            resume = RESUME_TOP
            if event == "mpi_error":
                raise MPI.Exception(int(ints[I.MPI_ERROR]))
            if event == "failed":
                run.reduction.raise_failure()
            if event == "tested":
                if run.converged(iteration, float(floats[F.RNORM])):
                    return x, iteration, run.stop_reason()
                resume = RESUME_AFTER_TEST
            elif event == "converged":
                return x, iteration, run.stop_reason()
            elif event == "nanorinf":
                raise Breakdown("diverged_nanorinf", "residual norm is not finite")
            elif event == "maxiter":
                return x, run.maxiter, "diverged_its"
            elif event == "breakdown":
                raise self.breakdown(int(ints[I.CHECK]), float(floats[F.VALUE]))
            elif event == "iterated":
                run.iterated(x)


def operands(run):
    """``(A, P, R, key)``: the loop's tuples of the matrix's, the preconditioner's and
    the reduction's arrays, and the key of their kinds."""
    (A, A_kinds), (P, P_kinds) = _matrix(run.A), _preconditioner(run.M)
    return A, P, _reduction(run.comm), (A_kinds, P_kinds)


def loop_state(run, replace_every=0, check_every=0):
    """The loop's integer and float state at the start of a solve."""
    I, F = IntSlot, FloatSlot
    ints = np.zeros(I.SIZE, dtype=np.int64)
    ints[I.ITERATION] = run.iterations
    ints[I.DONE] = run.iterations
    ints[I.MAXITER] = run.maxiter
    ints[I.STOP_AT_TEST] = callable(run.monitor) or bool(run.monitor)
    ints[I.STOP_EVERY] = run.callback is not None
    ints[I.REPLACE_EVERY] = replace_every
    ints[I.CHECK_EVERY] = check_every
    ints[I.POKE_ROWS] = POKE_ROWS
    ints[I.PC_KIND] = 0 if run.M is None else 1 if isinstance(run.M, Jacobi) else 2
    ints[I.RUNS] = run.A.local.runs is not None
    ints[I.RANKS] = run.comm.Get_size()
    floats = np.zeros(F.SIZE)
    floats[F.ATOL] = run.atol
    floats[F.LATENCY] = run.reduction.latency
    return ints, floats


def collect(run, ints, floats, hist, trace, labels):
    """Hand the loop's buffers to Python: residual norms, reductions (``labels`` by the
    trace's label index), timings."""
    I, F = IntSlot, FloatSlot
    run.iterations = int(ints[I.DONE])
    if ints[I.HIST]:
        run.history.extend(hist[:ints[I.HIST]].tolist())
        ints[I.HIST] = 0
    if ints[I.TRACE]:
        offset = time.perf_counter() - MPI.Wtime()
        run.reduction.record_compiled(trace[:ints[I.TRACE]], labels, offset)
        ints[I.TRACE] = 0
    run.A.spmv_time += floats[F.SPMV_TIME]
    run.A.spmv_count += int(ints[I.SPMVS])
    if run.M is not None:
        run.M.time += floats[F.PC_TIME]
        run.M.count += int(ints[I.PCS])
    floats[F.SPMV_TIME] = floats[F.PC_TIME] = 0.0
    ints[I.SPMVS] = ints[I.PCS] = 0



def kinds(arrays):
    """What decides the Numba types of ``arrays`` (dtype, dimensions, contiguity, flags):
    the key under which a compiled loop is called for them without Numba's typing."""
    return tuple((a.dtype.char, a.ndim, a.flags.c_contiguous, a.flags.writeable, a.flags.aligned) for a in arrays)


def _matrix(A):
    """The loop's tuple of A's arrays and their kinds, made once per matrix."""
    if A not in _MATRICES:
        arrays = _matrix_arrays(A)
        _MATRICES[A] = arrays, kinds(arrays)
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
    return arrays, kinds(arrays)


def _reduction(comm):
    key = MPI._handleof(comm)
    if key not in _REDUCTIONS:
        _REDUCTIONS[key] = (native.handles([MPI.DOUBLE, MPI.SUM, comm]), native.handles([MPI.REQUEST_NULL]),
                            np.zeros(1, dtype=np.int32), native.status_buffer())
    return _REDUCTIONS[key]
