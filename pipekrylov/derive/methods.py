"""The base methods, each written as in the textbook (compare line by line)."""
from .method import Method

__all__ = ["CG", "CG_HS", "CG_GROPP", "CG_PR", "CR", "BICGSTAB", "CGS", "BASE_METHODS"]

# Preconditioned CG in the Chronopoulos & Gear (1989) form: the two dot products of an
# iteration, (r, u) and (A u, u), taken together, and (p, A p) from the recurrence
# (p, Ap) = (Au, u) - beta * gamma / alpha_old (Saad, Iterative Methods, sec. 6.7).
# This is the form Ghysels & Vanroose (2014) pipeline: the derivation gives their p-CG.
CG = Method(
    name="cg", title="Preconditioned Conjugate Gradients (Chronopoulos-Gear form)",
    state=("x", "r", "p", "s"),
    startup=("Ax = A x", "r = b - Ax", "p = 0", "s = 0", "gamma_old = float('inf')", "alpha_old = 1"),
    iteration=(
        "u = M r",
        "w = A u",
        "gamma = (r, u)",
        "delta = (w, u)",
        "beta = gamma / gamma_old",
        "alpha = gamma / (delta - beta * gamma / alpha_old)",
        "p = u + beta*p",
        "s = w + beta*s",
        "x = x + alpha*p",
        "r = r - alpha*s",
        "gamma_old = gamma",
        "alpha_old = alpha",
    ),
    checks=(("gamma >= 0", "diverged_indefinite_pc"), ("alpha > 0", "diverged_indefinite_mat")),
    invariants=("s = A p",),
)

# Preconditioned CG as Hestenes & Stiefel (1952) wrote it and scipy runs it (Saad, Alg.
# 9.1).  Its pipelined variant comes from expanding (p, A p) by bilinearity: six dot
# products in the one reduction instead of three, and less stable on ill-conditioned
# matrices than the Chronopoulos-Gear form (docs/derivation.md has the figures).
CG_HS = Method(
    name="cg-hs", title="Preconditioned Conjugate Gradients (Hestenes-Stiefel form)",
    state=("x", "r", "p"),
    startup=("Ax = A x", "r = b - Ax", "p = 0", "gamma_old = 1"),
    iteration=(
        "u = M r",
        "gamma = (r, u)",
        "beta = gamma / gamma_old",
        "p = u + beta*p",
        "s = A p",
        "delta = (p, s)",
        "alpha = gamma / delta",
        "x = x + alpha*p",
        "r = r - alpha*s",
        "gamma_old = gamma",
    ),
    checks=(("gamma >= 0", "diverged_indefinite_pc"), ("delta > 0", "diverged_indefinite_mat")),
)

# Preconditioned CG in the form Gropp's CG overlaps (Gropp, "Update on libraries for
# blue waters", 2010; PETSc's KSPGROPPCG): u = M r kept by the recurrence u = u - alpha q
# with q = M s, so that each of the two reductions has one operator application to hide
# behind: w = A u behind (r, u), q = M s behind (p, s).  The reduction point before
# "q = M s" is given: with the fewest points the derivation would give a p-CG instead.
CG_GROPP = Method(
    name="cg-gropp", title="Preconditioned Conjugate Gradients (Gropp's form)",
    state=("x", "r", "u", "p", "s"),
    startup=("Ax = A x", "r = b - Ax", "u = M r", "p = 0", "s = 0", "gamma_old = float('inf')"),
    iteration=(
        "w = A u",
        "gamma = (r, u)",
        "beta = gamma / gamma_old",
        "p = u + beta*p",
        "s = w + beta*s",
        "q = M s",
        "delta = (p, s)",
        "alpha = gamma / delta",
        "x = x + alpha*p",
        "r = r - alpha*s",
        "u = u - alpha*q",
        "gamma_old = gamma",
    ),
    checks=(("gamma >= 0", "diverged_indefinite_pc"), ("delta > 0", "diverged_indefinite_mat")),
    invariants=("u = M r", "s = A p"),
    reduction_points=("q = M s",),
)

# Predict-and-recompute CG (Chen & Carson, SISC 2020, their pipe-PR-CG; PETSc's
# KSPPIPEPRCG with its default -recompute_w): the next (r, M r) is predicted by expanding
# it in this iteration's dots, which gives beta, and recomputed in the next reduction,
# which gives alpha; A M r is recomputed from M r rather than carried by a recurrence.
# Every dot is of state vectors, so the operators of an iteration (two A, two M) all
# overlap its one reduction: the attainable accuracy of classic CG at p-CG's one
# reduction, for twice p-CG's operator applications.
CG_PR = Method(
    name="cg-pr", title="Predict-and-recompute Conjugate Gradients",
    state=("x", "r", "rt", "p", "s", "st"),
    startup=("Ax = A x", "r = b - Ax", "rt = M r", "p = rt", "s = A p", "st = M s"),
    iteration=(
        "nu = (rt, r)",
        "mu = (p, s)",
        "delta = (rt, s)",
        "gamma = (st, s)",
        "w = A rt",
        "wt = M w",
        "u = A st",
        "ut = M u",
        "alpha = nu / mu",
        "nu_next = nu - 2*alpha*delta + alpha*alpha*gamma",
        "beta = nu_next / nu",
        "x = x + alpha*p",
        "r = r - alpha*s",
        "rt = rt - alpha*st",
        "w = w - alpha*u",
        "wt = wt - alpha*ut",
        "p = rt + beta*p",
        "s = w + beta*s",
        "st = wt + beta*st",
    ),
    checks=(("nu >= 0", "diverged_indefinite_pc"), ("mu > 0", "diverged_indefinite_mat")),
    invariants=("rt = M r", "s = A p", "st = M s"),
)

# Preconditioned Conjugate Residuals in the same form (Ghysels & Vanroose's base for
# p-CR): u = M r, s = A p and q = M s by recurrences; each iteration applies A once
# (w = A u) and M once (m = M w).
CR = Method(
    name="cr", title="Preconditioned Conjugate Residuals",
    state=("x", "r", "u", "p", "s", "q"),
    startup=("Ax = A x", "r = b - Ax", "u = M r", "p = 0", "s = 0", "q = 0",
             "gamma_old = float('inf')", "alpha_old = 1"),
    iteration=(
        "w = A u",
        "m = M w",
        "gamma = (u, w)",
        "delta = (m, w)",
        "beta = gamma / gamma_old",
        "sq = delta - beta * gamma / alpha_old",
        "alpha = gamma / sq",
        "p = u + beta*p",
        "s = w + beta*s",
        "q = m + beta*q",
        "x = x + alpha*p",
        "r = r - alpha*s",
        "u = u - alpha*q",
        "gamma_old = gamma",
        "alpha_old = alpha",
    ),
    # (s, q) = (A p, M A p) > 0 for SPD M, whatever A's definiteness: CR goes on where
    # (u, A u) < 0 (a symmetric indefinite A), as the classic loop does
    checks=(("gamma != 0", "diverged_breakdown"), ("sq > 0", "diverged_indefinite_pc")),
    invariants=("u = M r", "s = A p", "q = M s"),
)

# Right-preconditioned BiCGStab (van der Vorst 1992; Saad, Alg. 7.7), as scipy writes it.
BICGSTAB = Method(
    name="bicgstab", title="BiCGStab (right preconditioned)",
    state=("x", "r", "p"),
    constants=("b", "r0"),
    startup=("Ax = A x", "r = b - Ax", "r0 = r", "p = 0", "rho_old = 1", "alpha = 1", "omega = 1"),
    iteration=(
        "rho = (r0, r)",
        "beta = (rho / rho_old) * (alpha / omega)",
        "p = r + beta*p - beta*omega*v",
        "phat = M p",
        "v = A phat",
        "r0v = (r0, v)",
        "alpha = rho / r0v",
        "s = r - alpha*v",
        "shat = M s",
        "t = A shat",
        "ts = (t, s)",
        "tt = (t, t)",
        "omega = ts / tt",
        "x = x + alpha*phat + omega*shat",
        "r = s - omega*t",
        "rho_old = rho",
    ),
    # (t, t) = 0 means s = 0 (A M nonsingular): x + alpha phat is the solution
    checks=(("rho != 0", "diverged_breakdown_bicg"), ("r0v != 0", "diverged_breakdown"),
            ("tt > 0", "diverged_breakdown", "x = x + alpha*phat"), ("omega != 0", "diverged_breakdown")),
)

# Right-preconditioned CGS (Sonneveld 1989; Saad, Alg. 7.6).
CGS = Method(
    name="cgs", title="Conjugate Gradient Squared (right preconditioned)",
    state=("x", "r", "p", "q"),
    constants=("b", "r0"),
    startup=("Ax = A x", "r = b - Ax", "r0 = r", "p = 0", "q = 0", "rho_old = 1"),
    iteration=(
        "rho = (r0, r)",
        "beta = rho / rho_old",
        "u = r + beta*q",
        "p = u + beta*q + beta*beta*p",
        "phat = M p",
        "v = A phat",
        "r0v = (r0, v)",
        "alpha = rho / r0v",
        "q = u - alpha*v",
        "uq = u + q",
        "uqhat = M uq",
        "x = x + alpha*uqhat",
        "quq = A uqhat",
        "r = r - alpha*quq",
        "rho_old = rho",
    ),
    checks=(("rho != 0", "diverged_breakdown_bicg"), ("r0v != 0", "diverged_breakdown")),
)

BASE_METHODS = {m.name: m for m in (CG, CG_HS, CG_GROPP, CG_PR, CR, BICGSTAB, CGS)}
