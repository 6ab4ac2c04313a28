"""The steps every loop takes alike: the tolerance from the first reduction, the residual
test and its confirmation, a breakdown, the end of an iteration, room in the buffers, M
or nothing."""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.basis import copy
from ..kernels.compile import hot
from .layout import (ATOL, ATOL_GIVEN, BAD_RHS, BNORM, BREAKDOWN, CHECK, CONVERGED, DIVERGED, DIVTOL, DONE, HIST,
                     ITERATED, NANORINF, NONE, RESTART, RNORM, RTOL, STOP_AT_TEST, STOP_EVERY, TESTED, TRACE, VALUE,
                     ZERO_RHS)
from .operators import apply_operator, precondition
from .reduce import allreduce

__all__ = ["tolerance", "residual_test", "confirm", "confirmed", "confirmed_for_driver", "breakdown",
           "end_iteration", "room", "precondition_or_copy"]

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
    driver records and tests it), else recorded, then NANORINF, CONVERGED, DIVERGED or
    NONE (PETSc's order of the tests)."""
    F[RNORM] = rnorm
    if I[STOP_AT_TEST] != 0:
        return TESTED
    hist[I[HIST]] = rnorm
    I[HIST] += 1
    if not np.isfinite(rnorm):
        return NANORINF
    if rnorm <= F[ATOL]:
        return CONVERGED
    if rnorm >= F[DIVTOL] * F[BNORM]:
        return DIVERGED
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
    it): CONVERGED, else NONE, its norm in F[VALUE].  The test is scipy's, on the 2-norm,
    ``||b - A x|| <= max(atol, rtol ||b||)``, for a method that tests the natural norm
    ``||r||_M`` too (what its recurrences give cheaply): its reduction then carries ``||b||``
    as well, and a miss tightens the natural norm's tolerance by the ratio it missed by, so
    that the iterations go on to where the 2-norm passes.  Collective: an operator
    application, one blocking reduction."""
    apply_operator(A, x, r, R, -1, I, F)
    _residual(b=b, r=r, coef=z, out=z)     # r = b - A x (a kernel with no scalars, no dots)
    R.send[slot, 0] = dot(r, r)
    count = 1
    if natural:
        R.send[slot, 1] = dot(b, b)
        count = 2
    event = allreduce(R, slot, count, label, I, F, trace)
    if event != NONE:
        return event
    true = np.sqrt(max(R.recv[slot, 0], 0.0))
    F[VALUE] = true
    target = F[ATOL]
    if natural:
        target = max(F[ATOL_GIVEN], F[RTOL] * np.sqrt(max(R.recv[slot, 1], 0.0)))
    if true <= target:
        return CONVERGED
    if natural:
        F[ATOL] *= 0.9 * target / true
    return NONE


@hot
def confirmed(A, P, x, b, r, scratch, R, label, I, F, hist, trace):
    """A classic method's confirmation of a test that passed: CONVERGED where ``b - A x``
    passes too, else NONE with ``b - A x`` in ``r`` (to start again from) and its norm as
    the history's last (where the loop records the history).  Collective."""
    event = confirm(A, P, x, b, r, scratch, False, R, 0, label, I, F, trace)
    if event == NONE and I[STOP_AT_TEST] == 0 and I[HIST] > 0:
        hist[I[HIST] - 1] = F[VALUE]
    return event


@hot
def confirmed_for_driver(A, P, x, b, r, scratch, R, label, I, F, hist, trace):
    """``confirmed`` for a test the driver made (the loop resumed at CONFIRM): CONVERGED,
    else RESTART, the driver putting the norm in the history and resuming FROM_X."""
    event = confirmed(A, P, x, b, r, scratch, R, label, I, F, hist, trace)
    return RESTART if event == NONE else event


@hot
def precondition_or_copy(P, r, z, R, slot, I, F, preconditioned):
    """``z = M r``, or ``z = r`` without a preconditioner (for a loop whose recurrences keep
    ``M r`` apart from ``r`` either way)."""
    if preconditioned:
        precondition(P, r, z, R, slot, I, F)
    else:
        copy(r, z)      # compiled, also where the loop runs interpreted
