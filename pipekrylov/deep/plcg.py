"""p(l)-CG: Conjugate Gradients with a pipeline of depth l (Cornelis, Cools & Vanroose 2018).

Each iteration starts one nonblocking reduction and waits for the one started ``l``
iterations earlier, so a reduction overlaps ``l`` operator and preconditioner
applications.  The method is Lanczos on ``B = M A`` (in the ``M^-1`` inner product)
carried out on the auxiliary basis of :mod:`.basis`, with the CG iterate formed from
the tridiagonal Lanczos matrix by its LDL^T factorization (D-Lanczos):

    start: 2l classical Lanczos steps (blocking) give v_0 .. v_2l and T, and exactly
           G[:, c] = P_c(T) e_0 (c <= l), P_l(T) e_(c-l) (c <= 2l), z_c = V G[:, c]
    it >= l, c = it-l+1, k = c-1 (for c <= 2l, z and G come from the start):
        w = B z_it                                   # overlaps the reductions in flight
        wait column c of the Gram entries            # started l iterations ago
        G[:, c] by symmetry + Cholesky step          # square-root breakdown -> restart
        gamma_k, delta_k from G                      # column k of the Lanczos matrix
        v_c and the intermediate bases q^(m)_(k+1)   # three-term recurrences (TPDS 2019)
        z_(it+1) = (w - gamma_k z_it - delta_(k-1) z_(it-1)) / delta_k
        start <z_(it+1), v_c>, <z_(it+1), z_j> for j = c+1 .. it+1
        x += zeta_k p_k                              # D-Lanczos: the CG iterate x_(k+1)

The intermediate bases ``q^(m)_j = P_m(B) v_j`` (m = 1 .. l-1) carry ``v`` forward by
three-term recurrences instead of ``V = Z G^-1``, which amplifies rounding errors
(Cools, Cornelis & Vanroose, IEEE TPDS 2019).  The norm tested is the natural one,
``||r||_M = sqrt(r^T M r)`` (the 2-norm without a preconditioner), as in PETSc's pipelcg.

On ill-conditioned matrices the basis still drifts from its definition, exponentially,
until a square-root breakdown; a restart would lose the Krylov space.  One more dot per
reduction measures the drift (an entry of ``G`` known twice), and before it does harm the
same CG goes on from the iterate and the last search direction as the derivation
framework's p-CG (:func:`continue_in_pcg`); docs/deep.md has the measurements.
"""
import dataclasses

import numpy as np

from ..derive import BASE_METHODS, loop as derived_loop
from ..parallel import collective_check
from ..solvers.common import Breakdown, SolverRun
from ..solvers.compiled import LoopCompileError, check_loop, loop_choice
from .basis import BandedColumns, BasisBreakdown, BasisDrift, complete_column
from .compiled import INDEFINITE, PIVOT, breakdown, compiled_cycle, level_update, next_column, solution_update
from .pipeline import Pipeline, VectorPool
from .spectrum import krylov_basis, resolve_shifts

__all__ = ["plcg"]

MAX_RESTARTS = 50
# derived p-CG testing the norm p(l)-CG tests: where a drifting basis hands over
CONTINUATION = dataclasses.replace(BASE_METHODS["cg"], norm="natural")


def plcg(A, b, x0=None, *, depth=2, shifts="auto", interval=None, rtol=1e-5, atol=0.0, maxiter=None, M=None,
         callback=None, comm=None, monitor=False, latency=0.0, estimate_steps=30, drift_tol=1e-11,
         fallback_depth=1, loop="auto"):
    """Solve ``A x = b`` (``A`` SPD) by p(l)-CG with pipeline depth ``depth``.  Collective.

    Arguments and result as :func:`pipekrylov.cg`, plus:

    depth : int
        The pipeline depth ``l >= 1``: each reduction is waited for ``l`` operator
        applications after it started.
    shifts : 'auto', number or ``depth`` numbers
        The basis shifts.  ``'auto'``: Chebyshev points of ``[0, theta_max + bound]``, with
        ``theta_max`` the largest Ritz value of Lanczos steps from the initial residual and
        ``bound`` its residual norm (at most ``estimate_steps`` steps, fewer once the
        bound is 1% of it; run first, not counted as iterations, like PETSc's Chebyshev
        eigenvalue estimate).  A number gives equal shifts (``0``: the monomial basis of
        PETSc's pipelcg without ``-ksp_pipelcg_lmax``); ``depth`` numbers are used as given.
    interval : (lmin, lmax), optional
        Use the Chebyshev points of this interval instead (PETSc's ``lmin``, ``lmax``).
    estimate_steps : int
        At most this many Lanczos steps for the estimate of ``shifts='auto'``.
    drift_tol : float or None
        On ill-conditioned matrices the basis drifts from its definition exponentially
        and ends in a breakdown, whose restart loses the Krylov space (up to 4x CG's
        iterations).  Each reduction carries one more dot product, an entry of ``G`` that
        is also known by symmetry; once the two differ by ``drift_tol`` relative to
        ``||z||`` (and 100 times the floor the first columns leave, 1e-15 to 1e-9 by
        depth and problem), the same CG goes on from the iterate and the last search
        direction as derived p-CG (depth 1), keeping CG's iteration count.  None: no
        check.
    fallback_depth : int or None
        The depth to restart at after a breakdown the drift check did not foresee
        (default 1); None restarts at ``depth`` (PETSc's pipelcg stops instead): a basis
        that broke down once on a problem breaks down again.

    loop : 'auto', 'compiled' or 'python'
        Where each cycle iterates after its start: one compiled function
        (:mod:`.compiled`; A a DistributedCSR or a matrix, M None, "jacobi", "ilu0", "ic0",
        "bjacobi"), or Python; ``'auto'`` the compiled loop where it applies.  The
        residual norms are the same, bit for bit; ``result.loop`` says which ran.  A
        hand-over to p-CG runs the derived p-CG's loop of the same choice.

    The result also has ``restarts`` (breakdowns and failed true-residual checks, each
    restarting from the current iterate), ``shifts`` (those of the first cycle),
    ``depth`` (that of the last cycle, 1 after a hand-over) and ``handed_over`` (the
    iteration from which p-CG went on, or None).  A printing monitor reports restarts
    and the hand-over.  The norm tested is ``||r||_M = sqrt(r^T M r)``
    against ``max(atol, rtol ||b||_M)``; without a preconditioner it is the 2-norm.
    """
    depth = _depth(depth)
    check_loop(loop)
    if drift_tol is not None and not (isinstance(drift_tol, (int, float)) and 0 < drift_tol < np.inf):
        raise ValueError(f"drift_tol must be a positive number or None, got {drift_tol!r}")
    if fallback_depth is not None:
        fallback_depth = min(_depth(fallback_depth), depth)
    run = SolverRun(f"p({depth})-cg", A, b, x0, rtol, atol, maxiter, M, callback, comm,
                    monitor, latency, loop=loop)
    run.depth = depth   # after a breakdown, the fallback depth
    _check_depth_fits(run, depth)
    chosen = loop if loop_choice(run, loop) == "compiled" else "python"
    loops = []   # the loop each cycle ran
    result = run.run(lambda run: _solve(run, depth, shifts, interval, int(estimate_steps),
                                        drift_tol, fallback_depth, chosen, loops))
    result.depth = run.depth
    result.loop = "python" if chosen == "python" or "python" in loops else "compiled"
    return result


# Beyond this the shifted basis of a deep pipeline loses more accuracy than the drift check
# and the exact start can make up for: depth 100 took 24x CG's iterations on 2D Poisson.
MAX_DEPTH = 16


def _depth(depth):
    if isinstance(depth, bool) or int(depth) != depth or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be an integer from 1 to {MAX_DEPTH}, got {depth!r}")
    return int(depth)


def _check_depth_fits(run, depth):
    """The start takes 2l exact Lanczos steps: the problem needs more unknowns."""
    with collective_check(run.comm, run.method):
        if 2 * depth >= run.A.partition.n:
            raise ValueError(f"depth {depth} needs more than {2 * depth} unknowns (the start's "
                             f"2l Lanczos steps); this problem has {run.A.partition.n}")


def natural_norm_tolerance(run):
    """Switch the run's test to ``||r||_M``: ``atol = max(atol, rtol ||b||_M)``."""
    if run.M is None:
        return
    mb = run.precondition(run.b, np.empty_like(run.b))
    square = run.reduction.allreduce([run.b @ mb], "||b||_M")[0]
    if not square > 0:
        raise Breakdown("diverged_indefinite_pc", f"preconditioner is not positive definite: "
                        f"b^T M b = {square:.3e}")
    run.bnorm = float(np.sqrt(square))
    run.atol = max(run.atol_given, run.rtol * run.bnorm)


def _solve(run, depth, shifts, interval, estimate_steps, drift_tol, fallback_depth, loop, loops):
    natural_norm_tolerance(run)
    shifts_at = resolve_shifts(run, shifts, interval, depth, estimate_steps, symmetric=True)
    run.shifts = shifts_at(depth)
    first = True
    while run.iterations < run.maxiter:
        try:
            if _cycle(run, run.depth, shifts_at(run.depth), first, drift_tol, loop, loops):
                return run.x, run.iterations, run.stop_reason()
            if run.iterations >= run.maxiter:
                break
            cause = "true residual check failed"
        except BasisDrift as drift:
            run.note(f"{drift} after iteration {run.iterations}: CG goes on as p-CG (depth 1)")
            run.depth, run.handed_over = 1, run.iterations
            return continue_in_pcg(run, drift.direction, loop)
        except BasisBreakdown as exc:
            run.last_breakdown = cause = str(exc)
            if fallback_depth is not None:
                run.depth = fallback_depth
        first = False
        run.restarts += 1
        run.note(f"restart {run.restarts} after iteration {run.iterations} ({cause}), depth {run.depth}")
        if run.restarts > MAX_RESTARTS:
            raise Breakdown("diverged_breakdown", f"p({depth})-CG restarted {MAX_RESTARTS} times "
                            f"without converging (last: {run.last_breakdown or 'true residual check'})")
    return run.x, run.iterations, "diverged_its"


def _cycle(run, l, sigma, report_initial, drift_tol, loop, loops):
    """One p(l)-CG run from ``run.x`` until convergence (True), the iteration limit or
    a failed true-residual check (False); raises BasisBreakdown or BasisDrift.  Waits for
    every reduction it started before it returns or raises."""
    A, x = run.A, run.x
    compiled = _compiled(run, l, loop)
    loops.append("python" if compiled is None else "compiled")
    pool = VectorPool(len(x))
    pipe = Pipeline(run.reduction)
    try:
        return _iterate(run, A, x, l, sigma, pool, pipe, report_initial, drift_tol, compiled)
    finally:
        pipe.drain()


def _compiled(run, l, loop):
    """The compiled iterations of depth ``l`` (None: the Python loop's).  Compiled or loaded
    before any collective of the cycle: a failure to compile happens on every rank."""
    if loop == "python":
        return None
    try:
        return compiled_cycle(l).ready(run)
    except LoopCompileError:
        if loop == "compiled":
            raise
        return None


def continue_in_pcg(run, direction, loop="auto"):
    """CG from ``run.x`` and the last search direction, as derived p-CG testing the same
    natural norm.  Collective.  Its start-up scalars are set so that its first ``beta``
    makes the new direction A-conjugate to ``direction`` (CG's own ``beta`` in exact
    arithmetic; ``gamma_old / alpha_old = (p, A p)`` keeps its ``alpha`` CG's): CG goes on
    in the Krylov space built so far instead of restarting it."""
    A = run.A
    r = run.b - A.matvec(run.x)
    u = run.precondition(r, np.empty_like(r))
    s = A.matvec(direction)
    gamma, tau, pi = run.reduction.allreduce([r @ u, u @ s, direction @ s], "(r,Mr) (Mr,Ad) (d,Ad)")
    state = {"p": direction, "s": s}
    if pi > 0 and tau != 0:
        state["gamma_old"] = -gamma * pi / tau       # beta = gamma / gamma_old = -tau / pi
        state["alpha_old"] = state["gamma_old"] / pi
    return derived_loop(CONTINUATION, replace_automatic=True, loop=loop)(run, state)


def _iterate(run, A, x, l, sigma, pool, pipe, report_initial, drift_tol, compiled=None):
    it0 = run.iterations
    apply_B = pipe.operator(run)
    G = BandedColumns(2 * l + 1, 2 * l + 2)
    start = _start(run, x, l, sigma, G, lambda v: apply_B(v, pool), report_initial)
    if start is None:
        return True
    beta, u, z, levels, exact = start
    if compiled is not None:
        return compiled(run, x, sigma, G, beta, u, z, levels, exact, drift_tol)
    floor = 0.0
    gamma, delta = [], []
    eta = zeta = 0.0
    p = np.zeros_like(x)
    for it in range(l, run.maxiter - it0 + l):
        c, k = it - l + 1, it - l
        if it + 1 > exact.columns:
            uw, w = apply_B(z[it], pool)               # overlaps the reductions in flight
        if c > exact.columns:                          # the start's columns are exact
            gram = pipe.wait(c)
            G.new_column(c)
            for r in range(max(0, c - 2 * l), c - l):
                G[r, c] = G[c - l, r + l]              # <v_r, P_l v_(c-l)> = <P_l v_r, v_(c-l)>
            # the last dot, <z_c, v_(c-l-1)>, is G[c-l-1, c] again: their gap is the drift.
            # Rounding leaves a floor under it, reached within 2l + 3 columns (and
            # harmless): drift counts from 100 times that floor, or drift_tol.
            drift = abs(gram[-1] - G[c - l - 1, c]) / np.sqrt(max(gram[-2], 1e-300))
            if c <= exact.columns + l + 3:
                floor = max(floor, drift)
            if drift_tol is not None and not drift <= max(drift_tol, 100.0 * floor):
                raise BasisDrift(c, drift, p)
            G[c - l, c] = gram[0]
            complete_column(G, c, c - l + 1, gram[1:-1])
        _lanczos_column(G, k, l, sigma, gamma, delta)
        d_prev = delta[k - 1] if k > 0 else 0.0
        _advance_levels(levels, z[it], k, sigma, gamma[k], d_prev, delta[k], pool)
        exact.levels(levels, k + 1)
        if it + 1 <= exact.columns:
            u[it + 1], z[it + 1] = exact.z(it + 1)
        else:
            exact.release()
            # z_(i+1), u_(i+1) by the three-term recurrence and the next column's dot
            # products in one pass (its kernel is generated per depth)
            previous = it - 1 if it - 1 in z else it
            vectors = {"u": uw, "ui": u[it], "um": u[previous], "z": w, "zi": z[it], "zm": z[previous],
                       "v": levels[0][c], "vp": levels[0][c - 1], **{f"y{j}": z[c + j] for j in range(1, l)}}
            dots = next_column(l)(vectors, {"d": 1.0 / delta[k], "g": gamma[k] / delta[k],
                                             "e": d_prev / delta[k]})
            u[it + 1], z[it + 1] = uw, w
            if it + 1 <= run.maxiter - it0:            # column it+1 is still needed
                pipe.start(it + 1, dots)
        for j in [j for j in u if j < it]:
            pool.give(u.pop(j))
        for j in [j for j in z if j < min(it, it - l + 3)]:
            pool.give(z.pop(j))

        # D-Lanczos: the CG iterate x_(k+1) from the LDL^T factorization of T
        if k == 0:
            eta, zeta = gamma[0], beta
        else:
            lam = delta[k - 1] / eta
            eta = gamma[k] - lam * delta[k - 1]
            zeta = -lam * zeta
        if not eta > 0:       # at k = 0, eta = gamma_0 = (A v_0, v_0)
            raise breakdown(INDEFINITE if k == 0 else PIVOT, eta, k, p)
        solution_update()({"p": p, "v": levels[0][k], "x": x},
                        {"a": -d_prev / eta, "t": 1.0 / eta, "zeta": zeta})
        pool.give(levels[0].pop(k - 1, None))
        run.iterations = it0 + k + 1
        run.iterated(x)
        if run.converged(run.iterations, abs(zeta) * delta[k] / eta):
            return run.true_residual_passes(x, natural=True)
        if run.iterations >= run.maxiter:
            return False
    return False


def _start(run, x, l, sigma, G, apply, report_initial):
    """The pipeline's start: ``2l`` steps of classical Lanczos (blocking reductions,
    orthogonalized twice), and from their ``V`` and ``T`` the columns ``0 .. 2l`` of ``G``
    (``P_j(T) e_0`` for ``j <= l``, ``P_l(T) e_(j-l)`` after), the auxiliary vectors
    ``z_j = V G[:, j]`` and the first intermediate bases, all exact.

    Made by the shifted recurrences themselves, as in the papers and in PETSc, the first
    ``z_j`` of a smooth residual are nearly parallel (every shift far above its
    eigenvalues), and the Cholesky steps on their Gram entries lose digits that the
    recurrences then carry on: 5e-7 in ``G`` for 2D Poisson with 10^6 unknowns and
    ``b = 1`` at depth 2, 1e-5 at depth 5 on 200^2.  Returns None when ``x`` has
    converged, else ``(beta, u, z, levels, exact)``.  Collective.
    """
    basis = krylov_basis(run, run.b - run.A.matvec(x), 2 * l, symmetric=True, apply=apply)
    beta = basis.beta
    done = run.converged(run.iterations, beta) if report_initial else beta <= run.atol
    if done or beta == 0.0:
        return None
    if basis.invariant:                # the Krylov space ends within these steps: CG's last step
        k = basis.steps
        x += np.linalg.solve(basis.tridiagonal()[:k, :k], beta * np.eye(k)[0]) @ basis.V
        run.iterations += k
        run.iterated(x)
        if run.true_residual_passes(x, natural=True):
            return None
        raise BasisBreakdown(f"invariant Krylov space after {k} steps, but b - A x fails the test")
    exact = _ExactStart(basis, l, sigma)
    for j in range(exact.columns + 1):
        G.new_column(j)
        column = exact.column(j)
        for i in range(max(0, j - 2 * l), j + 1):
            G[i, j] = column[i]
    u, z = {}, {}
    for j in range(1, l + 1):
        u[j], z[j] = exact.z(j)
    levels = [dict() for _ in range(l)]               # levels[0] is v, levels[m] is q^(m)
    for m in range(l):
        levels[m][0] = exact.level(m, 0)
    return beta, u, z, levels, exact


class _ExactStart:
    """What the start's Lanczos steps give exactly: with ``T`` their tridiagonal matrix,
    ``P_m(B) v_k = V P_m(T) e_k`` as long as ``T`` holds the entries it needs."""

    def __init__(self, basis, l, sigma):
        S = basis.steps
        self.l, self.columns = l, S
        self.V, self.U = basis.V, basis.U
        T = basis.tridiagonal()                   # its unknown T[S, S] is never read here
        self.P = [np.eye(S + 1)]                  # P_m(T) for m = 0 .. l
        for m in range(l):
            self.P.append((T - sigma[m] * np.eye(S + 1)) @ self.P[-1])

    def column(self, j):
        """Column ``j`` of ``G``: ``P_j(T) e_0`` (``j <= l``), ``P_l(T) e_(j-l)`` after."""
        return self.P[j][:, 0] if j <= self.l else self.P[self.l][:, j - self.l]

    def z(self, j):
        """``(u_j, z_j)``: ``z_j = V G[:, j]`` and its ``M^-1`` partner."""
        column = self.column(j)
        return column @ self.U, column @ self.V

    def release(self):
        """Drop the start's vectors (``2l + 1`` and their partners) once no longer needed."""
        self.V = self.U = None

    def level(self, m, k):
        return self.P[m][:, k] @ self.V

    def levels(self, levels, k):
        """Replace the recurrences' ``q^(m)_k`` by the exact ones where ``T`` holds them."""
        if k + self.l - 2 < self.columns:
            for m in range(self.l):
                levels[m][k][:] = self.level(m, k)


def _lanczos_column(G, k, l, sigma, gamma, delta):
    """gamma_k and delta_k (column k of the Lanczos matrix) from columns k and k+1 of G:
    compare the coefficients of v_k and v_(k+1) in the recurrence that made z_(k+1)."""
    c = k + 1
    g_prev = G[k - 1, k] * delta[k - 1] if k > 0 else 0.0
    if c <= l:              # z_c = (B - sigma_k) z_k
        delta.append(G[c, c] / G[k, k])
        gamma.append((G[k, c] + sigma[k] * G[k, k] - g_prev) / G[k, k])
    else:                   # z_c = (B z_k - gamma_(k-l) z_k - delta_(k-l-1) z_(k-1)) / delta_(k-l)
        delta.append(G[c, c] * delta[k - l] / G[k, k])
        gamma.append((G[k, c] * delta[k - l] - g_prev) / G[k, k] + gamma[k - l])


def _advance_levels(levels, top, k, sigma, gamma_k, delta_prev, delta_k, pool):
    """q^(m)_(k+1) for m = 0 .. l-1 (m = 0 is v) by the Lanczos recurrence applied to
    P_m(B) v: B q^(m)_k = q^(m+1)_k + sigma_m q^(m)_k, with q^(l)_k = z_(k+l) = ``top``."""
    l = len(levels)
    for m in range(l):
        above = levels[m + 1][k] if m + 1 < l else top
        new = pool.take()
        level_update()({"q": new, "qk": levels[m][k], "top": above, "qm": levels[m].get(k - 1, above)},
                     {"a": (sigma[m] - gamma_k) / delta_k, "d": 1.0 / delta_k, "e": delta_prev / delta_k})
        levels[m][k + 1] = new
    for m in range(1, l):
        pool.give(levels[m].pop(k - 1, None))
