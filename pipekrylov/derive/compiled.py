"""The compiled loop at run time: a generated solver's iterations in one Numba call.

:class:`CompiledSolver` wraps a :class:`.pyloop.PythonLoop` and
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
import numpy as np
from mpi4py import MPI

from ..parallel.runtime import EVENTS, RESUME_AFTER_TEST, RESUME_BEGIN, RESUME_TOP, FloatSlot, IntSlot
from ..solvers.compiled import BUFFERED, LoopCompileError, LoopFunctions, collect, loop_state, operands, unsupported
from ..solvers.result import Breakdown
from .loopgen import loop_source, startup_source

__all__ = ["CompiledSolver", "LoopCompileError", "unsupported"]


class CompiledSolver:
    """The compiled loop of one generated solver; call it with a SolverRun, as the
    Python loop is called."""

    def __init__(self, python):
        self.python = python
        generated = python.code
        m = generated.method
        startup = {st.target for st in m.parsed_startup if st.kind in ("apply", "zero", "lincomb")}
        names = sorted(set(generated.storage) | {"x", "b"} | set(m.constants) | startup)
        self.rows = {name: row for row, name in enumerate(names)}
        begin = startup_source(generated, self.rows)
        self.compiled_startup = begin is not None
        self.source, self.scalars, self.checks = loop_source(generated, self.rows, self.compiled_startup)
        self.source += begin or ""
        self.constants = [(st.target, compile(st.expression, st.target, "eval"))
                          for st in m.parsed_startup if st.kind == "scalar"]
        self.functions = LoopFunctions(self.source, ["loop", "begin"] if self.compiled_startup else ["loop"])
        K = len(generated.segments)
        self.labels = [f"reduction {k}" for k in range(K)]
        self.width = 1 + max(len(ph.pairs) for ph in generated.schedule.phases)
        self.coefficients = (K, max(1, max(len(seg.scalars) for seg in generated.segments)))

    def kernel(self, args, key, speak):
        """The compiled loop and start-up (None where the start-up runs in Python)."""
        calls = [("loop", args)] + ([("begin", self._begin_args(args))] if self.compiled_startup else [])
        return (*self.functions.get(key, speak, calls), None)[:2]

    @staticmethod
    def _begin_args(args):
        V, S, D, C, ints, floats, hist, trace, send, A, P, R = args
        return V, send, ints, floats, A, P, R

    def _startup(self, run, vec, scal, V, args, begin, state=None, first=False):
        """The start-up (compiled where it can be; a warm start's ``state`` over it in
        Python) and the first local dots into send; its SpMV counts and times handed to
        Python.  Returns where the next loop call starts: at a solve's ``first`` start-up
        the compiled one is left to that call (RESUME_BEGIN)."""
        if self.compiled_startup and state is None:
            for name, expression in self.constants:
                scal[name] = eval(expression, {}, scal)
            if first:
                return RESUME_BEGIN
            begin(*self._begin_args(args))
        else:
            self.python.startup(run, vec, scal, state)
            self._bind(vec, V)
            send = args[8]
            send[:len(self.python.schedule.phases[0].pairs)] = self.python.first_dots(vec)
        ints = args[4]
        collect(run, *args[4:8], self.labels)
        if ints[IntSlot.MPI_ERROR]:
            raise MPI.Exception(int(ints[IntSlot.MPI_ERROR]))
        return RESUME_TOP

    # -------------------------------------------------------------- running
    def __call__(self, run, state=None):
        """Run from ``run.x`` (a solve :func:`unsupported` accepts) -> (x, iterations,
        reason); ``state`` is a warm start, as for the Python loop (its first residual,
        that of the iteration the count goes on from, is tested but not reported)."""
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
        ints, floats = loop_state(run, self.python.code.replace_every or 0, self.python.code.check_every or 0)
        hist, trace = np.empty(BUFFERED), np.empty((BUFFERED * len(self.labels), 6))   # read up to their counts
        A, P, R, key = operands(run)
        args = (V, S, D, C, ints, floats, hist, trace, send, A, P, R)
        kernel, begin = self.kernel(args, key, run.comm.Get_rank() == 0)   # no collective yet
        resume = self._startup(run, vec, scal, V, args, begin, state, first=True)
        natural = g.method.norm == "natural"
        warm = state is not None   # until its first test: stop there, test in Python
        report = ints[IntSlot.STOP_AT_TEST]
        ints[IntSlot.STOP_AT_TEST] |= warm
        run.replacements = 0
        restarted_at = None
        try:
            while True:
                S[:] = [scal.get(name, np.nan) for name in self.scalars]
                ints[IntSlot.RESUME] = resume
                floats[FloatSlot.FLAG] = float(run.reduction.failure is not None)
                event = EVENTS[kernel(*args)]
                scal.update(zip(self.scalars, S.tolist()))
                collect(run, ints, floats, hist, trace, self.labels)
                iteration = int(ints[IntSlot.ITERATION])
                resume = RESUME_TOP
                if event == "flush":
                    continue
                if event == "mpi_error":
                    raise MPI.Exception(int(ints[IntSlot.MPI_ERROR]))
                if event == "failed":
                    run.reduction.raise_failure()
                if event == "tested" and warm:
                    warm, ints[IntSlot.STOP_AT_TEST] = False, report
                    if float(floats[FloatSlot.RNORM]) <= run.atol:
                        event = "converged"
                    else:
                        if iteration == run.maxiter:
                            return self._stop(run, vec, iteration, "diverged_its")
                        resume = RESUME_AFTER_TEST
                        continue
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
