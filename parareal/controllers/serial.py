"""The serial emulation of Parareal: every slice in turn, iteration by iteration.

It is the oracle the parallel controllers must reproduce, and the way to study
Parareal's convergence on one core.
"""
import numpy as np

from .common import after_iteration, clock, make_slices, summarize

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

    Returns
    -------
    PararealResult
    """
    start = clock()
    slices, _, _ = make_slices(range(config.slices), config, coarse, fine, ())
    u = np.asarray(u0, dtype=float)
    for s in slices:
        u = s.predict(u)
        after_iteration(hooks, s)
    for _ in range(config.max_iterations):
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
    result = summarize(slices, slices[-1].u_out, "serial", config, clock() - start, -1)
    for hook in hooks:
        hook.at_end(result, slices)
    return result

