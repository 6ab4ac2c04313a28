"""The base methods, each written as in the textbook (compare line by line)."""
from .method import Method

__all__ = ["CG", "CR", "BICGSTAB", "CGS", "BASE_METHODS"]

# Preconditioned CG (Hestenes & Stiefel 1952; Saad, Iterative Methods, Alg. 9.1), in
# scipy's order: the residual is tested at the top of each iteration.
CG = Method(
    name="cg", title="Preconditioned Conjugate Gradients",
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

# Preconditioned Conjugate Residuals (Saad, Iterative Methods, Alg. 6.20 with M; the base
# of Ghysels & Vanroose's p-CR): u = M r and s = A p kept by recurrences, so each
# iteration applies A once (w = A u) and M once (q = M s).
CR = Method(
    name="cr", title="Preconditioned Conjugate Residuals",
    state=("x", "r", "u", "p", "s"),
    startup=("Ax = A x", "r = b - Ax", "u = M r", "p = 0", "s = 0", "gamma_old = 1"),
    iteration=(
        "w = A u",
        "gamma = (u, w)",
        "beta = gamma / gamma_old",
        "p = u + beta*p",
        "s = w + beta*s",
        "q = M s",
        "delta = (s, q)",
        "alpha = gamma / delta",
        "x = x + alpha*p",
        "r = r - alpha*s",
        "u = u - alpha*q",
        "gamma_old = gamma",
    ),
    residual="r",
    checks=(("gamma != 0", "diverged_breakdown"), ("delta > 0", "diverged_indefinite_pc")),
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
    checks=(("rho != 0", "diverged_breakdown_bicg"), ("r0v != 0", "diverged_breakdown"),
            ("tt > 0", "diverged_breakdown"), ("omega != 0", "diverged_breakdown")),
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

BASE_METHODS = {m.name: m for m in (CG, CR, BICGSTAB, CGS)}
