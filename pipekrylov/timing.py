"""Time per iteration, measured apart from a solve's set-up: the difference of two solves
of ``n1`` and ``n2`` iterations (rtol 0, so each runs exactly that many), divided by
``n2 - n1``, the median over rounds.  Used by ``make demo``, ``benchmarks/strong_scaling_limit.py``
and :func:`pipekrylov.model.calibrate`.

Compilation is excluded (every solver runs once before timing); each solver's rounds run
together (after another solver the caches and the allocator are in another state, which
at a few hundred unknowns is more than the signal); small, cheap cases get more rounds;
the garbage collector is off while timing.
"""
import gc
import time

import numpy as np

__all__ = ["grid", "poisson", "PLCG", "petsc_solver", "per_iteration"]

# p(2)-CG as timed: its shifts on [0, 2] (the spectrum of Jacobi-preconditioned 2D Poisson,
# as PETSc's -ksp_pipelcg_lmax would give them), no drift check: the pipeline itself, with
# no shift estimate, hand-over or restart in the solves timed
PLCG = dict(depth=2, interval=(0.0, 2.0), drift_tol=None)


def grid(total):
    """nx, ny with nx * ny == total, as square as powers of two allow."""
    nx = int(round(np.sqrt(total)))
    if nx * nx == total:
        return nx, nx
    nx = 1 << int(np.ceil(np.log2(np.sqrt(total))))
    return nx, total // nx


def poisson(comm, total):
    """The timed problem: 2D Poisson with ``total`` unknowns and b = A 1 + 10^-3 (not an
    eigenvector, nor a solution p(l)-CG's start reaches at once)."""
    from .matrix import poisson2d
    A = poisson2d(comm, *grid(total))
    return A, A.matvec(np.ones(A.partition.nlocal)) + 1e-3


# "cg-sr": PETSc's cg with its dots in one reduction (-ksp_cg_single_reduction)
SINGLE_REDUCTION = {"cg-sr": [("ksp_cg_single_reduction", True)]}


def petsc_type(kind):
    """PETSc's KSP type of a benchmark's name for it."""
    return "cg" if kind == "cg-sr" else kind


def petsc_solver(A, b, ksp_type, pc="jacobi"):
    """``solve(n) -> iterations``: ``n`` iterations of PETSc's ``ksp_type`` on A (a
    DistributedCSR) from x = 0, rtol 0 (``"cg-sr"``: cg with -ksp_cg_single_reduction)."""
    from .petsc import aij, make_ksp
    M = aij(A)
    options = {"pipelcg": [("ksp_pipelcg_pipel", 2)],   # the natural norm: no reduction of its own
               "fcg": [("ksp_norm_type", "natural")], "pipefcg": [("ksp_norm_type", "natural")],
               "pipegcr": [("ksp_norm_type", "natural")], **SINGLE_REDUCTION}
    ksp = make_ksp(M, petsc_type(ksp_type), pc, options=options.get(ksp_type, []))
    bv, xv = M.createVecs()
    bv.array[:] = b

    def solve(n):
        ksp.setTolerances(rtol=0.0, atol=0.0, divtol=1e300, max_it=n)
        xv.set(0.0)
        ksp.solve(bv, xv)
        return ksp.getIterationNumber()
    return solve


def _timed(comm, func, n):
    """(slowest rank's seconds, iterations done) of ``func(n)``."""
    from mpi4py import MPI
    comm.Barrier()
    t0 = time.perf_counter()
    its = func(n)
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX), its


def per_iteration(comm, funcs, n1, n2, repeat=3, budget=1.0):
    """``{name: (seconds per iteration, fixed seconds per solve)}`` of each ``funcs[name](n)
    -> iterations``, per iteration done; None where a solver stopped more than two short
    of ``n`` iterations (a breakdown, or convergence to rounding) or did not do the same
    each round.  At least ``repeat`` rounds, more (up to 200) where a round
    is cheap, within about ``budget`` seconds per solver; a round times a solve of ``n1``
    iterations then one of ``n2``, and the figure is the median over the rounds of their
    difference (at a few hundred unknowns a solve's own cost varies by more than the
    iterations between them cost, from one moment of a process to the next: the median
    of the pairs is the steadier, the difference of the fastest of each the less).
    Collective."""
    out = {}
    for name, func in funcs.items():
        func(n1)   # warm: compilation excluded, from the rounds' count too
        t0 = time.perf_counter()
        func(n1)
        func(n2)
        rounds = comm.bcast(max(repeat, min(200, int(budget / max(time.perf_counter() - t0, 1e-4)))))
        pairs, counts, short = [], set(), False
        gc.collect()
        gc.disable()   # a collection inside a timed solve is noise, not the solver's cost
        try:
            for _ in range(rounds):
                pair, its = [], []
                for n in (n1, n2):
                    t, done = _timed(comm, func, n)
                    # PETSc's pipecg counts one more; its pipecg2 stops at an even count
                    # below max_it, one or two less
                    short |= not n - 2 <= done <= n + 1
                    pair.append(t)
                    its.append(done)
                pairs.append(pair)
                counts.add(tuple(its))
        finally:
            gc.enable()
        pairs = np.array(pairs)
        its1, its2 = min(counts)
        short |= len(counts) > 1 or its2 <= its1
        per = float(np.median(pairs[:, 1] - pairs[:, 0])) / max(its2 - its1, 1)
        # not linear in the iterations (noise larger than the signal, or a solver whose
        # iterations differ, as p(l)-CG's first 2l): no figure
        out[name] = None if short or per <= 0 else (per, float(np.median(pairs[:, 0])) - its1 * per)
    return out


# ---------------------------------------------------------------- whole solves
# The solvers of a time-stepping run as users call them, default arguments: through a
# Solver set up once, through the functions, and PETSc's on a KSP set up once.
STEPPERS = ("cg", "p-cg", "p(2)-cg")
PETSC_STEPPERS = {"cg": "cg", "p-cg": "pipecg", "p(2)-cg": "pipelcg", "p-cg-gropp": "groppcg",
                  "p-cg-pr": "pipeprcg", "p-cg2": "pipecg2", "b-cg": "cg-sr",   # cg-sr: cg -ksp_cg_single_reduction
                  "p-fcg": "pipefcg", "p-gcr": "pipegcr", "p-fgmres": "pipefgmres",
                  "s-gmres": "pgmres"}   # PETSc has no s-step GMRES: its pipelined one


def heat(comm, total, c):
    """Backward Euler for the heat equation on a 2D grid of ``total`` unknowns with a
    source: the matrix ``I + c L`` (``L`` the 5-point Laplacian's stencil, ``c = dt /
    h^2``) and the first state, two Gaussian bumps (no eigenvector of ``L``, whose modes
    are sines), which is the source's shape too (step k solves ``(I + c L) u_(k+1) = u_k
    + s_k u_0``: :func:`source`)."""
    import scipy.sparse as sp
    from .matrix import DistributedCSR, poisson2d
    L = poisson2d(comm, *grid(total))
    p = L.partition
    rows = (sp.identity(p.n, format="csr")[p.start:p.end] + c * L.to_scipy()).tocsr()
    A = DistributedCSR.from_local_rows(p, rows.indptr, rows.indices, rows.data, p.n)
    nx, ny = grid(total)
    i = np.arange(p.start, p.end)
    x, y = (i % nx + 1) / (nx + 1), (i // nx + 1) / (ny + 1)
    u0 = np.exp(-((x - 0.3) ** 2 + (y - 0.6) ** 2) / 0.02) + 0.5 * np.exp(-((x - 0.7) ** 2 + (y - 0.25) ** 2) / 0.05)
    return A, u0


def source(k):
    """The source's strength in step k: it varies, so that the state keeps changing
    (without it the state decays to zero and the solves to none)."""
    return 0.5 * (1.0 + np.sin(0.7 * k))


def calibrate_dt(comm, total, iterations, M="jacobi", rtol=1e-8):
    """``c = dt / h^2`` for which the first backward Euler step takes about ``iterations``
    iterations of CG (bisection on log c).  Collective."""
    import pipekrylov as pk
    lo, hi = 1e-3, 1e4
    for _ in range(14):
        c = np.sqrt(lo * hi)
        A, u0 = heat(comm, total, c)
        its = pk.Solver(A, "cg", M=M).solve(u0 + source(0) * u0, u0, rtol=rtol).iterations
        if its == iterations:
            break
        lo, hi = (c, hi) if its < iterations else (lo, c)
    return c


def steppers(A, u0, M, latency=0.0, rtol=1e-8, names=STEPPERS):
    """``{name: step(u, k) -> (u_(k+1), iterations)}``: our solvers ``names`` (cg,
    p(2)-cg, s-cg, s-gmres, p-cg2, p-fcg, p-gcr, p-fgmres or a derived "p-..." or "b-...") through a Solver and
    through the functions.
    Collective (the Solvers' set-up)."""
    import pipekrylov as pk
    out = {}
    for name in names:
        solver = pk.Solver(A, name, M=M, latency=latency)
        out[f"{name} Solver"] = (lambda s: lambda u, k: _step(s.solve(u + source(k) * u0, u, rtol=rtol)))(solver)
        out[f"{name} function"] = (lambda f: lambda u, k: _step(f(A, u + source(k) * u0, u, rtol=rtol, M=M,
                                                                   latency=latency)))(_function(name))
    return out


def _function(name):
    """The scipy-style function of a stepper's method: CG, p(2)-CG, s-step CG and GMRES, p-CG2, p-FCG,
    p-GCR, p-FGMRES or a derived "p-..." or "b-..."."""
    import pipekrylov as pk
    if name == "cg":
        return pk.cg
    if name in ("s-cg", "s-gmres"):
        return pk.sstep_cg if name == "s-cg" else pk.sstep_gmres
    if name in ("p-cg2", "p-fcg", "p-gcr", "p-fgmres"):
        return {"p-cg2": pk.pipecg2, "p-fcg": pk.pipefcg, "p-gcr": pk.pipegcr, "p-fgmres": pk.pipefgmres}[name]
    if name == "p(2)-cg":
        return pk.pipelined("cg", depth=2)
    if name.startswith("b-"):
        from .derive import blocking
        return blocking(name[2:])
    return pk.pipelined(name[2:])


def _step(result):
    if result.info != 0:
        raise RuntimeError(f"a time step did not converge: {result.message}")
    return result.x, result.iterations


def petsc_steppers(A, u0, M, rtol=1e-8, names=STEPPERS):
    """PETSc's counterparts of ``names`` that have one (:data:`PETSC_STEPPERS`: cg, pipecg,
    groppcg, pipeprcg, cg with ``-ksp_cg_single_reduction`` ("cg-sr"), pipefcg, pipegcr,
    pipefgmres and pgmres (right preconditioned, as ours), and
    pipelcg of depth 2 with its shifts on [0, 2], which hold the spectrum of either
    preconditioned heat matrix: PETSc's default lmin = lmax = 0 takes thousands of
    iterations here) on a KSP set up once, each step ``VecCopy(x, b); VecAXPY(b, s_k, u0);
    KSPSolve(ksp, b, x)``: the time-stepping loop a PETSc user writes.  Our solvers' norms:
    the unpreconditioned, except for pipelcg (the natural, its only).  M: ``"jacobi"`` or
    ``"ic0"`` (block Jacobi, ICC(0) per rank)."""
    from .petsc import aij, make_ksp
    mat = aij(A)
    pc, options = ("jacobi", []) if M == "jacobi" else ("bjacobi", [("sub_pc_type", "icc")])
    out = {}
    for name, kind in ((name, PETSC_STEPPERS[name]) for name in names if name in PETSC_STEPPERS):
        extra = {"pipelcg": [("ksp_pipelcg_pipel", 2), ("ksp_pipelcg_lmax", 2.0)],
                 **SINGLE_REDUCTION}.get(kind, [])
        ksp = make_ksp(mat, petsc_type(kind), pc, rtol=rtol, max_it=10000,
                       unpreconditioned=kind != "pipelcg", right=kind in ("pipefgmres", "pgmres"), options=options + extra)
        ksp.setInitialGuessNonzero(True)
        x, b = mat.createVecs()
        shape = x.duplicate()
        shape.array[:] = u0

        def step(u, k, ksp=ksp, x=x, b=b, shape=shape):
            if u is not None:   # the first step: the state given
                x.array[:] = u
            x.copy(b)
            b.axpy(source(k), shape)
            ksp.solve(b, x)
            if ksp.getConvergedReason() <= 0:
                raise RuntimeError(f"a PETSc {ksp.getType()} step did not converge")
            return None, ksp.getIterationNumber()
        out[f"PETSc {kind}"] = step
    return out


def time_each(comm, steppers, u0, steps, repeat, row):
    """``row`` with each stepper's time per step (us, under its name) and iterations per
    step (``name + " its"``), from :func:`time_steps`; a stepper whose step did not
    converge is left out.  Collective."""
    for name, step in steppers.items():
        measured = time_steps(comm, step, u0, steps, repeat)
        if measured is not None:
            row[name], row[name + " its"] = measured[0] * 1e6, measured[1]
    return row


def time_steps(comm, stepper, u0, steps, repeat=3):
    """``(seconds per step, iterations per step)``: ``steps`` steps from ``u0`` (the slowest
    rank's time), the best of ``repeat`` runs (each from ``u0``), compilation excluded (a
    run first); None where a step did not converge.  Collective."""
    from mpi4py import MPI
    best, its = np.inf, 0
    for k in range(repeat + 1):
        gc.collect()
        gc.disable()
        try:
            comm.Barrier()
            t0 = time.perf_counter()
            u, total = u0, 0
            for step in range(steps):
                new, n = stepper(u, step)
                u = new if new is not None else None
                total += n
            t = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        except RuntimeError:   # a solve that did not converge: on every rank alike
            return None
        finally:
            gc.enable()
        if k:   # the first run warms (compiles, loads the caches)
            best, its = min(best, t), total
    return best / steps, its / steps
