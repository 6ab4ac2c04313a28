"""The steps every loop takes alike: the tolerance from the first reduction, the residual
test and its confirmation, a breakdown, the end of an iteration, room in the buffers."""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.compile import hot
from .layout import (ATOL, ATOL_GIVEN, BAD_RHS, BNORM, BREAKDOWN, CHECK, CONVERGED, DONE, HIST, ITERATED,
                     NANORINF, NONE, RNORM, RTOL, STOP_AT_TEST, STOP_EVERY, TESTED, TRACE, VALUE, ZERO_RHS)
from .operators import apply_operator, precondition
from .reduce import allreduce

__all__ = ["tolerance", "residual_test", "confirm", "breakdown", "end_iteration", "room"]

_residual = fused_kernel(["r = b - r"]).function


@hot
def tolerance(bb, I, F):
    """From ``bb = ||b||^2`` (the first reduction carries it): the test's tolerance
    ``max(atol, rtol ||b||)`` (scipy's rule).  ZERO_RHS for b = 0 (x = 0 solves it),
    BAD_RHS where b has entries that are not finite, else NONE."""
    if not np.isfinite(bb):
        return BAD_RHS
    F[BNORM] = np.sqrt(bb)
    F[ATOL] = max(F[ATOL_GIVEN], F[RTOL] * F[BNORM])
    if bb == 0.0:
        return ZERO_RHS
    return NONE


@hot
def residual_test(rnorm, hist, I, F):
    """The test of residual norm ``rnorm``: TESTED where each test is reported (the
    driver records and tests it), else recorded, then NANORINF, CONVERGED or NONE."""
    F[RNORM] = rnorm
    if I[STOP_AT_TEST] != 0:
        return TESTED
    hist[I[HIST]] = rnorm
    I[HIST] += 1
    if not np.isfinite(rnorm):
        return NANORINF
    if rnorm <= F[ATOL]:
        return CONVERGED
    return NONE


@hot
def breakdown(check, value, I, F):
    """Breakdown check ``check`` failed at ``value`` (the method names its reason)."""
    I[CHECK] = check
    F[VALUE] = value
    return BREAKDOWN


@hot
def end_iteration(iteration, I):
    """Count iteration ``iteration`` done: ITERATED where each is reported, else NONE."""
    I[DONE] = iteration + 1
    if I[STOP_EVERY] != 0:
        return ITERATED
    return NONE


@hot
def room(norms, reductions, hist, trace, I):
    """Whether the buffers hold an iteration's ``norms`` and ``reductions`` more."""
    return I[HIST] + norms <= hist.shape[0] and I[TRACE] + reductions <= trace.shape[0]


@hot
def confirm(A, P, x, b, r, z, natural, R, slot, label, I, F, trace):
    """Whether ``b - A x`` passes the test too (a pipelined method's recurrences drift from
    it): CONVERGED, else NONE; its norm in F[VALUE] (``||.||_M`` with ``natural``).
    Collective: an operator application (and M's), one blocking reduction."""
    apply_operator(A, x, r, R, -1, I, F)
    _residual(b=b, r=r, coef=z, out=z)     # r = b - A x (a kernel with no scalars, no dots)
    if natural:
        precondition(P, r, z, R, -1, I, F)
        R.send[slot, 0] = dot(r, z)
    else:
        R.send[slot, 0] = dot(r, r)
    event = allreduce(R, slot, 1, label, I, F, trace)
    if event != NONE:
        return event
    true = np.sqrt(max(R.recv[slot, 0], 0.0))
    F[VALUE] = true
    if true <= F[ATOL]:
        return CONVERGED
    return NONE
