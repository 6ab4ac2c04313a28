"""Propagators: advance a state of a problem from t0 to t1 with a fixed step.

A propagator is a callable ``propagator(u, t0, t1) -> new state`` that never modifies
``u``; Parareal's coarse and fine propagators are two of them on the same state space.
Explicit Runge-Kutta methods come from their Butcher tableaux; implicit Euler and
Crank-Nicolson are the theta method, whose linear solves use pipekrylov's Krylov solvers.
"""
import threading
from dataclasses import dataclass

import numpy as np

__all__ = ["Tableau", "TABLEAUX", "RungeKutta", "ThetaMethod", "StencilEuler", "implicit_euler",
           "crank_nicolson", "step_count"]


@dataclass(frozen=True)
class Tableau:
    """An explicit Runge-Kutta method: ``a`` strictly lower triangular (rows), ``b``, ``c``."""
    name: str
    a: tuple
    b: tuple
    c: tuple

    @property
    def stages(self):
        return len(self.b)


TABLEAUX = {t.name: t for t in [
    Tableau("forward-euler", ((),), (1.0,), (0.0,)),
    # Shu & Osher's three-stage strong-stability-preserving method, in Butcher form
    Tableau("ssp-rk3", ((), (1.0,), (0.25, 0.25)), (1 / 6, 1 / 6, 2 / 3), (0.0, 1.0, 0.5)),
    Tableau("rk4", ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
            (1 / 6, 1 / 3, 1 / 3, 1 / 6), (0.0, 0.5, 0.5, 1.0)),
]}


def step_count(t0, t1, dt):
    """The number of steps of size ``dt`` from t0 to t1; it must be a whole number."""
    steps = round((t1 - t0) / dt)
    if steps < 1 or abs(steps * dt - (t1 - t0)) > 1e-9 * max(abs(t1 - t0), dt):
        raise ValueError(f"the interval [{t0}, {t1}] is not a whole number of steps dt = {dt}")
    return steps


class RungeKutta:
    """An explicit Runge-Kutta propagator.

    Parameters
    ----------
    problem : object with ``rhs(t, u, out)``
    method : str or Tableau
        ``"forward-euler"``, ``"ssp-rk3"``, ``"rk4"`` or a :class:`Tableau`.
    dt : float
        Step size; every interval given must be a whole number of steps.
    """

    def __init__(self, problem, method, dt):
        self.problem = problem
        self.tableau = TABLEAUX[method] if isinstance(method, str) else method
        self.dt = float(dt)

    def __call__(self, u, t0, t1):
        tab, dt, rhs = self.tableau, self.dt, self.problem.rhs
        u = np.array(u, dtype=float, order="C")  # a copy: the input is never modified
        k = [np.empty_like(u) for _ in range(tab.stages)]
        stage = np.empty_like(u)
        t = t0
        for _ in range(step_count(t0, t1, dt)):
            for i in range(tab.stages):
                stage[...] = u
                for j, a in enumerate(tab.a[i]):
                    if a:
                        stage += (dt * a) * k[j]
                rhs(t + tab.c[i] * dt, stage, k[i])
            for b, ki in zip(tab.b, k):
                u += (dt * b) * ki
            t += dt
        return u

    def __repr__(self):
        return f"RungeKutta({self.problem!r}, {self.tableau.name!r}, dt={self.dt})"


class ThetaMethod:
    """``(I - theta dt L) u_new = (I + (1 - theta) dt L) u`` for a linear problem ``u' = L u``.

    theta = 1 is implicit Euler, theta = 1/2 Crank-Nicolson.  Each step is a linear solve
    by pipekrylov (CG when ``L`` is symmetric, else GMRES) on this process alone
    (``MPI.COMM_SELF``): in Parareal each time slice owns its whole state.  The solver is
    set up once (:class:`pipekrylov.Solver`, one per thread) and solves every step.

    Parameters
    ----------
    problem : object with ``operator()`` returning a scipy.sparse matrix
    theta : float in [0.5, 1]
    dt : float
    rtol : float
        Relative tolerance of each linear solve.
    method : {"cg", "gmres", None}
        None picks CG for a symmetric operator, else GMRES.
    """

    def __init__(self, problem, theta, dt, rtol=1e-12, method=None):
        import scipy.sparse as sp

        if not 0.5 <= theta <= 1.0:
            raise ValueError(f"theta must lie in [0.5, 1] (A-stable), not {theta}")
        self.problem, self.theta, self.dt, self.rtol = problem, float(theta), float(dt), rtol
        L = sp.csr_matrix(problem.operator())
        eye = sp.identity(L.shape[0], format="csr")
        symmetric = abs(L - L.T).max() == 0
        self.method = method or ("cg" if symmetric else "gmres")
        self._implicit = (eye - self.theta * self.dt * L).tocsr()
        # a solver per thread: it owns work buffers, and the shared-memory controller calls
        # one propagator from several threads at once
        self._per_thread = threading.local()
        self._explicit = (eye + (1.0 - self.theta) * self.dt * L).tocsr() if theta < 1 else None

    def __call__(self, u, t0, t1):
        solver = getattr(self._per_thread, "solver", None)
        if solver is None:
            import pipekrylov
            from mpi4py import MPI
            solver = self._per_thread.solver = pipekrylov.Solver(self._implicit, self.method, comm=MPI.COMM_SELF)
        x = np.array(u, dtype=float).reshape(-1)
        for _ in range(step_count(t0, t1, self.dt)):
            b = x if self._explicit is None else self._explicit @ x
            result = solver.solve(b, x0=x, rtol=self.rtol, atol=0.0)
            if result.info != 0:
                raise RuntimeError(f"{self!r}: the linear solve failed ({result.reason})")
            x = result.x
        return x.reshape(np.shape(u))

    def __repr__(self):
        return f"ThetaMethod({self.problem!r}, theta={self.theta}, dt={self.dt}, {self.method})"


def implicit_euler(problem, dt, **options):
    return ThetaMethod(problem, 1.0, dt, **options)


def crank_nicolson(problem, dt, **options):
    return ThetaMethod(problem, 0.5, dt, **options)


class StencilEuler:
    """Forward Euler for :class:`~parareal.problems.Heat` in 2D or 3D by stencil's kernels.

    A forward-Euler step of the heat equation with zero Dirichlet boundaries is the
    Jacobi stencil ``u' = (1 - 2 d c) u + c S`` with ``c = nu dt / h**2`` on the grid
    padded by its boundary layer; the stencil package runs it with the given scheduler
    (``stencil.Sweep``, ``stencil.PipelinedBlocking``, ``stencil.WavefrontTiles``), bit for
    bit the same every way.
    """

    def __init__(self, problem, dt, scheduler=None):
        from stencil import Stencil, Sweep

        if problem.dim not in (2, 3):
            raise ValueError(f"the stencil kernels are 2D and 3D, not {problem.dim}D")
        self.problem, self.dt = problem, float(dt)
        self.stencil = Stencil.heat(problem.dim, problem.nu * self.dt * (problem.n + 1) ** 2)
        self.scheduler = Sweep(threads=1) if scheduler is None else scheduler

    def __call__(self, u, t0, t1):
        from stencil import advance

        interior = (slice(1, -1),) * self.problem.dim
        grid = np.zeros(tuple(n + 2 for n in np.shape(u)))
        grid[interior] = u
        grid = advance(grid, self.stencil, step_count(t0, t1, self.dt), scheduler=self.scheduler)
        return grid[interior].copy()

    def __repr__(self):
        return f"StencilEuler({self.problem!r}, dt={self.dt}, {self.scheduler})"
