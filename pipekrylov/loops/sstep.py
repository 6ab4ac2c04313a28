"""s-step Conjugate Gradients (communication-avoiding CG: Chronopoulos & Gear 1989, Hoemmen
2010, Carson 2015): one blocking reduction per s iterations (docs/sstep.md).

A *block* of m <= s iterations makes, from CG's ``p``, ``z = M r`` and ``r``, the bases
of its iterations with ``2m - 1`` applications of A and of M, and no reduction::

    Y = [p, Bp, ..., B^m p, z, Bz, ..., B^(m-1) z]      B = M A, Newton-shifted and scaled:
    T = M^-1 Y = [., A p, ..., r, A z, ...]            T_(j+1) = (A Y_j - theta_j T_j) / scale_j,
                                                       Y_(j+1) = M T_(j+1)

then one reduction of the Gram matrix ``G = Y^T T`` (its upper triangle: symmetric, as M
is), and runs CG's m iterations on coordinates in that basis (``A Y = T B``, ``B`` the
shifts' bidiagonal): ``(r, z) = c^T G c``, ``(p, A p) = c_p^T G B c_p``.  The block ends
by recovering ``x``, ``p`` and ``r`` from their coordinates (one pass over the bases) and
``z = M r``; the next block's Gram matrix gives ``(r, z)`` afresh.  The norm tested is
the natural one, ``sqrt((r, z))``.

**The basis.**  The first step of each chain is unshifted (``A p`` itself: the block's
first ``(p, A p)`` is then a dot, not a difference of large terms, and ``M^-1 p`` is
never needed); the others are the Chebyshev points of ``[0, lambda_max]`` in Leja order,
each step divided by a quarter of the interval.  ``lambda_max`` is the solve's own: the
largest eigenvalue of the Lanczos matrix CG's coefficients make (by bisection), times
1.1, renewed after every block that adds coefficients (the first 64), never lowered.
Until ``s`` coefficients are known the blocks are one iteration long (Chronopoulos &
Gear's CG).  A :class:`~pipekrylov.Solver` keeps the estimate for its later solves with
the same matrix.

**Loss of rank.**  Where ``(r, z)`` or ``(p, A p)`` in coordinates is not positive, the
block ends at that iteration and the next starts from the vectors recovered there (the
direction restarted where ``(r, z)`` was lost), ``result.short_blocks`` counting them;
the next blocks are halved, as they are where a block's last ``(r, z)`` in coordinates is
more than 10% off the next block's exact one (and doubled back towards s where it is
within 1e-4).  The first iteration of a block uses exact dots: a failure there is a
breakdown.

A test that passes is confirmed against ``b - A x`` (its reduction carries ``||b||``: a
miss tightens the natural norm's tolerance); where that fails, the iteration starts
again from it.
"""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.basis import add_combination, copy, gram, recover_block
from ..kernels.compile import hot
from ..kernels.workspace import arrays
from ..runtime.layout import (AFTER_TEST, BEGIN, CONFIRM, CONVERGED, FLUSH, FROM_X, HIST, ITERATION, MAX_ITERATIONS,
                              MAXITER, NONE, PRECONDITIONED, REPLACEMENTS, RESTART, RESUME, STOP_AT_TEST, STOP_EVERY,
                              TOP, VALUE)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import allreduce
from ..runtime.steps import breakdown, confirm, end_iteration, residual_test, room, tolerance
from ..solvers.result import Breakdown
from . import LoopSpec, loop

__all__ = ["sstep_cg", "SStepCG", "MAX_S", "workspace"]

MAX_S = 10
KEEP = 64          # CG coefficients kept for the estimate of lambda_max
MARGIN = 1.1       # lambda_max's estimate is the largest Ritz value times this

residual = fused_kernel(["r = b - r"]).function

# the method's integers J
(S_MAX,          # s
 POS,            # the block's next iteration (-1: a new block to make)
 LENGTH,         # this block's iterations
 KNOWN,          # 1 once lambda_max is estimated (blocks of s iterations)
 COUNT,          # CG coefficients kept for the estimate
 FIRST,          # 1: the next reduction is the solve's first (it carries (b, M b))
 SHORT,          # blocks ended early (loss of rank)
 BLOCK,          # the length of the next blocks, s at most (halved where the basis loses accuracy)
 ZROW,           # the row of z and r (p: row 0); a block of m iterations uses rows 0 .. 2m
 ESTIMATED,      # COUNT when lambda_max was last estimated
 MISSED,         # 1 + the iteration at which b - A x last failed a confirmation (0: none)
 J_SIZE) = range(12)
# the method's scalars S
RZ, LMAX, RZ_END, S_SIZE = range(4)   # RZ_END: the (r, z) a block ended with, in coordinates
DRIFT = 0.1        # a block whose last (r, z) in coordinates is off this much (relative) halves the next
INDEFINITE_PC, NOT_FINITE, INDEFINITE_MAT = range(3)
GRAM_LABEL, TRUE_LABEL = 0, 1
REBLOCK = 6        # the loop's own resume point: a new block for an iteration already tested
W_NAMES = ("Y", "T", "V", "G", "B", "C", "lanes", "theta", "scale", "alphas", "betas", "J")


def workspace(n, s, preconditioned):
    """The loop's workspace for blocks of up to ``s`` iterations on ``n`` unknowns; ``T``
    is ``Y`` without a preconditioner."""
    N = 2 * s + 1
    # T_(j+1) = A Y_j, from a row of Y to a row of T: rows a multiple of 4 KiB apart (n a
    # multiple of 512, the arrays allocated apart) made the SpMV 1.5x slower, the CPU holding
    # loads back behind stores to the same address modulo the page (docs/performance.md)
    Y, T = arrays((N, n), (N, n)) if preconditioned else 2 * arrays((N, n))
    J = np.zeros(J_SIZE, np.int64)
    J[S_MAX] = s
    V = (np.zeros(n), np.zeros(n))   # separate arrays: recover_block's outputs
    return (Y, T, V, np.zeros((N, N)), np.zeros((N, N)), np.zeros((4, N)), np.zeros((N * (N + 1) // 2, 8)),
            np.zeros(s), np.zeros(s), np.zeros(KEEP), np.zeros(KEEP), J)


@loop
def sstep_cg(W, x, b, S, I, F, hist, trace, A, P, R):
    Y, T, V, G, B, C, lanes, theta, scale, alphas, betas, J = W
    cx, cr, cp, w = C[0], C[1], C[2], C[3]
    s = J[S_MAX]
    preconditioned = I[PRECONDITIONED] != 0
    iteration, resume = I[ITERATION], I[RESUME]
    rz = S[RZ]
    event = NONE
    if resume == BEGIN:
        J[ZROW] = 1
        apply_operator(A, x, T[1], R, -1, I, F)
        residual(b=b, r=T[1], coef=V[0], out=V[0])        # r = b - A x
        J[FIRST] = 1
        resume = FROM_X
    while True:
        z0 = J[ZROW]            # the row of z (and r); p (and q) are row 0
        if resume == CONFIRM:   # a test the driver made passed: b - A x decides (into r)
            _recover(Y, T, V, C, J, x, preconditioned, False, P, R, I, F)
            event = confirm(A, P, x, b, T[z0], V[0], True, R, 0, TRUE_LABEL, I, F, trace)
            if event == NONE:
                J[MISSED] = iteration + 1
                event = RESTART
            break
        if resume == FROM_X:    # r = b - A x: z = M r, p = z, q = r, a new block
            if preconditioned:
                precondition(P, T[z0], Y[z0], R, -1, I, F)
            copy(Y[z0], Y[0])
            J[POS], J[COUNT] = -1, 0
            if J[FIRST] == 0:
                I[REPLACEMENTS] += 1
            resume = TOP
        if resume != AFTER_TEST:
            if not room(1, 2, hist, trace, I):
                event = FLUSH
                break
            if J[POS] < 0:      # a new block: its bases, one reduction of their Gram matrices
                m = J[BLOCK] if J[KNOWN] != 0 else 1
                if z0 != m + 1:     # z's chain follows p's: the rows 0 .. 2m in use
                    copy(Y[z0], Y[m + 1])
                    copy(T[z0], T[m + 1])
                    z0 = J[ZROW] = m + 1
                _shifts(theta, scale, m, S[LMAX] if J[KNOWN] != 0 else 0.0)
                for start, length in ((0, m), (z0, m - 1)):
                    for j in range(start, start + length):
                        apply_operator(A, Y[j], T[j + 1], R, -1, I, F)
                        if j > start:
                            _shift(T[j + 1], T[j], theta[j - start], scale[j - start])
                        if preconditioned:
                            precondition(P, T[j + 1], Y[j + 1], R, -1, I, F)
                used = 2 * m + 1
                count = used * (used + 1) // 2
                gram(Y, T, used, lanes, R.send[0], 0)      # the local Y_a . T_b, a <= b
                first = J[FIRST] != 0
                if first:       # the tolerance is relative to ||b||_M
                    if preconditioned:
                        precondition(P, b, V[0], R, -1, I, F)
                        R.send[0, count] = dot(b, V[0])
                    else:
                        R.send[0, count] = dot(b, b)
                event = allreduce(R, 0, count + 1 if first else count, GRAM_LABEL, I, F, trace)
                if event != NONE:
                    break
                if first:
                    J[FIRST] = 0
                    event = tolerance(R.recv[0, count], I, F)
                    if event == NONE and not R.recv[0, count] >= 0.0:
                        event = breakdown(INDEFINITE_PC, R.recv[0, count], I, F)   # b^T M b < 0
                    if event != NONE:
                        break
                _gram_receive(R.recv[0], G, used)
                _change_of_basis(B, theta, scale, m)
                C[:, :] = 0.0
                cr[z0] = 1.0
                cp[0] = 1.0
                rz = G[z0, z0]
                if S[RZ_END] > 0.0:     # how far the last block's coordinates drifted from the vectors
                    if not abs(S[RZ_END] - rz) <= DRIFT * rz:
                        J[BLOCK] = max(1, J[BLOCK] // 2)
                    elif J[BLOCK] < s and abs(S[RZ_END] - rz) <= 1e-3 * DRIFT * rz:
                        J[BLOCK] = min(s, 2 * J[BLOCK])
                S[RZ_END] = 0.0
                J[POS], J[LENGTH] = 0, m
            if resume != REBLOCK:
                # a block's first (r, M r) is exact: below 0, M is not positive definite (the
                # test would pass its "norm" of 0 and start again from b - A x, forever); 0
                # where b - A x is not 0, M is singular
                if J[POS] == 0 and (rz < 0.0 or (rz == 0.0 and J[MISSED] == iteration + 1)):
                    event = breakdown(INDEFINITE_PC, rz, I, F)
                    break
                event = residual_test(np.sqrt(max(rz, 0.0)), hist, I, F)
                if event != NONE:     # x as at this iteration, whatever comes next
                    _recover(Y, T, V, C, J, x, preconditioned, False, P, R, I, F)
                if event == CONVERGED:
                    event = confirm(A, P, x, b, T[z0], V[0], True, R, 0, TRUE_LABEL, I, F, trace)
                    if event == NONE:   # b - A x (its norm the history's) in r: start again from it
                        J[MISSED] = iteration + 1
                        if I[STOP_AT_TEST] == 0 and I[HIST] > 0:
                            hist[I[HIST] - 1] = F[VALUE]
                        resume = FROM_X
                        continue
                if event != NONE:
                    break
        resume = TOP
        if iteration == I[MAXITER]:
            _recover(Y, T, V, C, J, x, preconditioned, False, P, R, I, F)
            event = MAX_ITERATIONS
            break
        first_of_block = J[POS] == 0
        if first_of_block and not rz >= 0:
            event = breakdown(INDEFINITE_PC if np.isfinite(rz) else NOT_FINITE, rz, I, F)
            break
        used = 2 * J[LENGTH] + 1
        _times(B, cp, w, used)                             # A p = T w
        pap = _form(G, cp, w, used)
        if not pap > 0:
            if first_of_block:
                event = breakdown(INDEFINITE_MAT if np.isfinite(pap) else NOT_FINITE, pap, I, F)
                break
            J[SHORT] += 1       # the basis lost rank: a new block from here, this iteration again
            J[BLOCK] = max(1, J[BLOCK] // 2)
            _recover(Y, T, V, C, J, x, preconditioned, True, P, R, I, F)
            resume = REBLOCK
            continue
        alpha = rz / pap
        if I[STOP_EVERY] != 0:   # a callback sees x at every iteration
            for k in range(used):
                V[0][k] = alpha * cp[k]
            add_combination(Y, V[0], used, x)
        else:
            for k in range(used):
                cx[k] += alpha * cp[k]
        for k in range(used):
            cr[k] -= alpha * w[k]
        rz_next = _form(G, cr, cr, used)
        lost = not (rz_next > 0 and np.isfinite(rz_next))
        beta = 0.0 if lost else rz_next / rz
        for k in range(used):
            cp[k] = cr[k] + beta * cp[k]
        _keep_coefficients(alphas, betas, J, alpha, beta)
        rz = rz_next
        J[POS] += 1
        if lost:
            J[SHORT] += 1
            J[COUNT] = 0
            J[BLOCK] = max(1, J[BLOCK] // 2)
        if lost or J[POS] == J[LENGTH]:
            if not lost:
                S[RZ_END] = rz
            _recover(Y, T, V, C, J, x, preconditioned, True, P, R, I, F)
            if J[COUNT] >= s and J[COUNT] != J[ESTIMATED]:   # new coefficients: the estimate can only grow
                estimate = MARGIN * _largest_ritz(alphas, betas, J[COUNT])
                S[LMAX] = max(S[LMAX], estimate) if J[KNOWN] != 0 else estimate
                J[KNOWN], J[ESTIMATED] = 1, J[COUNT]
        event = end_iteration(iteration, I)
        iteration += 1
        if event != NONE:
            break
    I[ITERATION] = iteration
    I[RESUME] = resume
    S[RZ] = rz
    return event


@hot
def _shift(new, old, shift, scale):
    """``new = (new - shift old) / scale``: a Newton step, scaled."""
    inverse = 1.0 / scale
    for i in range(new.shape[0]):
        new[i] = (new[i] - shift * old[i]) * inverse


@hot
def _gram_receive(recv, G, used):
    k = 0
    for j in range(used):
        for a in range(j + 1):
            G[a, j] = G[j, a] = recv[k]
            k += 1


@hot
def _change_of_basis(B, theta, scale, m):
    """``A Y = T B``: column j of a chain (but its last) is ``scale_j e_(j+1) + theta_j e_j``."""
    B[:, :] = 0.0
    for start, length in ((0, m), (m + 1, m - 1)):
        for j in range(length):
            B[start + j + 1, start + j] = scale[j]
            B[start + j, start + j] = theta[j]


@hot
def _times(B, c, out, used):
    for a in range(used):
        v = 0.0
        for q in range(used):
            v += B[a, q] * c[q]
        out[a] = v


@hot
def _form(G, u, v, used):
    """``u^T G v`` over the block's rows."""
    total = 0.0
    for a in range(used):
        v_a = 0.0
        for q in range(used):
            v_a += G[a, q] * v[q]
        total += u[a] * v_a
    return total


@hot
def _recover(Y, T, V, C, J, x, preconditioned, vectors, P, R, I, F):
    """``x += Y c_x``; with ``vectors`` also ``p = Y c_p``, ``r = T c_r`` and ``z = M r``
    into the rows the next block starts from (``J[POS] = -1``).  Nothing where no block
    is open."""
    if J[POS] < 0:
        return
    used = 2 * J[LENGTH] + 1
    cx, cr, cp = C[0], C[1], C[2]
    if not vectors:
        add_combination(Y, cx, used, x)
    else:
        p, r = V
        recover_block(Y, T, used, cx, cp, cr, x, p, r)
        copy(p, Y[0])
        copy(r, T[J[ZROW]])
        if preconditioned:
            precondition(P, T[J[ZROW]], Y[J[ZROW]], R, -1, I, F)
        J[POS] = -1
    for k in range(used):
        cx[k] = 0.0


@hot
def _keep_coefficients(alphas, betas, J, alpha, beta):
    """CG's ``alpha_k`` and the ``beta_(k+1)`` after it, for the Lanczos matrix (a
    restarted direction, ``beta = 0``, starts it again)."""
    k = J[COUNT]
    if k < alphas.shape[0]:
        alphas[k] = alpha
        betas[k] = beta
        J[COUNT] = k + 1


@hot
def _largest_ritz(alphas, betas, count):
    """The largest eigenvalue of the Lanczos matrix of ``count`` CG steps (diagonal
    ``1/alpha_k + beta_k/alpha_(k-1)``, off-diagonal ``sqrt(beta_(k+1))/alpha_k``), by
    bisection on its Sturm sequence."""
    lo, hi = -np.inf, -np.inf
    for k in range(count):
        d = 1.0 / alphas[k] + (betas[k - 1] / alphas[k - 1] if k > 0 else 0.0)
        e = np.sqrt(betas[k]) / alphas[k] if k + 1 < count else 0.0
        f = np.sqrt(betas[k - 1]) / alphas[k - 1] if k > 0 else 0.0
        lo = max(lo, d)
        hi = max(hi, d + e + f)
    while hi - lo > 1e-3 * abs(hi):   # the shifts need it to about 1%
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        below, pivot = 0, 1.0
        for k in range(count):
            d = 1.0 / alphas[k] + (betas[k - 1] / alphas[k - 1] if k > 0 else 0.0)
            e2 = betas[k - 1] / (alphas[k - 1] * alphas[k - 1]) if k > 0 else 0.0
            pivot = d - mid - (e2 / pivot if k > 0 else 0.0)
            if pivot == 0.0:
                pivot = -1e-300
            if pivot < 0.0:
                below += 1
        if below < count:
            lo = mid
        else:
            hi = mid
    return hi


@hot
def _shifts(theta, scale, m, lmax):
    """A block's Newton steps: ``theta_0 = 0``, ``scale_0 = 1``, then the ``m - 1``
    Chebyshev points of ``[0, lmax]`` in Leja order, each step divided by ``lmax / 4``,
    which keeps the basis polynomials small on the interval (the monomial basis for
    ``lmax = 0``: not yet estimated).  The first step is ``A p`` itself, so that a
    block's first ``(p, A p)`` is a dot of ``p`` and ``A p`` (with ``theta_0`` near
    ``lambda_max`` it is the difference of two terms that much larger, and lost where
    ``p`` lies near the small eigenvalues), and ``M^-1 p`` is never needed."""
    theta[0], scale[0] = 0.0, 1.0
    k = m - 1
    for i in range(k):
        theta[1 + i] = 0.5 * lmax * (1.0 + np.cos(np.pi * (2 * i + 1) / (2 * k)))
        scale[1 + i] = 0.25 * lmax if lmax > 0.0 else 1.0
    for i in range(1, m):    # Leja: each the farthest (by product of distances) from those before it
        best, value = i, -1.0
        for j in range(i, m):
            v = 1.0
            for q in range(i):
                v *= abs(theta[j] - theta[q])
            if v > value:
                best, value = j, v
        theta[i], theta[best] = theta[best], theta[i]


def _breakdown(check, value):
    if check == INDEFINITE_PC:
        return Breakdown("diverged_indefinite_pc", f"preconditioner is not positive definite: (r, Mr) = {value:.3e}")
    if check == NOT_FINITE:
        return Breakdown("diverged_nanorinf", f"a dot product is not finite ({value})")
    return Breakdown("diverged_indefinite_mat", f"matrix is not positive definite: (p, Ap) = {value:.3e} <= 0")


class SStepCG(LoopSpec):
    """s-step CG's loop (see the module's docstring): blocks of ``s`` iterations, one
    reduction each."""

    confirms = True

    def __init__(self, s=4):
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 1 <= s <= MAX_S:
            raise ValueError(f"s must be an integer from 1 to {MAX_S}, got {s!r}")
        self.s = int(s)
        N = 2 * self.s + 1
        super().__init__(f"s({self.s})-cg", sstep_cg, ["Gram matrices", "b - A x"], self._workspace, S_SIZE,
                         _breakdown, width=N * (N + 1) // 2 + 1, reductions=2)

    def _workspace(self, n, preconditioned):
        return workspace(n, self.s, preconditioned)

    def fitted(self, n):
        """At most (n - 1) / 2 iterations a block (its 2s + 1 basis vectors in n
        dimensions), at least one, as GMRES's restart is at most n."""
        s = max(1, min(self.s, (n - 1) // 2))
        return self if s == self.s else SStepCG(s)

    def prepare(self, solver):
        """Each solve starts its own blocks; the estimate of lambda_max is the solver's
        while its matrix is the same."""
        J = solver.W[W_NAMES.index("J")]
        J[POS] = J[COUNT] = J[SHORT] = J[KNOWN] = J[ESTIMATED] = J[MISSED] = 0
        J[BLOCK] = self.s
        solver.S[RZ_END] = 0.0
        kept = getattr(solver, "sstep_estimate", None)
        if kept is not None and kept[0] is solver.A_operands:
            solver.S[LMAX], J[KNOWN] = kept[1], 1

    def report(self, solver):
        J = solver.W[W_NAMES.index("J")]
        if J[KNOWN]:
            solver.sstep_estimate = (solver.A_operands, float(solver.S[LMAX]))
        return {"s": self.s, "short_blocks": int(J[SHORT]), "block": int(J[BLOCK]),
                "lambda_max": float(solver.S[LMAX]) if J[KNOWN] else None}
