"""The one event driver of every loop: call the loop, handle the event it returns in
Python, call it again where it stopped; then pack the result.

Without a monitor or a callback a solve is one call of the loop, and the driver only reads
its buffers and builds the result.  What needs Python (a monitor line, a callback, full
buffers, an error on some rank, a breakdown's message, a method's own events) ends a
call with an event (:data:`pipekrylov.runtime.layout.EVENTS`); a method's own events and
decisions go to its :class:`~pipekrylov.loops.LoopSpec`'s hooks.
"""
import sys
import time

from collections import namedtuple

import numpy as np

from ..parallel.errors import raise_on_any
from ..runtime import layout as L
from .result import REASONS, Breakdown, SolveResult

__all__ = ["Run", "Finished", "drive", "run_events", "result", "raise_event", "Trace", "Event"]

Event = namedtuple("Event", "kind label start end id")
"""One event of a solve's reductions, in ``time.perf_counter`` seconds: kind 'start',
'work' (the local work overlapping a reduction) or 'wait' (end - start: the time the
wait blocked); id numbers the reductions."""


class Finished(Exception):
    """Raised by a method's hook to end the solve with ``reason`` (and ``message``)."""

    def __init__(self, reason, message=None):
        super().__init__(message or reason)
        self.reason, self.message = reason, message


class Run:
    """One solve as the driver and the hooks see it: the solver, the iterate and the
    right-hand side, the user's callback and monitor, the residual norms and trace rows
    taken from the loop's buffers, and whether the next residual test is a warm start's
    (tested, not reported)."""

    def __init__(self, solver, x, b, callback, monitor, t0):
        self.solver, self.x, self.b = solver, x, b
        self.callback, self.monitor, self.t0 = callback, monitor, t0
        self.history, self.rows = [], []
        self.warm = False

    def collect(self):
        """Take the loop's buffers: residual norms and reductions."""
        solver = self.solver
        I = solver.I
        norms, rows = I.item(L.HIST), I.item(L.TRACE)
        if norms:
            self.history.append(solver.hist[:norms].copy())
            I[L.HIST] = 0
        if rows:
            self.rows.append(solver.trace[:rows].copy())
            I[L.TRACE] = 0

    def record(self, rnorm):
        self.history.append(np.array([rnorm]))

    def replace_last(self, rnorm):
        """The last residual norm recorded was not confirmed by b - A x: the true one replaces it."""
        self.collect()
        if self.history:
            last = self.history[-1].copy()
            last[-1] = rnorm
            self.history[-1] = last

    def note(self, message):
        """An event worth a line in a printing monitor (a restart, say); rank 0 prints it."""
        monitor = self.monitor
        if monitor and not callable(monitor) and self.solver.comm.Get_rank() == 0:
            _print(self.solver, f"     {self.solver.method}: {message}", monitor)


def drive(solver, x, b, callback, monitor, t0):
    """Run ``solver``'s loop from ``x`` on ``b`` to the end of the solve: a SolveResult."""
    run = Run(solver, x, b, callback, monitor, t0)
    message = None
    try:
        solver.spec.begin(solver, run)
        reason, message = run_events(solver, run)
    except Breakdown as exc:
        _drain(solver)   # a hook's breakdown between the loop's calls: its reductions in flight
        solved, rnorm = _solved_to_rounding(solver, x, b)
        run.replace_last(rnorm)   # the residual reported is b - A x's, not the recurrence's
        if solved:
            reason, message = "converged_atol", f"b - A x at the rounding level where the recurrence broke down ({exc})"
        else:
            reason, message = exc.reason, str(exc)
    except Finished as end:
        reason, message = end.reason, end.message
    if callback is not None or monitor or solver.loop == "python":
        # user code may have failed after the last reduction: one flag Allreduce, made
        # by every rank of a solve that ran any (else none is needed), raises it everywhere
        _agree(solver)
    elif solver.failures:   # another thread's solve, refused after the last reduction (rank-local)
        raise solver.failures[0]
    I = solver.I
    iterations = I.item(L.MAXITER if reason == "diverged_its" else L.DONE)
    history = run.history
    history = history[0] if len(history) == 1 else np.concatenate(history) if history else np.empty(0)
    return result(solver, x, iterations, reason, message, history, run.rows, t0)


def run_events(solver, run):
    """Call ``solver``'s loop until the solve ends: ``(reason, message)``.  Raises a
    Breakdown, a hook's Finished, or the error every rank raises."""
    spec, I, F = solver.spec, solver.I, solver.F
    entry = solver.entry
    args = solver._arguments(run.x, run.b)
    while True:
        event = entry(*args)
        run.collect()
        if event == L.CONVERGED:
            return _stop_reason(F), None
        if event == L.TESTED:
            rnorm = float(F[L.RNORM])
            warm, run.warm = run.warm, False
            if not warm:
                run.record(rnorm)
                _monitor(solver, run.monitor, int(I[L.DONE]), rnorm)
            if not np.isfinite(rnorm):
                _nanorinf(solver, run.x)
            if rnorm > F[L.ATOL] and rnorm >= F[L.DIVTOL] * F[L.BNORM]:
                _drain(solver)
                return _diverged(F)
            resume = spec.after_test(solver, rnorm <= F[L.ATOL])
            if resume is None:
                return _stop_reason(F), None
            if warm:
                I[L.STOP_AT_TEST] = callable(run.monitor) or bool(run.monitor)
            I[L.RESUME] = resume
        elif event == L.MAX_ITERATIONS:
            return "diverged_its", None
        elif event == L.ITERATED:
            spec.iterated(solver, run)
            if run.callback is not None:
                _callback(solver, run.callback, run.x)
        elif event == L.NANORINF:
            _nanorinf(solver, run.x)
        elif event == L.DIVERGED:
            _drain(solver)
            return _diverged(F)
        elif event == L.BREAKDOWN:
            exc = spec.breakdown(int(I[L.CHECK]), float(F[L.VALUE]))
            if not spec.broke_down(solver, run, exc):
                if I[L.ITERATION] > I[L.MAXITER]:
                    return "diverged_its", None
                raise exc
        elif event == L.ZERO_RHS:
            run.x[:] = 0.0
            run.history[:] = [np.zeros(1)]
            return "converged_atol", "b is zero: x = 0"
        elif event == L.FLUSH:
            pass
        elif event in (L.RESTART, L.STARTED, L.ESTIMATE):
            spec.event(solver, run, event)
        else:
            raise_event(solver, event)


def _drain(solver):
    """Complete the loop's reductions in flight (a solve that ends between two of its
    calls), on every rank alike."""
    if (solver.R.row >= 0).any():
        from ..runtime.reduce import drain
        drain(solver.R, solver.I, solver.F, solver.trace)


def _diverged(F):
    return "diverged_dtol", f"residual norm {F[L.RNORM]:.3e} reached divtol ||b|| = {F[L.DIVTOL] * F[L.BNORM]:.3e}"


def _stop_reason(F):
    atol, rtol, bnorm = F.item(L.ATOL), F.item(L.RTOL), F.item(L.BNORM)
    return "converged_atol" if atol > rtol * bnorm or atol == 0 else "converged_rtol"


def _stream(monitor):
    return monitor if hasattr(monitor, "write") else sys.stdout


def _monitor(solver, monitor, iteration, rnorm):
    if callable(monitor):
        try:
            monitor(iteration, rnorm)
        except BaseException as exc:  # noqa: BLE001 - raised on every rank at the next reduction
            _failed(solver, exc, "monitor")
    elif solver.comm.Get_rank() == 0:
        _print(solver, f"{iteration:4d} KSP Residual norm {rnorm:.12e}", monitor)


def _print(solver, line, monitor):
    """A monitor's line, on rank 0: a file that cannot take it (closed, read-only, a full
    disk) fails the solve on every rank, as a monitor that raises does."""
    if solver.failures:
        return   # the solve ends with an error at the next reduction: no more lines
    try:
        print(line, file=_stream(monitor), flush=True)
    except Exception as exc:  # noqa: BLE001 - raised on every rank at the next reduction
        _failed(solver, exc, "monitor")


def _callback(solver, callback, x):
    try:
        callback(solver.A.gather(x) if solver.whole else x)
    except BaseException as exc:  # noqa: BLE001 - raised on every rank at the next reduction
        _failed(solver, exc, "callback")


def _failed(solver, exc, what):
    """User code raised on this rank: flag it; the next reduction tells every rank, which
    raise it as the original exception (one rank alone raises at once).  A
    KeyboardInterrupt or SystemExit too: the ranks stop together (the others raise an
    error naming it: :func:`~pipekrylov.parallel.errors.raise_on_any`)."""
    if hasattr(exc, "add_note"):   # Python >= 3.11: the failing rank's traceback says so
        exc.add_note(f"raised by the {what} given to {solver.method}, on rank {solver.comm.Get_rank()}")
    solver.failures.append(exc)
    solver.F[L.FLAG] = 1.0
    if solver.comm.Get_size() == 1:
        raise exc


def _nanorinf(solver, x):
    """A residual norm that is not finite: from an x0 with entries that are not (at the
    first test: say so, on every rank), else a breakdown."""
    if solver.I[L.DONE] == solver.I[L.FIRST] and solver.x0_given:
        error = ValueError("x0 has non-finite entries") if not np.isfinite(x).all() else None
        if solver.comm.Get_size() == 1:
            if error:
                raise error
        else:
            raise_on_any(solver.comm, error)
    raise Breakdown("diverged_nanorinf", "residual norm is not finite")


def raise_event(solver, event):
    """The events that end a solve with an exception on every rank."""
    if event == L.FAILED:
        _agree(solver)
        raise RuntimeError("a rank's failure flag was set, but no rank reports an error")
    if event == L.DISAGREE:
        from .inputs import raise_different_calls
        raise_different_calls(solver.comm, solver.method, solver.call)
    if event == L.BAD_RHS:
        raise ValueError("b has non-finite entries")
    if event == L.MPI_FAILED:
        from mpi4py import MPI
        raise MPI.Exception(int(solver.I[L.MPI_ERROR]))
    raise RuntimeError(f"{solver.method}: unexpected event {L.EVENTS[event]!r} from the loop")


def _agree(solver):
    """Raise this solve's failures on every rank, as the original exception.  Collective."""
    error = solver.failures[0] if solver.failures else None
    solver.failures.clear()
    solver.F[L.FLAG] = 0.0
    if solver.comm.Get_size() == 1:
        if error is not None:
            raise error
        return
    raise_on_any(solver.comm, error)


def _solved_to_rounding(solver, x, b):
    """A breakdown of the recurrences once ``b - A x`` is down to its own rounding error
    (as with rtol = atol = 0, run to the exact solution) is the solution, not a failure:
    ``(solved, ||b - A x||)``.  Collective: one operator application, one reduction."""
    r = b - solver.apply("A", x, np.empty_like(x))
    rr, xx = solver.reduce([r @ r, x @ x], "true ||r|| at a breakdown")
    eps, rnorm, bnorm = np.finfo(float).eps, np.sqrt(rr), solver.F[L.BNORM]
    floor = eps * (solver.norm_inf_a * np.sqrt(xx) + bnorm)
    if rnorm <= solver.F[L.ATOL]:
        return True, rnorm
    # below the tolerance asked only where that is below rounding; and never where x has
    # run off into a null space (a singular A: the floor grows with ||x||, ||r|| does not)
    return bool(np.isfinite(floor) and rnorm <= 10 * floor and rnorm <= np.sqrt(eps) * bnorm), rnorm


def result(solver, x, iterations, reason, message, history, rows, t0):
    """The SolveResult of a solve that ended with ``reason``; its timings and trace are
    made when first read."""
    if reason == "diverged_its":
        info = iterations
        message = message or f"{iterations} iterations without converging"
    elif REASONS[reason] > 0:
        info = 0
        message = message or "converged"
    else:
        info = REASONS[reason]
    I, F = solver.I, solver.F
    counts = (time.perf_counter() - t0, F.item(L.SPMV_TIME), I.item(L.SPMVS),
              F.item(L.PC_TIME) if solver.M is not None else 0.0)
    labels = solver.spec.labels

    def details():
        trace = Trace(rows, labels)
        total, spmv, spmvs, pc = counts
        return {"reductions": trace,
                "timings": {"total": total, "spmv": spmv, "spmv_count": spmvs, "pc": pc,
                            "reductions_blocked": trace.blocked_time, "reductions": trace.count}}
    out = solver.A.gather(x) if solver.whole else x
    details = {"reason": reason, "message": message, "iterations": iterations, "residual_norms": history,
               "method": solver.method, "loop": solver.loop, "replacements": I.item(L.REPLACEMENTS),
               "restarts": I.item(L.RESTARTS), "_details": details}
    details.update(solver.spec.report(solver))
    return SolveResult.of(out, info, details)


class Trace:
    """The reductions of one solve, from the loop's trace rows: ``count``,
    ``blocked_time`` and, made when first read, ``events`` (:data:`Event`; label ``k``
    of a row is ``labels[k]``)."""

    def __init__(self, rows, labels):
        self.rows = np.concatenate(rows) if len(rows) > 1 else rows[0] if rows else np.empty((0, 6))
        self.labels = labels
        self.count = len(self.rows)
        self.blocked_time = float((self.rows[:, 4] - self.rows[:, 3]).sum()) if self.count else 0.0
        self._events = None

    @property
    def events(self):
        if self._events is None:
            from mpi4py import MPI
            shift = time.perf_counter() - MPI.Wtime()   # the perf_counter time of MPI_Wtime's values
            events = []
            for j, (t_start, w0, w1, t0, t1, k) in enumerate(self.rows.tolist()):
                label = self.labels[int(k)]
                events.append(Event("start", label, t_start + shift, t_start + shift, j + 1))
                if w1 > w0:   # a blocking reduction overlaps nothing
                    events.append(Event("work", "overlap", w0 + shift, w1 + shift, None))
                events.append(Event("wait", label, t0 + shift, t1 + shift, j + 1))
            self._events = events
        return self._events

    def summary(self):
        waits = [e for e in self.events if e.kind == "wait"]
        return {"reductions": self.count, "blocked_time": self.blocked_time,
                "waits": len(waits), "max_blocked": max((e.end - e.start for e in waits), default=0.0)}
