"""How far rounding alone moves the quantities the tests compare: iteration counts, the
attainable accuracy, whether p(l)-CG's drift check hands over.

    python -m benchmarks.rounding_spread [--seeds 8]
    mpiexec -n 2 python -m benchmarks.rounding_spread      (the partition changes the sums)
    OPENBLAS_CORETYPE=Prescott python -m benchmarks.rounding_spread   (numpy's BLAS kernel)

Every case is solved with b and with b perturbed by a few ulps (b (1 + 4 eps u), u uniform
in [-1, 1], one seed each); each row prints the range over those solves of our count, the
reference's count and their difference.  A test may assert a difference only where this
range is narrow; where it is wide, the tests keep what is robust (convergence, the true
residual, the first residual norms) and the counts live in docs/rounding.md with the
spread this prints.
"""
import argparse

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from mpi4py import MPI

import pipekrylov as pk
from pipekrylov.derive import BASE_METHODS
from pipekrylov.derive.interpret import run_base

from benchmarks.matrices import load, problem, scipy_solve

RTOL = 1e-8


def perturbed(b, seed):
    if seed == 0:
        return b
    u = np.random.default_rng(seed).uniform(-1.0, 1.0, b.shape)
    return b * (1.0 + 4 * np.finfo(float).eps * u)


def derived_against_base(comm, method, name, b):
    """Derived pipelined method and its base method, Jacobi (test_derive.py)."""
    D, A = problem(comm, name)
    derived = pk.pipelined(method)(D, D.scatter(b), rtol=RTOL, maxiter=5000, M="jacobi")
    if method in ("cg", "cr", "bicgstab"):
        base = getattr(pk, method)(D, D.scatter(b), rtol=RTOL, maxiter=5000, M="jacobi").iterations
    else:
        dinv = 1.0 / A.diagonal()
        norms = run_base(BASE_METHODS[method], A, b, M=lambda v: dinv * v, iterations=derived.iterations + 5)
        converged = norms < RTOL * np.linalg.norm(b)
        base = int(np.argmax(converged)) if converged.any() else len(norms)
    return derived.iterations, base


def against_petsc(comm, method, name, b, pc):
    """Ours serially against PETSc's pipelined KSP (test_derive.py)."""
    from pipekrylov.petsc import make_ksp, run_ksp
    _, A = problem(MPI.COMM_SELF, name)
    ours = pk.pipelined(method)(A, b, rtol=RTOL, maxiter=20000, comm=MPI.COMM_SELF, M=None if pc == "none" else pc)
    ksp = make_ksp(A, {"cg": "pipecg", "bicgstab": "pipebcgs"}[method], pc, rtol=RTOL, max_it=20000,
                   unpreconditioned=True)
    return ours.iterations, run_ksp(ksp, b)[0]


def against_scipy(comm, method, name, b, pc):
    """Classic method on the partition against scipy's (test_solvers.py)."""
    D, A = problem(comm, name)
    res = getattr(pk, method)(D, D.scatter(b), rtol=RTOL, maxiter=20000, M=pc)
    kw = {"M": sp.diags(1.0 / A.diagonal())} if pc else {}
    _, _, its = scipy_solve(getattr(spla, method), A, b, RTOL, maxiter=20000, **kw)
    return res.iterations, its


def accuracy_ratios(comm, method, name, b):
    """True residuals at rtol 1e-10 of the derived method with and without residual
    replacement over the classic method's, no preconditioner (test_derive.py's
    attainable accuracy)."""
    A = load(name)
    kw = dict(comm=MPI.COMM_SELF)
    budget = 3 * getattr(pk, method)(A, b, rtol=1e-8, maxiter=30000, **kw).iterations
    true = lambda x: np.linalg.norm(b - A @ x) / np.linalg.norm(b)  # noqa: E731
    classic = getattr(pk, method)(A, b, rtol=1e-10, maxiter=budget, **kw)
    with_rr = pk.pipelined(method, replace_automatic=True)(A, b, rtol=1e-10, maxiter=budget, **kw)
    without = pk.pipelined(method)(A, b, rtol=1e-10, maxiter=budget, **kw)
    return true(with_rr.x) / true(classic.x), true(without.x) / true(classic.x)


def smooth_start_handover(comm, depth, seed):
    """p(l)-CG on 2D Poisson 200^2 with b = 1 (test_deep.py): iterations over CG's, and
    the iteration of a hand-over (0: none)."""
    A = pk.poisson2d(comm, 200)
    b = A.scatter(perturbed(np.ones(200 * 200), seed))
    base = pk.cg(A, b, rtol=RTOL).iterations
    res = pk.plcg(A, b, depth=depth, rtol=RTOL)
    return res.iterations - base, res.handed_over or 0


COUNT_CASES = (
    [("base", m, p) for m in ("bicgstab",) for p in ["convection_diffusion2d", "poisson2d", "bcsstk01", "nos4",
                                                       "gr_30_30", "hor_131", "cage9"]]
    + [("base", "cgs", p) for p in ["poisson2d", "anisotropic2d", "bcsstk01", "nos4", "gr_30_30", "494_bus",
                                    "bcsstk15", "orsirr_1", "cage9"]]
    + [("base", "cg", p) for p in ["bcsstk01", "494_bus", "1138_bus", "bcsstk15"]]
    + [("petsc-jacobi", "bicgstab", p) for p in ["convection_diffusion2d", "bcsstk01", "nos4", "gr_30_30", "cage9"]]
    + [("petsc-none", "bicgstab", p) for p in ["convection_diffusion2d", "gr_30_30", "cage9", "nos4"]]
    + [("petsc-jacobi", "cg", p) for p in ["bcsstk01", "494_bus", "1138_bus", "bcsstk15"]]
    + [("scipy-jacobi", "bicgstab", "bcsstk01"), ("scipy-jacobi", "cg", "bcsstk01"),
       ("scipy-none", "bicgstab", "anisotropic2d"), ("scipy-none", "bicgstab", "poisson2d"),
       ("scipy-none", "bicgstab", "gr_30_30"), ("scipy-none", "bicgstab", "cage9")]
    + [("scipy-none", "cg", p) for p in ["nos4", "bcsstk01", "494_bus", "1138_bus", "bcsstk15"]])
ACCURACY_CASES = [("cg", "494_bus"), ("cg", "1138_bus"), ("cr", "bcsstk15"), ("bicgstab", "orsirr_1"),
                  ("bicgstab", "1138_bus")]


def spread(values):
    values = np.asarray(values)
    return f"{values.min()}-{values.max()}" if values.min() != values.max() else f"{values.min()}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="solves per case: b and seeds-1 perturbations")
    parser.add_argument("--only", nargs="*", default=None, help="case kinds: base petsc scipy accuracy deep")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    say = print if comm.rank == 0 else (lambda *a, **k: None)
    kinds = set(args.only or ["base", "petsc", "scipy", "accuracy", "deep"])
    try:
        import petsc4py  # noqa: F401
    except ImportError:
        kinds.discard("petsc")
    say(f"# {comm.size} rank(s), {args.seeds} solves per case (b and b perturbed by a few ulps)")
    say("| compared with | method | matrix | ours | reference | ours - reference |")
    say("|---|---|---|---|---|---|")
    for kind, method, name in COUNT_CASES:
        if kind.split("-")[0] not in kinds or (kind.startswith("petsc") and comm.size > 1):
            continue
        _, A = problem(MPI.COMM_SELF, name)
        ones = A @ np.ones(A.shape[0])
        pairs = []
        for seed in range(args.seeds):
            b = comm.bcast(perturbed(ones, seed))
            if kind == "base":
                pairs.append(derived_against_base(comm, method, name, b))
            elif kind.startswith("petsc"):
                pairs.append(against_petsc(comm, method, name, b, kind.split("-")[1]))
            else:
                pc = None if kind.endswith("none") else "jacobi"
                pairs.append(against_scipy(comm, method, name, b, pc))
        ours, ref = np.array(pairs).T
        say(f"| {kind} | {method} | {name} | {spread(ours)} | {spread(ref)} | {spread(ours - ref)} |", flush=True)
    if "accuracy" in kinds and comm.size == 1:
        say("\n| method | matrix, no preconditioner | true residual / classic's: with replacement | without |")
        say("|---|---|---|---|")
        for method, name in ACCURACY_CASES:
            A = load(name)
            ratios = np.array([accuracy_ratios(comm, method, name, perturbed(A @ np.ones(A.shape[0]), s))
                               for s in range(args.seeds)])
            say(f"| {method} | {name} | {ratios[:, 0].min():.3g}-{ratios[:, 0].max():.3g} "
                f"| {ratios[:, 1].min():.3g}-{ratios[:, 1].max():.3g} |", flush=True)
    if "deep" in kinds:
        say("\n| depth | p(l)-CG iterations - CG's, b = 1 on poisson2d:200 | hand-over at iteration (0: none) |")
        say("|---|---|---|")
        for depth in (2, 3, 5):
            runs = [smooth_start_handover(comm, depth, s) for s in range(args.seeds)]
            extra, handed = np.array(runs).T
            say(f"| {depth} | {spread(extra)} | {', '.join(map(str, handed))} |", flush=True)


if __name__ == "__main__":
    main()
