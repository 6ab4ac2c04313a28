"""What every controller shares: the result, and the loop one slice runs in the parallel
controllers (the serial emulation has its own loop over all slices: it is the oracle)."""
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..hooks import Checkpoint, restart_iteration, resume
from ..timeslice import TimeSlice

__all__ = ["PararealResult", "SliceFailed", "after_iteration", "drive_slice", "make_slices",
           "restore_slices", "run_identity", "summarize"]


class SliceFailed(RuntimeError):
    """Another slice failed: this one stops waiting for it."""


@dataclass
class PararealResult:
    """The outcome of a Parareal run (the same on every rank).

    ``changes[k - 1, n]`` is slice n's relative max-norm change at iteration k (NaN where
    the slice did not run); ``history[k][n]`` its end value, when kept.
    """
    u_end: np.ndarray
    controller: str
    iterations: int
    converged_at: list
    changes: np.ndarray
    fine_runs: list
    coarse_runs: list
    fine_time: list
    coarse_time: list
    wall_time: float
    restarted_from: int = -1
    history: Optional[dict] = None

    @property
    def converged(self):
        return all(c is not None for c in self.converged_at)


def make_slices(indices, u0, config, coarse, fine, hooks):
    """The TimeSlice objects of ``indices`` and the global restart iteration's inputs.

    Returns the slices, the Checkpoint hook (or None), tied to this run's identity, and
    this process's ``(intact iterations, converged)`` checkpoint summary per slice (empty without
    one)."""
    slices = [TimeSlice(n, config, coarse, fine) for n in indices]
    checkpoints = [h for h in hooks if isinstance(h, Checkpoint)]
    if not checkpoints:
        return slices, None, []
    checkpoints[0].bind(run_identity(u0, coarse, fine, config))
    return slices, checkpoints[0], [checkpoints[0].saved(n) for n in indices]


def run_identity(u0, coarse, fine, config):
    """What a checkpoint belongs to: P, the interval, the stopping tolerance, the
    propagators' types, u0, and G applied to u0 over the first slice (which carries the
    problem's parameters, a viscosity, say).  Values are kept to 9 significant digits, so
    that a resume on another CPU, rounding differently, is not refused."""
    def summary(u):
        u = np.asarray(u, dtype=float)
        return f"{list(u.shape)} {np.linalg.norm(u):.9e} {np.abs(u).max(initial=0.0):.9e}"
    return {"slices": config.slices, "t0": config.t0, "t_end": config.t_end, "tol": config.tol,
            "coarse": type(coarse).__name__, "fine": type(fine).__name__, "u0": summary(u0),
            "coarse_probe": summary(coarse(np.array(u0, dtype=float), *config.interval(0)))}


def restore_slices(slices, checkpoint, saved_everywhere):
    """Roll every slice back to the common restart iteration; returns it (-1: none)."""
    if checkpoint is None or not saved_everywhere:
        return -1
    start = restart_iteration(saved_everywhere)
    if start >= 0:
        for s in slices:
            resume(s, checkpoint, start, saved_everywhere[s.index][0])
    return start


def drive_slice(s, link, u0, hooks, restart):
    """Run slice ``s`` from iteration ``restart + 1`` to K over ``link``.

    ``link`` moves values between neighbouring slices (``receive(k)``, ``send(k, u,
    converged)``) and, in the standard (non-pipelined) controllers, ends every iteration
    with a global ``synchronize(k, converged) -> all converged``.
    """
    K = s.config.max_iterations
    if restart < 0:
        link.iteration = 0
        u_in = u0 if s.index == 0 else link.receive(0)[0]
        link.send(0, s.predict(u_in), False)
        after_iteration(hooks, s)
        if link.synchronous and link.synchronize(0, False):
            return
    for k in range(max(restart, 0) + 1, K + 1):
        link.iteration = k
        if s.converged:  # converged slices stop working; the standard ones still meet
            if not link.synchronous or link.synchronize(k, True):
                return
            continue
        fine_value = s.run_fine()
        if s.needs_input:
            u_in, stopped = link.receive(k)
            u_out, converged = s.correct(fine_value, u_in, stopped)
        else:
            u_out, converged = s.correct(fine_value)
        link.send(k, u_out, converged)
        after_iteration(hooks, s)
        if link.synchronous and link.synchronize(k, converged):
            return


def after_iteration(hooks, s):
    for hook in hooks:
        hook.after_iteration(s)


def summarize(slices, u_end, controller, config, wall_time, restart):
    """A PararealResult from all P slices (in order)."""
    K, P = config.max_iterations, config.slices
    changes = np.full((K, P), np.nan)
    for s in slices:
        for k, c in s.changes.items():
            changes[k - 1, s.index] = c
    history = None
    if config.keep_history:
        history = {k: [s.history.get(k) for s in slices] for k in range(K + 1)}
    return PararealResult(
        u_end=u_end, controller=controller,
        iterations=max(s.iteration for s in slices),
        converged_at=[s.converged_at for s in slices], changes=changes,
        fine_runs=[s.fine_runs for s in slices], coarse_runs=[s.coarse_runs for s in slices],
        fine_time=[s.fine_time for s in slices], coarse_time=[s.coarse_time for s in slices],
        wall_time=wall_time, restarted_from=restart, history=history)


def clock():
    return time.perf_counter()
