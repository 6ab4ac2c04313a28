"""Classic restarted GMRES(m), right preconditioned, by classical Gram-Schmidt twice with
the second pass put off to the next step (DCGS2, the default: one blocking reduction a
step), twice in each step (CGS2: one reduction a pass) or once (CGS, PETSc's default).
``||w||`` travels in the last pass's reduction (``||w - V c||^2 = ||w||^2 - ||c||^2``:
V is orthonormal); where that pass took much of w (``||c||^2`` above a quarter of
``||w||^2``, the subtraction would cancel) a reduction of its own measures it.

    beta = ||b - A x||                    (a cycle's first reduction; the solve's: (b, b) too)
    cycle: v_0 = r / beta, g = beta e_0
        for j < m: z_j = M v_j, w = A z_j
            twice (once): c = V_(j+1)^T w (one reduction), w -= V_(j+1) c, h += c
            h_(j+1) = ||w||, from the last pass's reduction;  H[:, j] = h, rotated by Givens: |g_(j+1)| estimates ||r||
            v_(j+1) = w / h_(j+1)  (h_(j+1) ~ 0: the Krylov space is invariant, a "happy" breakdown)
        x += Z_k y,  R_k y = g_k  (R: H rotated, upper triangular)

DCGS2 (:func:`_delayed_steps`; Swirydowicz, Langou, Ananthan, Yang and Thomas, "Low
synchronization Gram-Schmidt and GMRES algorithms", 2020; Bielich et al., "Low-synch
Gram-Schmidt with delayed reorthogonalization for Krylov solvers", 2022) applies A M to
the vector its first pass left and makes one reduction a step for that vector's second
pass and the next vector's first; Arnoldi's relation corrects the rest.  In exact
arithmetic its basis and iterates are CGS2's (but where a cycle ends early:
:func:`_delayed_steps`).

The norm tested is the true residual's (right preconditioning), estimated by the
rotations within a cycle; the cycle's last estimate is not recorded: the true residual
after the update is, at the top of the next cycle.  The callback sees x after each cycle.
"""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.basis import (add_combination, divide, project, project_two, subtract_combination,
                             subtract_combinations)
from ..runtime.layout import (AFTER_TEST, ATOL, BEGIN, DONE, FLUSH, HIST, ITERATED, ITERATION, MAX_ITERATIONS,
                              MAXITER, NONE, PRECONDITIONED, RESUME, RNORM, STOP_AT_TEST, STOP_EVERY, TESTED, TOP,
                              TRACE)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import allreduce
from ..runtime.steps import breakdown, residual_test, tolerance
from ..solvers.result import Breakdown
from ..kernels.compile import hot
from . import LoopSpec, loop

__all__ = ["gmres_spec", "LOOPS"]

residual = fused_kernel(["r = b - r"]).function

INNER, RESIDUAL = 6, 7       # GMRES's own resume points: after an inner test; the cycle's new residual
ZERO_COLUMN = 0              # the breakdown check: a zero column of the Hessenberg matrix
ZERO = 1e-14                 # ... its rotated diagonal relative to its norm (Gram-Schmidt twice: rounding)
ROUNDING = 1e-12             # ||w||^2 - ||e||^2 below this of ||w||^2 may be rounding's (DCGS2's prediction)
PYTHAGORAS = 0.25            # ||w||^2 - ||c||^2 is h_(j+1)^2 to rounding while ||c||^2 is at most this of ||w||^2
# the scalars kept in S: the cycle's step, its first residual norm, whether DCGS2's next
# step ends the cycle
(J, BETA, ENDS, S_SIZE) = range(4)
# Gram-Schmidt's passes, and whether the second is put off to the next step
ORTHOGONALIZATIONS = {"dcgs2": (2, True), "cgs2": (2, False), "cgs": (1, False)}


def _gmres_loop(passes, delayed):
    """The loop of GMRES orthogonalizing in ``passes`` passes, the second ``delayed`` or
    not: one function, its orthogonalization a constant of each compiled instance, so
    that Numba compiles only the steps a solve asks for (with DCGS2's and CGS's steps in
    one loop, GMRES's first compile took 25 s, not 15)."""

    @loop
    def gmres(W, x, b, S, I, F, hist, trace, A, P, R):
        V, Z, w, H, g, cs, sn, c, y, coef, out, u, Hu, Tt = W
        m = H.shape[1]
        preconditioned = I[PRECONDITIONED] != 0
        iteration, resume = I[ITERATION], I[RESUME]
        j = int(S[J])
        event = NONE
        while True:
            if resume != INNER:
                event, resume = begin_cycle(resume, iteration, A, x, b, w, out, S, BETA, m, (passes + 1) * m + 2,
                                            V[0], g, hist, trace, R, I, F)
                if event != NONE:
                    break
                if delayed:
                    divide(V[0], 1.0, u)   # u_0 = v_0, final as it is
                    S[ENDS] = 0.0
                j = 0
            if resume == INNER:
                if delayed:
                    event, j, iteration = _delayed_steps(W, x, S, I, F, hist, trace, A, P, R, j, iteration,
                                                         preconditioned)
                else:
                    event, j, iteration = _steps(W, x, I, F, hist, trace, A, P, R, j, iteration, preconditioned,
                                                 passes)
                if event != NONE:
                    break
                _update(W, x, j, preconditioned, delayed)   # the cycle's end
                resume = RESIDUAL
                if I[STOP_EVERY] != 0:
                    event = ITERATED
                    break
        I[ITERATION] = iteration
        I[RESUME] = resume
        S[J] = j
        return event
    return gmres


LOOPS = {name: _gmres_loop(*ways) for name, ways in ORTHOGONALIZATIONS.items()}


@loop
def cycle_residual(A, x, b, w, scratch, first, S, beta, R, I, F, trace):
    """A cycle's first residual ``w = b - A x`` and its norm into ``S[beta]``, one
    reduction (label 0); the solve's first also carries ``(b, b)`` for the tolerance.
    Returns the event (the tolerance's: b = 0, b not finite)."""
    apply_operator(A, x, w, R, -1, I, F)
    residual(b=b, r=w, coef=scratch, out=scratch)
    R.send[0, 0] = dot(w, w)
    if first:
        R.send[0, 1] = dot(b, b)
    event = allreduce(R, 0, 2 if first else 1, 0, I, F, trace)
    if event != NONE:
        return event
    if first:
        event = tolerance(R.recv[0, 1], I, F)
        if event != NONE:
            return event
    S[beta] = np.sqrt(max(R.recv[0, 0], 0.0))
    return NONE


@hot
def cycle_top(resume, iteration, beta, m, reductions, hist, trace, I, F):
    """A cycle's top, from TOP: FLUSH unless the buffers hold a cycle of ``m`` norms and
    ``reductions`` reductions, then the test of the true residual norm ``beta``; from
    AFTER_TEST (the test passed to the driver, and failed) or after it, MAX_ITERATIONS
    where no iteration is left.  Returns (event, where to resume)."""
    if resume == TOP:
        if I[HIST] + m + 1 > hist.shape[0] or I[TRACE] + reductions > trace.shape[0]:
            return FLUSH, TOP
        event = residual_test(beta, hist, I, F)
        if event != NONE:
            return event, AFTER_TEST
    if iteration >= I[MAXITER]:
        return MAX_ITERATIONS, AFTER_TEST
    return NONE, AFTER_TEST


@loop
def begin_cycle(resume, iteration, A, x, b, w, scratch, S, beta, m, reductions, v0, g, hist, trace, R, I, F):
    """A restarted method's cycle begun from where the loop resumes: from BEGIN or
    RESIDUAL its first residual ``w = b - A x`` (:func:`cycle_residual`, its norm into
    ``S[beta]``), then from TOP or AFTER_TEST its test (:func:`cycle_top`), then its first
    basis vector ``v0`` and right-hand side ``g`` (:func:`open_cycle`).  Returns (event,
    where to resume): INNER where the cycle is open."""
    if resume == BEGIN or resume == RESIDUAL:
        event = cycle_residual(A, x, b, w, scratch, resume == BEGIN, S, beta, R, I, F, trace)
        if event != NONE:
            return event, resume
        resume = TOP
    event, resume = cycle_top(resume, iteration, S[beta], m, reductions, hist, trace, I, F)
    if event != NONE:
        return event, resume
    open_cycle(w, S[beta], v0, g)
    return NONE, INNER


@hot
def open_cycle(r, beta, v0, g):
    """A cycle's first basis vector ``r / beta`` and right-hand side ``beta e_0``."""
    divide(r, beta, v0)
    for k in range(g.shape[0]):
        g[k] = 0.0
    g[0] = beta


@loop
def _steps(W, x, I, F, hist, trace, A, P, R, j, iteration, preconditioned, passes):
    """A cycle's steps from step ``j`` by classical Gram-Schmidt in ``passes`` passes, one
    reduction each, ``||w||`` in the last pass's.  Returns (event, the step to resume at
    or the cycle's columns, iteration)."""
    V, Z, w, H, g, cs, sn, c, y, coef, out, u, Hu, Tt = W
    m = H.shape[1]
    event = NONE
    while j < m and iteration < I[MAXITER]:
        if preconditioned:
            precondition(P, V[j], Z[j], R, -1, I, F)
            apply_operator(A, Z[j], w, R, -1, I, F)
        else:
            apply_operator(A, V[j], w, R, -1, I, F)
        before = removed = 0.0
        for p in range(passes):
            last = p == passes - 1
            project(V, j + 1, w, R.send[0])
            if last:
                R.send[0, j + 1] = dot(w, w)
            event = allreduce(R, 0, j + 1 + last, 2 if last else 1, I, F, trace)
            if event != NONE:
                break
            for k in range(j + 1):
                c[k] = R.recv[0, k]
                H[k, j] = c[k] if p == 0 else H[k, j] + c[k]
                if last:
                    removed += c[k] * c[k]
            if last:
                before = R.recv[0, j + 1]
            subtract_combination(V, c, j + 1, w)
        if event != NONE:
            break
        if removed <= PYTHAGORAS * before:
            hnext = np.sqrt(before - removed)   # ||w - V c||, V orthonormal
        else:   # the last pass took much of w (w nearly in span V): measure it
            R.send[0, 0] = dot(w, w)
            event = allreduce(R, 0, 1, 3, I, F, trace)
            if event != NONE:
                break
            hnext = np.sqrt(max(R.recv[0, 0], 0.0))
        H[j + 1, j] = hnext
        estimate = _rotate_column(H, g, cs, sn, j, ZERO)
        if estimate < 0.0:   # A (or A M) singular on the Krylov space: keep the columns before's
            _update(W, x, j, preconditioned, False)   # least-squares update, the best x the cycle has
            event = breakdown(ZERO_COLUMN, 0.0, I, F)
            break
        iteration += 1
        j += 1
        I[DONE] = iteration
        happy = hnext <= 1e-14 * abs(H[j - 1, j - 1])
        if not happy:
            divide(w, hnext, V[j])
        if happy or j == m or iteration == I[MAXITER] or estimate <= F[ATOL]:
            break
        event = _inner_test(estimate, hist, I, F)
        if event != NONE:
            break
    return event, j, iteration


@loop
def _inner_test(estimate, hist, I, F):
    """A test within a cycle: TESTED where the driver reports each (it only reports: the
    cycle goes on), else recorded; NONE."""
    F[RNORM] = estimate
    if I[STOP_AT_TEST] != 0:
        return TESTED
    hist[I[HIST]] = estimate
    I[HIST] += 1
    return NONE


@loop
def _update(W, x, k, preconditioned, delayed):
    """x += Z_k y (V_k y unpreconditioned) with R_k y = g_k: the least-squares update of the
    cycle's first k columns.  DCGS2's Z holds M applied to U, not V (V = U T^-1): y is
    mapped by T_k^-1 first."""
    V, Z, w, H, g, cs, sn, c, y, coef, out, u, Hu, Tt = W
    _back_substitute(H, g, k, y)
    if preconditioned and delayed:
        _solve_upper(Tt, k, y)
    add_combination(Z if preconditioned else V, y, k, x)


@loop
def _delayed_steps(W, x, S, I, F, hist, trace, A, P, R, j, iteration, preconditioned):
    """A cycle's steps from step ``j`` by classical Gram-Schmidt twice, the second pass put
    off by one step (DCGS2): one reduction a step, ``V_j^T [u_j, w]``.

    ``u_j`` is ``A M v_(j-1)`` after the first pass; step j applies ``A M`` to it
    (``w``), and its one reduction gives the first pass of ``w`` and the second of
    ``u_j``: ``s = V_j^T u_j``, ``||u_j||``, ``t = V_j^T w``, ``(u_j, w)``, ``||w||``.
    Then ``h_j = ||u_j - V_j s||`` (Pythagoras, as above), column j-1 of H is final
    (``c_(j-1) + s``, ``h_j``) and tested by its rotation, and ``v_j = (u_j - V_j s) / h_j``.
    ``A M v_j = (w - V_(j+1) Hbar s) / h_j`` (Arnoldi's relation), so that its first pass
    is ``u_(j+1) = (w - V_(j+1) e) / h_j`` with ``e = V_(j+1)^T w`` (``e_j = ((u_j, w) -
    s.t) / h_j``) and ``c_j = (e - Hbar s) / h_j``.  M is applied to ``u_j`` (``Z[j]``),
    not to ``v_j``: ``V = U T^-1`` (T upper triangular, its column j ``[s; h_j]``, kept by
    rows in ``Tt``) maps the update.

    A cycle's last step applies nothing: its reduction ends the last column.  Which step
    is last: the restart's, the iteration limit's, or the one after a column whose
    residual estimate, predicted with ``||u_(j+1)||^2 = (||w||^2 - ||e||^2) / h_j^2`` for
    ``h_(j+1)`` (``s`` is at rounding level), passes the test or breaks down happily, or
    where that difference may be rounding's (below :data:`ROUNDING` of ``||w||^2``:
    ``h_(j+1)`` under 1e-6 of ``||A M v_j||``, w in the span of V to about single
    precision, a happy breakdown or near one).  So a solve applies A and M as often as
    CGS2's; where the final column fails the prediction, the cycle ends there and the
    next begins from the true residual (there DCGS2's iterates part from CGS2's).

    Returns (event, the step to resume at or the cycle's columns, iteration)."""
    V, Z, w, H, g, cs, sn, e, y, coef, out, u, Hu, Tt = W
    m = H.shape[1]
    event = NONE
    estimate = 0.0
    while True:
        final = j == m or (j > 0 and (iteration + 1 >= I[MAXITER] or S[ENDS] != 0.0))   # column j-1 the last
        if not final:
            if preconditioned:
                precondition(P, u, Z[j], R, -1, I, F)
                apply_operator(A, Z[j], w, R, -1, I, F)
            else:
                apply_operator(A, u, w, R, -1, I, F)
            project_two(V, j, u, w, R.send[0, :j], R.send[0, j + 1:2 * j + 1])
            R.send[0, 2 * j + 1] = dot(u, w)
            R.send[0, 2 * j + 2] = dot(w, w)
        else:
            project(V, j, u, R.send[0])
        R.send[0, j] = dot(u, u)
        event = allreduce(R, 0, j + 1 if final else 2 * j + 3, 5 if final else 4, I, F, trace)
        if event != NONE:
            break
        removed, alpha, beta, gamma = _received(R, Tt, e, j, final)
        reorthogonalized = False
        if j == 0:
            h = 1.0   # u_0 = v_0
        elif removed <= PYTHAGORAS * alpha:
            h = np.sqrt(alpha - removed)
        else:   # u_j nearly in span V_j: measure what the second pass leaves
            subtract_combination(V, Tt[j], j, u)
            R.send[0, 0] = dot(u, u)
            event = allreduce(R, 0, 1, 6, I, F, trace)
            if event != NONE:
                break
            h = np.sqrt(max(R.recv[0, 0], 0.0))
            reorthogonalized = True
        Tt[j, j] = h
        if j > 0:   # column j-1 final
            _end_column(H, Hu, Tt, j)
            estimate = _rotate_column(H, g, cs, sn, j - 1, ZERO)
            if estimate < 0.0:   # as in _steps: the columns before's least-squares update
                _update(W, x, j - 1, preconditioned, True)
                event = breakdown(ZERO_COLUMN, 0.0, I, F)
                break
            iteration += 1
            I[DONE] = iteration
            happy = h <= 1e-14 * abs(H[j - 1, j - 1])
            if final or happy or estimate <= F[ATOL]:
                break
        # v_j, and the first pass of A M v_j: u_(j+1) and column j of H (its first part)
        kept = _first_pass(V, u, w, H, Hu, Tt, e, j, h, beta, gamma, reorthogonalized)
        S[ENDS] = 1.0 if kept <= ROUNDING * gamma else _ends_cycle(H, g, cs, sn, j, np.sqrt(kept) / h, F[ATOL])
        j += 1
        if j > 1:
            event = _inner_test(estimate, hist, I, F)
            if event != NONE:
                break
    return event, j, iteration


@loop
def _received(R, Tt, e, j, final):
    """Step j's reduction: ``s`` into ``Tt[j, :j]``, ``t`` into ``e[:j]``; (``||s||^2``,
    ``||u_j||^2``, ``(u_j, w)``, ``||w||^2``), the last two 0 at a cycle's last step."""
    removed = 0.0
    for k in range(j):
        Tt[j, k] = R.recv[0, k]
        removed += Tt[j, k] * Tt[j, k]
        if not final:
            e[k] = R.recv[0, j + 1 + k]
    if final:
        return removed, R.recv[0, j], 0.0, 0.0
    return removed, R.recv[0, j], R.recv[0, 2 * j + 1], R.recv[0, 2 * j + 2]


@loop
def _end_column(H, Hu, Tt, j):
    """Column j-1 of H final: ``c_(j-1) + s`` and ``h_j`` (in T's column j) below it; its
    copy before the rotations in ``Hu``."""
    for k in range(j):
        H[k, j - 1] += Tt[j, k]
    H[j, j - 1] = Tt[j, j]
    for k in range(j + 1):
        Hu[k, j - 1] = H[k, j - 1]


@loop
def _first_pass(V, u, w, H, Hu, Tt, e, j, h, beta, gamma, reorthogonalized):
    """``v_j = (u_j - V_j s) / h`` (s subtracted already where ``reorthogonalized``),
    ``e = V_(j+1)^T w``, ``u_(j+1) = (w - V_(j+1) e) / h`` and column j of H's first part
    ``(e - Hbar s) / h``; returns ``||w||^2 - ||e||^2`` (``h^2 ||u_(j+1)||^2``).  (Its own
    function so that it runs compiled when the loop runs interpreted.)"""
    if reorthogonalized:
        subtract_combination(V, e, j, w)
    else:
        subtract_combinations(V, j, Tt[j], u, e, w)
    divide(u, h, V[j])
    st = 0.0
    for k in range(j):
        st += Tt[j, k] * e[k]
    e[j] = (beta - st) / h
    ej, vj = e[j], V[j]
    for i in range(w.shape[0]):
        w[i] -= ej * vj[i]
    divide(w, h, u)
    kept = gamma
    for k in range(j + 1):
        kept -= e[k] * e[k]
        d = 0.0   # (Hbar s)_k: Hbar's row k is zero left of column k-1
        for q in range(max(0, k - 1), j):
            d += Hu[k, q] * Tt[j, q]
        H[k, j] = (e[k] - d) / h
    return kept


@loop
def _ends_cycle(H, g, cs, sn, j, hnext, atol):
    """1.0 where column j of H (rotated by the rotations before, not stored) with
    ``hnext`` below it would pass the residual test or break down happily, else 0.0."""
    a = H[0, j]
    for i in range(j):   # rotation i mixes entries i and i + 1: carry the second
        a = -sn[i] * a + cs[i] * H[i + 1, j]
    denom = np.hypot(a, hnext)
    if denom == 0.0:
        return 1.0
    return 1.0 if hnext <= 1e-14 * denom or abs(hnext / denom * g[j]) <= atol else 0.0


@loop
def _solve_upper(Tt, k, y):
    """y = T_k^-1 y (T upper triangular, its column i in ``Tt[i, :i + 1]``)."""
    for i in range(k - 1, -1, -1):
        acc = y[i]
        for q in range(i + 1, k):
            acc -= Tt[q, i] * y[q]
        y[i] = acc / Tt[i, i]


@loop
def _rotate_column(H, g, cs, sn, j, zero):
    """The previous Givens rotations applied to column ``j`` of ``H`` (in place), the one
    that zeroes ``H[j+1, j]`` made and applied, ``g`` rotated with it: the residual
    estimate ``|g[j+1]|``, or -1 for a zero column.  A column is zero when its rotated
    diagonal is at most ``zero`` times its norm (the rotations keep the norm), the
    rounding level of how the column was computed: ``A M v_j`` then lies in the span of
    the columns before, a singular A or M, and a division by that diagonal would throw x
    to ~1e15."""
    norm = 0.0
    for i in range(j + 2):
        norm += H[i, j] * H[i, j]
    for i in range(j):
        a, c = H[i, j], H[i + 1, j]
        H[i, j], H[i + 1, j] = cs[i] * a + sn[i] * c, -sn[i] * a + cs[i] * c
    denom = np.hypot(H[j, j], H[j + 1, j])
    if denom <= zero * np.sqrt(norm):
        return -1.0
    cs[j], sn[j] = H[j, j] / denom, H[j + 1, j] / denom
    H[j, j], H[j + 1, j] = denom, 0.0
    g[j + 1], g[j] = -sn[j] * g[j], cs[j] * g[j]
    return abs(g[j + 1])


@loop
def _back_substitute(H, g, k, y):
    """y with R_k y = g_k (R_k: H's rotated upper triangle)."""
    for i in range(k - 1, -1, -1):
        acc = g[i]
        for q in range(i + 1, k):
            acc -= H[i, q] * y[q]
        y[i] = acc / H[i, i]


def _breakdown(check, value):
    return Breakdown("diverged_breakdown", "GMRES: zero column in the Hessenberg matrix")


class Restarted(LoopSpec):
    """A restarted GMRES's loop spec (the cycles of :func:`begin_cycle`): its restart
    fitted to a system's size, and its tests: a cycle's first decides, an inner one only
    reports (the cycle goes on)."""

    restart = None

    def with_restart(self, restart):
        """This method with another restart."""
        raise NotImplementedError

    def fitted(self, n):
        from ..solvers.inputs import fitted_restart
        m = fitted_restart(self.restart, n)
        return self if m == self.restart else self.with_restart(m)

    def after_test(self, solver, passed):
        if solver.I[RESUME] == INNER:
            return INNER
        return None if passed else AFTER_TEST


class GMRESSpec(Restarted):
    """GMRES(m)'s loop: its workspace holds the cycle's basis."""

    def __init__(self, restart, orthogonalization):
        self.restart, self.orthogonalization = restart, orthogonalization
        from ..solvers.solver import BUFFERED
        passes, self.delayed = ORTHOGONALIZATIONS[orthogonalization]
        # a cycle's reductions must fit the trace's buffer (passes + 1 an iteration at most)
        super().__init__("gmres", LOOPS[orthogonalization],
                         ["||r||", "V^T w", "V^T w, ||w||", "||w||", "V^T [u, w]", "V^T u", "||u||"],
                         self._workspace, S_SIZE, _breakdown, width=2 * restart + 3 if self.delayed else restart + 2,
                         norms=restart + 1, reductions=(passes + 1) * (1 + restart // BUFFERED))

    @property
    def key(self):
        return f"gmres restart={self.restart} orthogonalization={self.orthogonalization}"

    def with_restart(self, restart):
        return gmres_spec(restart, self.orthogonalization)

    def _workspace(self, n, preconditioned):
        m = self.restart
        return (np.zeros((m + 1, n)), np.zeros((m, n) if preconditioned else (1, 1)), np.zeros(n),
                np.zeros((m + 1, m)), np.zeros(m + 1), np.zeros(m), np.zeros(m), np.zeros(m + 1), np.zeros(m),
                np.zeros(1), np.zeros(1),
                # DCGS2's: u, the Hessenberg matrix unrotated, T by rows
                np.zeros(n if self.delayed else 1), np.zeros((m + 1, m) if self.delayed else (1, 1)),
                np.zeros((m + 1, m + 1) if self.delayed else (1, 1)))


def gmres_spec(restart=30, orthogonalization="dcgs2"):
    """The loop of GMRES(``restart``), orthogonalizing by classical Gram-Schmidt twice,
    the second pass a step late (``"dcgs2"``), twice in each step (``"cgs2"``) or once
    (``"cgs"``, PETSc's default)."""
    if int(restart) < 1:
        raise ValueError(f"restart must be positive, got {restart}")
    if orthogonalization not in ORTHOGONALIZATIONS:
        raise ValueError(f"orthogonalization must be one of {', '.join(map(repr, ORTHOGONALIZATIONS))}, "
                         f"got {orthogonalization!r}")
    return _SPECS.setdefault((int(restart), orthogonalization), GMRESSpec(int(restart), orthogonalization))


_SPECS = {}
