"""Shared test helpers: the real matrices, reference builds, scipy calls across versions."""
import glob
import inspect
import os

import numpy as np
import scipy.io
import scipy.sparse as sp

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
MATRICES = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(DATA, "*.mtx")))
SPD = ["bcsstk01", "nos4", "494_bus", "gr_30_30", "1138_bus", "bcsstk15"]
NONSYMMETRIC = ["hor_131", "west0479", "orsirr_1", "cage9"]
# 2-norm condition numbers, from the collection's index (shared/matrices/INDEX.md)
COND = {"bcsstk01": 8.8e5, "nos4": 1.6e3, "494_bus": 2.4e6, "gr_30_30": 1.9e2, "1138_bus": 8.6e6,
        "bcsstk15": 6.5e9, "hor_131": 4.3e4, "west0479": 3.3e11, "orsirr_1": 7.7e4, "cage9": 1.3e1}


def matrix_path(name):
    return os.path.join(DATA, f"{name}.mtx")


def load(name):
    """The reference: scipy's own reader."""
    return scipy.io.mmread(matrix_path(name)).tocsr()


def scipy_solve(solver, A, b, rtol, **kw):
    """Call a scipy solver with rtol (scipy >= 1.12) or tol (Debian's 1.10); count iterations."""
    count = [0]
    if "rtol" in inspect.signature(solver).parameters:
        kw["rtol"] = rtol
    else:
        kw["tol"] = rtol
    x, info = solver(A, b, callback=lambda *a: count.__setitem__(0, count[0] + 1), **kw)
    return x, info, count[0]


def laplacian_1d(n):
    return sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))


def _without_zeros(A):
    A = sp.csr_matrix(A)
    A.eliminate_zeros()
    return A


def reference_stencil(kind, n):
    """Generator matrices assembled independently (Kronecker sums) for comparison, without
    the explicit zeros scipy's kron stores for tiny grids."""
    I = sp.identity(n)
    T = laplacian_1d(n)
    if kind == "poisson2d":
        return _without_zeros(sp.kron(I, T) + sp.kron(T, I))
    if kind == "poisson3d":
        return _without_zeros(sp.kron(sp.kron(I, I), T) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(T, I), I))
    if kind == "anisotropic2d":
        eps = 1e-2
        return _without_zeros(eps * sp.kron(I, T) + sp.kron(T, I))
    if kind == "convection_diffusion2d":
        h = 1.0 / (n + 1)
        D = sp.diags([-1.0, 1.0], [-1, 1], shape=(n, n)) * (h / 2)  # central first difference
        return _without_zeros(sp.kron(I, T) + sp.kron(T, I) + 20.0 * sp.kron(I, D) + 10.0 * sp.kron(D, I))
    raise ValueError(kind)


def rel(a, b):
    return np.linalg.norm(np.asarray(a) - np.asarray(b)) / max(np.linalg.norm(b), 1e-300)


def textbook_pcg(A, b, steps, dinv=None):
    """Preconditioned CG as printed (Jacobi with ``dinv = 1 / diag(A)``, or none), the
    independent reference: the iterates x_1.., the directions p_0.. that made them, and
    the natural residual norms sqrt(r^T M r) from r_0 on."""
    x, r = np.zeros_like(b), b.copy()
    z = r if dinv is None else dinv * r
    p, rz = z.copy(), r @ z
    xs, ps, norms = [], [], [np.sqrt(rz)]
    for _ in range(steps):
        q = A @ p
        alpha = rz / (p @ q)
        x, r = x + alpha * p, r - alpha * q
        z = r if dinv is None else dinv * r
        rz_new = r @ z
        xs.append(x.copy())
        ps.append(p.copy())
        norms.append(np.sqrt(rz_new))
        p, rz = z + rz_new / rz * p, rz_new
    return xs, ps, np.array(norms)


# the generators at the sizes the solver tests use (the sizes their comments' counts are of)
GENERATED = {"poisson2d": 24, "poisson3d": 9, "anisotropic2d": 20, "convection_diffusion2d": 24}


def problem(comm, name):
    """(distributed matrix, the same matrix whole in scipy): a generator at its size in
    GENERATED, or a matrix of tests/data."""
    import pipekrylov as pk
    from pipekrylov.matrix import generators
    if name in GENERATED:
        n = GENERATED[name]
        return getattr(generators, name)(comm, n), reference_stencil(name, n)
    A = load(name)
    return pk.DistributedCSR.from_scipy(A, comm), A


def symmetric_generators(comm):
    """The symmetric generators at the sizes the Krylov tests solve."""
    import pipekrylov as pk
    return {"poisson2d": pk.poisson2d(comm, 40), "poisson3d": pk.poisson3d(comm, 12),
            "anisotropic2d": pk.anisotropic2d(comm, 40)}


def rhs(A):
    """b = A 1 for a DistributedCSR (this rank's rows)."""
    return A.matvec(np.ones(A.partition.nlocal))


def true_residual(A, x, b):
    """``||b - A x|| / ||b||`` over every rank of a DistributedCSR."""
    r = b - A.matvec(x)
    comm = A.comm
    return np.sqrt(comm.allreduce(r @ r) / comm.allreduce(b @ b))
