"""p(l)-CG: Conjugate Gradients with a pipeline of depth l (Cornelis, Cools & Vanroose
2018), one compiled function for every depth.

Each iteration starts one nonblocking reduction and waits for the one started ``l``
iterations earlier, so a reduction overlaps ``l`` operator and preconditioner
applications.  The method is Lanczos on ``B = M A`` (in the ``M^-1`` inner product)
carried out on the auxiliary basis of :mod:`pipekrylov.deep.basis`, with the CG iterate
formed from the tridiagonal Lanczos matrix by its LDL^T factorization (D-Lanczos)::

    start: 2l Lanczos steps by pipelined CG's recurrences (one reduction each, overlapping
           an operator application: the Lanczos vectors are CG's preconditioned
           residuals, T holds CG's coefficients),
           and from their V and T, exactly: G[:, c] = P_c(T) e_0 (c <= l), P_l(T) e_(c-l)
           (c <= 2l), z_c = V G[:, c] and the first intermediate bases
    it >= l, c = it-l+1, k = c-1 (for c <= 2l, z and G come from the start):
        w = B z_it                                   # overlaps the reductions in flight
        wait column c of the Gram entries            # started l iterations ago
        G[:, c] by symmetry + Cholesky step          # square-root breakdown -> restart
        gamma_k, delta_k from G                      # column k of the Lanczos matrix
        v_c and the intermediate bases q^(m)_(k+1)   # three-term recurrences (TPDS 2019)
        z_(it+1) = (w - gamma_k z_it - delta_(k-1) z_(it-1)) / delta_k
        start <z_(it+1), v_c>, <z_(it+1), z_j> (j = c+1 .. it+1), <z_(it+1), v_(c-1)>
        x += zeta_k p_k                              # D-Lanczos: the CG iterate x_(k+1)

Made by pipelined CG's recurrences, a start step takes one reduction, hidden behind an
operator application, where classical Lanczos, orthogonalized twice, took three blocking
ones.  While the shifts are still to be estimated (a solve's
first, without shifts given) the steps go on past 2l, uncounted, and the loop returns
after each (ESTIMATE) for its driver to judge the largest Ritz value of T, as PETSc's
KSPChebyshev estimates its interval; only the first 2l make the start.

The last dot of a column, ``<z_c, v_(c-l-1)>``, is ``G[c-l-1, c]`` again: their gap is the
basis's drift from its definition; past ``drift_tol`` the loop stops (a DRIFT breakdown)
and its driver hands the same CG over to p-CG, from the true residual, its preconditioned
partner, ``A p`` and their three dots, which the loop makes and sums first
(:func:`_hand_over`: in place of three applications and a reduction from Python, 20 us
less a hand-over at 256 unknowns).  The norm tested is the natural one, ``||r||_M =
sqrt(r^T M r)``, as in PETSc's pipelcg.  A *cycle* (one start, one pipeline) ends, its
reductions in flight completed, at convergence confirmed against ``b - A x``,
at the iteration limit, at a breakdown, or where ``b - A x`` does not confirm it; its
driver starts the next one from ``x``.
"""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.workspace import vectors
from ..kernels.basis import combine, copy, next_column
from ..runtime.layout import (AFTER_TEST, ATOL, BEGIN, BREAKDOWN, CHECK, CONFIRM, CONVERGED, DONE, ESTIMATE, FLUSH,
                              FROM_X, HIST, ITERATED, ITERATION, MAX_ITERATIONS, MAXITER, MPI_FAILED, NANORINF, NONE,
                              RESTART, RESUME, RNORM, STOP_AT_TEST, STOP_EVERY, TESTED, TOP, TRACE, VALUE)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import allreduce, drain, start, wait
from ..runtime.steps import confirm, residual_test, tolerance
from . import loop

__all__ = ["plcg", "workspace", "read_from", "W_NAMES", "LANCZOS", "TEST", "LABELS", "HAND_OVER_SLOT"]

level_update = fused_kernel(["q = a*qk + d*top - e*qm"], scalars=["a", "d", "e"]).function
solution_update = fused_kernel(["p = a*p + t*v", "x = x + zeta*p"], scalars=["a", "t", "zeta"]).function
residual = fused_kernel(["r = b - r"]).function
# its vectors are the workspace's own, disjoint (noalias: seven stores in one loop ran scalar
# without it, 2x slower at 4,096 unknowns)
cg_step = fused_kernel(["p = u + beta*p", "s = w + beta*s", "q = m + beta*q", "z = n + beta*z", "r = r - alpha*s",
                        "u = u - alpha*q", "w = w - alpha*z"], scalars=["beta", "alpha"], exact=True,
                       noalias=True).function
clear = fused_kernel(["y = 0"]).function

LANCZOS, TEST = 6, 7   # p(l)-CG's own resume points: the start's next Lanczos step; an iteration's test
LANCZOS_LABEL, TRUE_LABEL, HAND_OVER_LABEL = -1, -2, -3   # the labels of the reductions that are not columns of G
LABELS = ("Lanczos (r,Mr) (AMr,Mr)", "true ||r||", "hand-over (r,Mr) (Mr,Ap) (p,Ap)")
HAND_OVER_SLOT = -1   # the reduction slot of the hand-over's sums (the last: no column of G takes it)
W_NAMES = ("Z", "U", "Q", "V", "Uv", "EXZ", "EXU", "EXL", "PM", "T", "Gd", "gamma", "delta", "sigma", "tdiag",
           "toff", "p", "r", "u", "w", "pd", "s", "mw", "amw", "sq", "sz", "true_r", "true_z", "coef", "out", "y",
           "rows", "J")

# the method's integers J
(DEPTH,          # l, this cycle's depth
 STEPS,          # the start's Lanczos steps done
 ESTIMATING,     # 1 while the driver estimates the shifts after each Lanczos step (FINAL: the last)
 IT0,            # the solve's iterations before this cycle
 REPORT,         # 1: the cycle's first residual is reported (the solve's first cycle's)
 FIRST_TEST,     # 1: the residual tested is the cycle's first (the true one: no confirmation)
 CAUSE,          # why a cycle ended (RESTART): NOT_CONFIRMED or INVARIANT
 J_SIZE) = range(8)
# the method's scalars kept in S
(ETA, ZETA, FLOOR, BETA, DRIFT_TOL, GAMMA_J, DELTA_J, GAMMA_PREV, ALPHA_PREV, S_SIZE) = range(10)
# entries per block of the start's combinations: the 2l + 1 rows of V's block (8 KB each) stay in
# cache while every z_j, u_j and q^(m)_j is formed from them (512 and 4,096 were slower)
COMBINE_BLOCK = 1024
FINAL = 2        # J[ESTIMATING]: the estimate must end with the steps made
# the breakdown checks (I[CHECK]) and the causes of a cycle's end (J[CAUSE])
INDEFINITE, PIVOT, SQUARE_ROOT, DRIFT, NOT_CONFIRMED, INVARIANT, INDEFINITE_PC = range(7)


def workspace(n, depth, estimate_steps):
    """The loop's workspace for depths up to ``depth`` on ``n`` unknowns, with room for
    ``estimate_steps`` Lanczos steps of a shift estimate (their T only)."""
    l, s = depth, 2 * depth
    steps = max(s, estimate_steps) + 2
    zeros = np.zeros
    return (zeros((l + 3, n)), zeros((l + 3, n)),        # Z, U: rings of z_j, u_j
            zeros((l, 3, n)),                             # Q: q^(m)_k, k mod 3
            zeros((s + 1, n)), zeros((s + 1, n)),        # V, Uv: the start's Lanczos vectors, M^-1 partners
            zeros((l, n)), zeros((l, n)),                 # EXZ, EXU: the start's z_j, u_j, l < j <= 2l
            zeros((l, l + 2, n)),                         # EXL: the start's q^(m)_j, j <= l + 1
            zeros((l + 1, s + 1, s + 1)), zeros((s + 1, s + 1)),   # PM: P_m(T), m <= l; T
            zeros((2 * l + 2, 2 * l + 1)),               # Gd: the band of G's last 2l + 2 columns
            zeros(l + 2), zeros(l + 2), zeros(l),         # gamma, delta: rings; sigma: the shifts
            zeros(steps), zeros(steps),                   # tdiag, toff: T of the start's (and estimate's) steps
            *vectors(12, n),                              # p, r, u, w, pd, s, mw, amw, sq, sz, true_r, true_z
            zeros(3), zeros(1), zeros(s + 1), np.zeros(max(1, l), np.int64),   # coef, out, y, rows
            np.zeros(J_SIZE, np.int64))                   # J


@loop
def plcg(W, x, b, S, I, F, hist, trace, A, P, R):
    (Z, U, Q, V, Uv, EXZ, EXU, EXL, PM, T, Gd, gamma, delta, sigma, tdiag, toff, p, r, u, w, pd, s, mw, amw, sq,
     sz, true_r, true_z, coef, out, y, rows, J) = W
    l = J[DEPTH]
    L, NS, RG, WIDTH, KEEP, NDOTS = l + 3, l + 1, l + 2, 2 * l + 1, 2 * l + 2, l + 2
    columns = 2 * l          # the start's exact columns of G: z_j of l < j <= columns
    it = I[ITERATION]
    resume = I[RESUME]
    it0 = J[IT0]
    event = NONE
    while True:
        if resume == BEGIN or resume == FROM_X:
            event = _cycle_start(W, x, b, S, I, F, hist, trace, A, P, R, resume == BEGIN)
            resume = LANCZOS
            if event != NONE:
                break
        if resume == LANCZOS:
            event = _lanczos(W, x, b, S, I, F, hist, trace, A, P, R)
            if event != NONE:
                break
            _exact_start(W, S)
            it = l
            resume = TOP
        if resume == CONFIRM:
            event = _confirmed(A, P, x, b, true_r, true_z, R, I, F, trace, hist, J)
            break
        if resume == TOP:
            if I[HIST] >= hist.shape[0] or I[TRACE] + 1 > trace.shape[0]:
                event = FLUSH
                break
            c, k = it - l + 1, it - l
            s0, s1 = it % L, (it + 1) % L
            if it + 1 > columns:   # w = B z_it, overlapping the reductions in flight
                apply_operator(A, Z[s0], U[s1], R, c % NS, I, F)
                precondition(P, U[s1], Z[s1], R, -1, I, F)
            if c > columns:        # column c of G: its Gram entries, started l iterations ago
                slot = c % NS
                event = wait(R, slot, I, F, trace)
                if event != NONE:
                    break
                gram = R.recv[slot]
                for j in range(WIDTH):
                    Gd[c % KEEP, j] = 0.0
                for q in range(max(0, c - 2 * l), c - l):
                    _gset(Gd, q, c, _gget(Gd, c - l, q + l, WIDTH, KEEP), WIDTH, KEEP)
                # the last dot, <z_c, v_(c-l-1)>, is G[c-l-1, c] again: their gap is the
                # drift.  Rounding leaves a floor under it, reached within 2l + 3 columns
                # (and harmless): drift counts from 100 times that floor, or drift_tol.
                drift = abs(gram[NDOTS - 1] - _gget(Gd, c - l - 1, c, WIDTH, KEEP)) / \
                    np.sqrt(max(gram[NDOTS - 2], 1e-300))
                if c <= columns + l + 3:
                    S[FLOOR] = max(S[FLOOR], drift)
                if S[DRIFT_TOL] > 0.0 and not drift <= max(S[DRIFT_TOL], 100.0 * S[FLOOR]):
                    event = _hand_over(A, P, x, b, p, true_r, true_z, s, coef, out, R, I, F, trace)
                    if event == NONE:
                        event = _breakdown(DRIFT, drift, I, F)
                    break
                _gset(Gd, c - l, c, gram[0], WIDTH, KEEP)
                # the rest of the column from <z_c, z_q>, q = c-l+1 .. c: forward
                # substitution in index order, then the diagonal as a square root
                lo = max(0, c - WIDTH + 1)
                for i in range(l - 1):
                    q = c - l + 1 + i
                    acc = 0.0
                    for j in range(lo, q):
                        acc += _gget(Gd, j, q, WIDTH, KEEP) * _gget(Gd, j, c, WIDTH, KEEP)
                    _gset(Gd, q, c, (gram[1 + i] - acc) / _gget(Gd, q, q, WIDTH, KEEP), WIDTH, KEEP)
                acc = 0.0
                for j in range(lo, c):
                    acc += _gget(Gd, j, c, WIDTH, KEEP) * _gget(Gd, j, c, WIDTH, KEEP)
                square = gram[l] - acc
                if not square > 0:
                    event = _breakdown(SQUARE_ROOT, square, I, F)
                    break
                _gset(Gd, c, c, np.sqrt(square), WIDTH, KEEP)
            # gamma_k and delta_k, column k of the Lanczos matrix
            g_prev = _gget(Gd, k - 1, k, WIDTH, KEEP) * delta[(k - 1) % RG] if k > 0 else 0.0
            gkk = _gget(Gd, k, k, WIDTH, KEEP)
            if c <= l:      # z_c = (B - sigma_k) z_k
                delta[k % RG] = _gget(Gd, c, c, WIDTH, KEEP) / gkk
                gamma[k % RG] = (_gget(Gd, k, c, WIDTH, KEEP) + sigma[k] * gkk - g_prev) / gkk
            else:           # z_c = (B z_k - gamma_(k-l) z_k - delta_(k-l-1) z_(k-1)) / delta_(k-l)
                delta[k % RG] = _gget(Gd, c, c, WIDTH, KEEP) * delta[(k - l) % RG] / gkk
                gamma[k % RG] = (_gget(Gd, k, c, WIDTH, KEEP) * delta[(k - l) % RG] - g_prev) / gkk + \
                    gamma[(k - l) % RG]
            gamma_k, delta_k = gamma[k % RG], delta[k % RG]
            d_prev = delta[(k - 1) % RG] if k > 0 else 0.0
            # the intermediate bases q^(m)_(k+1), m = 0 .. l-1 (m = 0 is v), by the Lanczos
            # recurrence on P_m(B) v: B q^(m)_k = q^(m+1)_k + sigma_m q^(m)_k, q^(l)_k = z_(k+l)
            if k + 1 <= l + 1:   # the start's, known exactly
                for m in range(l):
                    copy(EXL[m, k + 1], Q[m, (k + 1) % 3])
            else:
                for m in range(l):
                    above = Q[m + 1, k % 3] if m + 1 < l else Z[s0]
                    coef[0] = (sigma[m] - gamma_k) / delta_k
                    coef[1] = 1.0 / delta_k
                    coef[2] = d_prev / delta_k
                    level_update(q=Q[m, (k + 1) % 3], qk=Q[m, k % 3], top=above, qm=Q[m, (k - 1) % 3], coef=coef,
                                 out=out)
            if it + 1 <= columns:
                copy(EXU[it - l], U[s1])
                copy(EXZ[it - l], Z[s1])
            else:
                # z_(it+1), u_(it+1) by the three-term recurrence, and the next column's dots
                sp = (it - 1) % L if it > l or l > 1 else s0
                for j in range(l - 1):
                    rows[j] = (c + 1 + j) % L
                slot = (it + 1) % NS
                next_column(U[s1], U[s0], U[sp], Z[s1], Z[s0], Z[sp], Q[0, c % 3], Q[0, k % 3], Z, rows[:l - 1],
                            1.0 / delta_k, gamma_k / delta_k, d_prev / delta_k, R.send[slot])
                if it + 1 <= I[MAXITER] - it0:   # column it+1 is still needed
                    start(R, slot, NDOTS, it + 1, I, F, trace)
            # D-Lanczos: the CG iterate x_(k+1) from the LDL^T factorization of T
            if k == 0:
                S[ETA], S[ZETA] = gamma[0], S[BETA]
            else:
                lam = delta[(k - 1) % RG] / S[ETA]
                S[ETA] = gamma_k - lam * delta[(k - 1) % RG]
                S[ZETA] = -lam * S[ZETA]
            if not S[ETA] > 0:    # at k = 0, eta = gamma_0 = (A v_0, v_0)
                event = _breakdown(INDEFINITE if k == 0 else PIVOT, S[ETA], I, F)
                break
            coef[0] = -d_prev / S[ETA]
            coef[1] = 1.0 / S[ETA]
            coef[2] = S[ZETA]
            solution_update(p=p, v=Q[0, k % 3], x=x, coef=coef, out=out)
            I[DONE] = it0 + k + 1
            resume = TEST
            if I[STOP_EVERY] != 0:
                event = ITERATED
                break
        k = it - l
        if resume == TEST:
            resume = AFTER_TEST
            J[FIRST_TEST] = 0
            event = residual_test(abs(S[ZETA]) * delta[k % RG] / S[ETA], hist, I, F)
            if event == CONVERGED:
                event = _confirmed(A, P, x, b, true_r, true_z, R, I, F, trace, hist, J)
            if event != NONE:
                break
        if it0 + k + 1 >= I[MAXITER]:
            event = MAX_ITERATIONS
            break
        it += 1
        resume = TOP
    if event != TESTED and event != ITERATED and event != FLUSH and event != ESTIMATE and event != MPI_FAILED:
        drain(R, I, F, trace)   # the cycle ends: its reductions in flight complete, on every rank alike
    I[ITERATION] = it
    I[RESUME] = resume
    return event


@loop
def _cycle_start(W, x, b, S, I, F, hist, trace, A, P, R, first):
    """A cycle's first reduction: r = b - A x, u = M r, w = A u; (r, u) and (w, u) (and in
    the solve's ``first``, (b, M b): the natural norm's tolerance), overlapping the first
    Lanczos step's ``M w`` and ``A M w``; its residual ``||r||_M`` tested (reported in the
    solve's first cycle).  NONE to go on to the Lanczos steps, else the event that ends the
    cycle."""
    (Z, U, Q, V, Uv, EXZ, EXU, EXL, PM, T, Gd, gamma, delta, sigma, tdiag, toff, p, r, u, w, pd, s, mw, amw, sq,
     sz, true_r, true_z, coef, out, y, rows, J) = W
    apply_operator(A, x, r, R, -1, I, F)
    residual(b=b, r=r, coef=coef, out=out)
    precondition(P, r, u, R, -1, I, F)
    apply_operator(A, u, w, R, -1, I, F)
    R.send[0, 0], R.send[0, 1] = dot(r, u), dot(w, u)
    count = 2
    if first:
        precondition(P, b, true_z, R, -1, I, F)
        R.send[0, 2] = dot(b, true_z)
        count = 3
    start(R, 0, count, LANCZOS_LABEL, I, F, trace)
    precondition(P, w, mw, R, 0, I, F)
    apply_operator(A, mw, amw, R, 0, I, F)
    event = wait(R, 0, I, F, trace)
    if event != NONE:
        return event
    if first:
        if not R.recv[0, 2] >= 0:    # b^T M b < 0: M is not positive definite
            return _breakdown(INDEFINITE_PC, R.recv[0, 2], I, F)
        event = tolerance(R.recv[0, 2], I, F)
        if event != NONE:
            return event
    gamma0, delta0 = R.recv[0, 0], R.recv[0, 1]
    if gamma0 < 0.0:   # r^T M r < 0: M is not positive definite (NaN: reported below, as not finite)
        return _breakdown(INDEFINITE_PC, gamma0, I, F)
    S[GAMMA_J], S[DELTA_J], S[ALPHA_PREV] = gamma0, delta0, 1.0
    J[STEPS] = 0
    clear(y=pd, coef=coef, out=out)
    clear(y=s, coef=coef, out=out)
    clear(y=sq, coef=coef, out=out)
    clear(y=sz, coef=coef, out=out)
    beta = np.sqrt(max(gamma0, 0.0))
    S[BETA] = beta
    F[RNORM] = beta
    J[FIRST_TEST] = 1
    if J[REPORT] != 0:
        if I[STOP_AT_TEST] != 0:
            return TESTED
        hist[I[HIST]] = beta
        I[HIST] += 1
        if not np.isfinite(beta):
            return NANORINF
    if beta <= F[ATOL]:   # the true residual passes in the natural norm: the 2-norm's test decides
        event = confirm(A, P, x, b, true_r, true_z, True, R, R.row.shape[0] - 1, TRUE_LABEL, I, F, trace)
        if event == NONE and beta == 0.0:   # r^T M r = 0 where b - A x is not 0: M is singular
            return _breakdown(INDEFINITE_PC, gamma0, I, F)
        return event
    return NONE


@loop
def _lanczos(W, x, b, S, I, F, hist, trace, A, P, R):
    """The start's Lanczos steps by pipelined CG's recurrences (Ghysels & Vanroose: one
    reduction per step, (r, u) with (w, u), overlapping the next step's ``M w`` and
    ``A M w``, so that a start blocks no more than p-CG does).  Step j makes T's column j, ``T_jj = 1/alpha_j +
    beta_j/alpha_(j-1)`` and ``T_(j+1,j) = sqrt(beta_(j+1))/alpha_j``, and the Lanczos vector
    ``v_(j+1) = (-1)^(j+1) u_(j+1) / sqrt(gamma_(j+1))``: 2l steps, and after each while the
    driver estimates the shifts, ESTIMATE.  NONE once the start has its steps, else the
    event that ends the cycle."""
    (Z, U, Q, V, Uv, EXZ, EXU, EXL, PM, T, Gd, gamma, delta, sigma, tdiag, toff, p, r, u, w, pd, s, mw, amw, sq,
     sz, true_r, true_z, coef, out, y, rows, J) = W
    need = 2 * J[DEPTH]
    if J[STEPS] == 0:
        _lanczos_vector(0, r, u, S[GAMMA_J], V, Uv)
    while J[STEPS] < need or J[ESTIMATING] != 0:
        j = J[STEPS]
        if j + 2 >= tdiag.shape[0]:    # the estimate has had its steps
            J[ESTIMATING] = 0
            if j >= need:
                break
        gamma_j, delta_j, alpha_prev = S[GAMMA_J], S[DELTA_J], S[ALPHA_PREV]
        if j == 0:
            beta_j = 0.0
            alpha_j = gamma_j / delta_j
            tdiag[j] = 1.0 / alpha_j
        else:
            beta_j = gamma_j / S[GAMMA_PREV]
            alpha_j = gamma_j / (delta_j - beta_j * gamma_j / alpha_prev)
            tdiag[j] = 1.0 / alpha_j + beta_j / alpha_prev
        if not alpha_j > 0:   # (p_j, A p_j) <= 0: CG's own breakdown, not the basis's
            return _breakdown(INDEFINITE, 1.0 / alpha_j, I, F)
        coef[0], coef[1] = beta_j, alpha_j
        # p = u + beta p, s = A p, q = M s, z = A q; r, u = M r, w = A u by them
        cg_step(p=pd, u=u, s=s, w=w, q=sq, m=mw, z=sz, n=amw, r=r, coef=coef, out=out)
        R.send[0, 0], R.send[0, 1] = dot(r, u), dot(w, u)
        start(R, 0, 2, LANCZOS_LABEL, I, F, trace)
        precondition(P, w, mw, R, 0, I, F)
        apply_operator(A, mw, amw, R, 0, I, F)
        event = wait(R, 0, I, F, trace)
        if event != NONE:
            return event
        if R.recv[0, 0] < 0.0:   # (r, M r) < 0: M is not positive definite (NaN: as before)
            return _breakdown(INDEFINITE_PC, R.recv[0, 0], I, F)
        S[GAMMA_PREV], S[GAMMA_J], S[DELTA_J], S[ALPHA_PREV] = gamma_j, R.recv[0, 0], R.recv[0, 1], alpha_j
        toff[j] = np.sqrt(max(S[GAMMA_J] / gamma_j, 0.0)) / abs(alpha_j)
        J[STEPS] = j + 1
        # the Krylov space ends here, or CG's residual has reached the tolerance (the steps
        # after it would be rounding's): CG's iterate from the steps made, or, past the
        # start's, the estimate ends with them
        if not toff[j] > 1e-12 * abs(tdiag[j]) or np.sqrt(max(S[GAMMA_J], 0.0)) <= F[ATOL]:
            if j + 1 <= need:
                J[ESTIMATING] = 0
                return _invariant(W, x, b, S, I, F, hist, trace, A, P, R, j + 1)
            if J[ESTIMATING] != 0:
                J[ESTIMATING] = FINAL
                return ESTIMATE
            break
        _lanczos_vector(j + 1, r, u, S[GAMMA_J], V, Uv)
        if J[ESTIMATING] != 0:
            return ESTIMATE
    return NONE


@loop
def _invariant(W, x, b, S, I, F, hist, trace, A, P, R, k):
    """The Krylov space ended after ``k`` steps: x moves to CG's iterate in it,
    ``x + V_k T_k^-1 (beta e_0)`` (T_k by its LDL^T factorization, in T's first rows), and
    the cycle ends where ``b - A x`` confirms it, else (INVARIANT) its driver restarts."""
    (Z, U, Q, V, Uv, EXZ, EXU, EXL, PM, T, Gd, gamma, delta, sigma, tdiag, toff, p, r, u, w, pd, s, mw, amw, sq,
     sz, true_r, true_z, coef, out, y, rows, J) = W
    pivots, multipliers = T[0], T[1]
    pivots[0] = tdiag[0]
    y[0] = S[BETA]
    for i in range(1, k):                      # L z = beta e_0
        multipliers[i] = toff[i - 1] / pivots[i - 1]
        pivots[i] = tdiag[i] - multipliers[i] * toff[i - 1]
        y[i] = -multipliers[i] * y[i - 1]
    y[k - 1] = y[k - 1] / pivots[k - 1]        # D L^T y = z
    for i in range(k - 2, -1, -1):
        y[i] = y[i] / pivots[i] - multipliers[i + 1] * y[i + 1]
    combine(y, V, k, true_r, 0, true_r.shape[0])
    for i in range(x.shape[0]):
        x[i] += true_r[i]
    I[DONE] = J[IT0] + k
    event = _confirmed(A, P, x, b, true_r, true_z, R, I, F, trace, hist, J)
    if event == RESTART:
        J[CAUSE] = INVARIANT
    elif event == CONVERGED and I[STOP_AT_TEST] == 0:   # the history ends with the iterate's norm
        hist[I[HIST]] = F[VALUE]
        I[HIST] += 1
    return event


@loop
def _exact_start(W, S):
    """From the start's V and T, exactly: the columns 0 .. 2l of G (``P_c(T) e_0`` for
    c <= l, ``P_l(T) e_(c-l)`` after), z_j and u_j = V G[:, j] for j <= 2l (into the rings
    up to l, the rest kept apart), the intermediate bases q^(m)_j = V P_m(T) e_j for
    j <= l + 1, each where the pipeline reads it; the cycle's pipeline state cleared."""
    (Z, U, Q, V, Uv, EXZ, EXU, EXL, PM, T, Gd, gamma, delta, sigma, tdiag, toff, p, r, u, w, pd, s, mw, amw, sq,
     sz, true_r, true_z, coef, out, y, rows, J) = W
    l = J[DEPTH]
    n, L, WIDTH, KEEP, columns = 2 * l + 1, l + 3, 2 * l + 1, 2 * l + 2, 2 * l
    for i in range(n):
        for j in range(n):
            T[i, j] = 0.0
            PM[0, i, j] = 1.0 if i == j else 0.0
    for i in range(n - 1):
        T[i, i] = tdiag[i]           # T[2l, 2l] is not needed: it stays 0
        T[i + 1, i] = toff[i]
        T[i, i + 1] = toff[i]
    for m in range(l):               # P_(m+1)(T) = (T - sigma_m) P_m(T)
        for i in range(n):
            for j in range(n):
                acc = -sigma[m] * PM[m, i, j]
                for q in range(n):
                    acc += T[i, q] * PM[m, q, j]
                PM[m + 1, i, j] = acc
    for c in range(KEEP):
        for j in range(WIDTH):
            Gd[c, j] = 0.0
    for c in range(columns + 1):
        _column(PM, l, c, y)
        for i in range(max(0, c - 2 * l), c + 1):
            _gset(Gd, i, c, y[i], WIDTH, KEEP)
    first_z, first_u, first_q = read_from(l)
    size = V.shape[1]
    for lo in range(0, size, COMBINE_BLOCK):   # each block of V and Uv read from L1 by every combination
        hi = min(lo + COMBINE_BLOCK, size)
        for c in range(first_z, columns + 1):
            _column(PM, l, c, y)
            combine(y, V, n, Z[c % L] if c <= l else EXZ[c - l - 1], lo, hi)
            if c >= first_u:
                combine(y, Uv, n, U[c % L] if c <= l else EXU[c - l - 1], lo, hi)
        for m in range(l):
            for j in range(0 if m == 0 else first_q, l + 2):
                for i in range(n):
                    y[i] = PM[m, i, j]
                combine(y, V, n, Q[m, 0] if j == 0 else EXL[m, j], lo, hi)
    clear(y=p, coef=coef, out=out)
    for j in range(gamma.shape[0]):
        gamma[j] = 0.0
        delta[j] = 0.0
    S[ETA], S[ZETA], S[FLOOR] = 0.0, 0.0, 0.0


@loop
def read_from(l):
    """The first z_j, u_j and q^(m)_j (m > 0) of the start that the pipeline reads: its
    first next column (it = 2l) reads z_j from min(2l - 1, l + 2) and u_j from 2l - 1, its
    first intermediate bases' recurrence (k = l + 1) q^(m)_j from j = l (D-Lanczos reads
    every v_j = q^(0)_j).  The start makes no others (at l = 2, 28 of its 43 rows)."""
    return min(2 * l - 1, l + 2), 2 * l - 1, l


@loop
def _column(PM, l, c, y):
    """Column c of G at the start: ``P_c(T) e_0`` (c <= l), ``P_l(T) e_(c-l)`` after."""
    for i in range(2 * l + 1):
        y[i] = PM[c, i, 0] if c <= l else PM[l, i, c - l]


@loop
def _confirmed(A, P, x, b, true_r, true_z, R, I, F, trace, hist, J):
    """CONVERGED where ``b - A x`` confirms the test, else the cycle ends (RESTART,
    NOT_CONFIRMED) with the true norm as the history's last.  Its reduction has the last
    slot, which no column of G takes: they may be in flight."""
    event = confirm(A, P, x, b, true_r, true_z, True, R, R.row.shape[0] - 1, TRUE_LABEL, I, F, trace)
    if event != NONE:
        return event
    if I[STOP_AT_TEST] == 0 and I[HIST] > 0:
        hist[I[HIST] - 1] = F[VALUE]
    J[CAUSE] = NOT_CONFIRMED
    return RESTART


@loop
def _hand_over(A, P, x, b, p, r, u, s, coef, out, R, I, F, trace):
    """What the hand-over to p-CG starts from (its driver reads them): ``r = b - A x``,
    ``u = M r``, ``s = A p`` and the sums of ``(r, u)``, ``(u, s)`` and ``(p, s)`` in the
    last slot's received row (reductions of G's columns may be in flight)."""
    apply_operator(A, x, r, R, -1, I, F)
    residual(b=b, r=r, coef=coef, out=out)
    precondition(P, r, u, R, -1, I, F)
    apply_operator(A, p, s, R, -1, I, F)
    slot = R.row.shape[0] + HAND_OVER_SLOT
    R.send[slot, 0], R.send[slot, 1], R.send[slot, 2] = dot(r, u), dot(u, s), dot(p, s)
    return allreduce(R, slot, 3, HAND_OVER_LABEL, I, F, trace)


@loop
def _breakdown(check, value, I, F):
    I[CHECK] = check
    F[VALUE] = value
    return BREAKDOWN


@loop
def _gget(Gd, r, c, WIDTH, KEEP):
    """G[r, c] of the band kept (zero outside it)."""
    if r < 0 or r > c or r <= c - WIDTH:
        return 0.0
    return Gd[c % KEEP, r - c + WIDTH - 1]


@loop
def _gset(Gd, r, c, value, WIDTH, KEEP):
    Gd[c % KEEP, r - c + WIDTH - 1] = value


@loop
def _lanczos_vector(j, r, u, gamma_j, V, Uv):
    """v_j = (-1)^j u_j / sqrt(gamma_j) and its M^-1 partner from CG's r_j, where the start
    keeps them (j <= 2l)."""
    if j < V.shape[0]:
        scale = (1.0 if j % 2 == 0 else -1.0) / np.sqrt(gamma_j)
        for i in range(r.shape[0]):   # one loop per row stored: two in one are not vectorized
            V[j, i] = scale * u[i]
        for i in range(r.shape[0]):
            Uv[j, i] = scale * r[i]
