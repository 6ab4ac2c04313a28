"""The serial emulation of Parareal: every slice in turn, iteration by iteration.

It is the oracle the parallel controllers must reproduce, and the way to study
Parareal's convergence on one core.
"""
import numpy as np

from .common import after_iteration, clock, make_slices, restore_slices, summarize

__all__ = ["run_serial"]


def run_serial(u0, coarse, fine, config, hooks=()):
    """Parareal with all slices in this process, in order.

    Parameters
    ----------
    u0 : ndarray
        Initial value at ``config.t0``.
    coarse, fine : callable ``(u, t0, t1) -> u``
        The propagators G and F.
    config : PararealConfig
    hooks : sequence of Hook
        A :class:`~parareal.hooks.Checkpoint` makes the run resume from the files it
        finds (the run's identity must match).

    Returns
    -------
    PararealResult
    """
    start = clock()
    u = np.asarray(u0, dtype=float)
    slices, checkpoint, saved = make_slices(range(config.slices), u, config, coarse, fine, hooks)
    restart = restore_slices(slices, checkpoint, saved)
    if restart < 0:
        for s in slices:
            u = s.predict(u)
            after_iteration(hooks, s)
    for _ in range(config.max_iterations - max(restart, 0)):
        if all(s.converged for s in slices):
            break
        for s, predecessor in zip(slices, [None] + slices[:-1]):
            if s.converged:
                continue
            fine_value = s.run_fine()
            if s.needs_input:  # the predecessor has just done this iteration
                s.correct(fine_value, predecessor.u_out, predecessor.converged)
            else:
                s.correct(fine_value)
            after_iteration(hooks, s)
    result = summarize(slices, slices[-1].u_out, "serial", config, clock() - start, restart)
    for hook in hooks:
        hook.at_end(result, slices)
    return result

