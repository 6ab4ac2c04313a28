"""A Solver set up once and solving many systems; the scipy-style functions on it; the
runtime's reductions that carry the ranks' agreement."""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import pipekrylov as pk
from pipekrylov.runtime import layout as L
from pipekrylov.runtime import reduce as rd
from helpers import load


def true_residual(A, x, b):
    """||b - A x|| / ||b||, by scipy on the whole arrays."""
    return np.linalg.norm(b - A @ x) / np.linalg.norm(b)


FUNCTIONS = {"cg": pk.cg, "gmres": pk.gmres, "bicgstab": pk.bicgstab, "p-cg": pk.pipelined("cg"),
             "p(2)-cg": lambda *a, **k: pk.plcg(*a, depth=2, **k),
             "p(2)-gmres": lambda *a, **k: pk.plgmres(*a, depth=2, **k)}


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["cg", "p-cg", "p(2)-cg", "gmres", "p(2)-gmres", "bicgstab"])
def test_a_solver_solves_as_the_function_does(comm, method):
    """Solves on one Solver, one after another and warm-started, give the function's
    results bit for bit, and each meets its tolerance in ||b - A x||."""
    A = load("nos4") if "cg" in method else load("hor_131")
    rng = np.random.default_rng(3)
    solver = pk.Solver(A, method, M="jacobi", comm=comm)
    x = None
    for step in range(3):
        b = rng.standard_normal(A.shape[0])
        b = comm.bcast(b)
        mine = solver.solve(b, x0=x, rtol=1e-8, maxiter=5000)
        again = FUNCTIONS[method](A, b, x0=x, rtol=1e-8, M="jacobi", comm=comm, maxiter=5000)
        assert mine.info == 0 and true_residual(A, mine.x, b) <= 1e-8 * 1.001
        assert mine.iterations == again.iterations
        assert np.array_equal(mine.x, again.x)
        x = mine.x


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["bicgstab", "p-bicgstab", "p-cgs"])
@pytest.mark.parametrize("how", ["compiled", "python", "monitor"])
def test_divtol_stops_where_the_residual_first_reaches_it(comm, method, how):
    """PETSc's -ksp_divtol: the solve ends with diverged_dtol (info -4) at the first
    residual norm tested that reaches divtol ||b||, its history the undivergent solve's
    up to there; on the compiled loop, the interpreted one and with a live monitor."""
    A = pk.convection_diffusion2d(comm, 20)
    b = A.matvec(np.ones(A.partition.nlocal))
    bnorm = np.sqrt(comm.allreduce(b @ b))
    loop = "python" if how == "python" else "compiled"
    lines = []
    monitor = (lambda k, rnorm: lines.append(k)) if how == "monitor" else False
    solver = pk.Solver(A, method, M="jacobi", comm=comm, loop=loop)
    free = solver.solve(b, rtol=1e-8, monitor=monitor)
    assert free.info == 0 and free.residual_norms.max() > 2.0 * bnorm   # it rises on its way down
    stopped = solver.solve(b, rtol=1e-8, divtol=2.0, monitor=monitor)
    first = int(np.argmax(free.residual_norms >= 2.0 * bnorm))
    assert (stopped.info, stopped.reason) == (-4, "diverged_dtol")
    assert np.array_equal(stopped.residual_norms, free.residual_norms[:first + 1])
    assert how != "monitor" or lines[-1] == stopped.iterations
    with pytest.raises(ValueError, match="divtol must be positive"):
        solver.solve(b, divtol=0.0)


@pytest.mark.mpi
def test_update_takes_the_new_values(comm):
    """After ``update`` a solve is one of the new matrix (new values: a new factor; another
    pattern), not of the old one's factor or operands."""
    A = load("nos4")
    b = comm.bcast(np.random.default_rng(0).standard_normal(A.shape[0]))
    solver = pk.Solver(A, "cg", M="ic0", comm=comm)
    x = solver.solve(b, rtol=1e-10).x
    for B, M in (((A + sp.eye(A.shape[0])).tocsr(), None), ((A + A @ A).tocsr(), "jacobi")):
        solver.update(B, M=M)
        y = solver.solve(b, rtol=1e-10).x
        assert true_residual(B, y, b) <= 1e-10 * 1.001
        assert np.linalg.norm(y - spla.spsolve(B.tocsc(), b)) <= 1e-6 * np.linalg.norm(y)
        assert np.linalg.norm(y - x) > 1e-2 * np.linalg.norm(x)


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["cg", "p-cg2", "bicgstab"])
def test_update_gives_a_preconditioner(comm, method):
    """``update(A, M=...)`` on a solver set up without one preconditions the next solves
    (its workspace and the loop's flag made anew) as a solver set up with it does.  The
    matrix is scaled badly (D A D) so that Jacobi's effect is far beyond rounding's."""
    A = load("nos4")
    D = sp.diags(10.0 ** np.linspace(0.0, 3.0, A.shape[0]))
    A = (D @ A @ D).tocsr()
    b = comm.bcast(np.random.default_rng(2).standard_normal(A.shape[0]))
    solver = pk.Solver(A, method, comm=comm)
    plain = solver.solve(b, rtol=1e-10)
    solver.update(A, M="jacobi")
    updated = solver.solve(b, rtol=1e-10)
    fresh = pk.Solver(A, method, M="jacobi", comm=comm).solve(b, rtol=1e-10)
    assert updated.iterations == fresh.iterations
    assert plain.iterations > 3 * fresh.iterations
    assert np.array_equal(updated.residual_norms, fresh.residual_norms)


@pytest.mark.mpi
@pytest.mark.parametrize("method", ["p(4)-cg", "p(2)-gmres"])
def test_update_forgets_what_the_old_matrix_taught(comm, method):
    """After ``update(A2)`` a deep pipeline estimates its shifts from A2, and p(l)-CG hands
    over to a p-CG on A2 (nos4 at depth 4 hands over, with A and with A2): the solve is a
    fresh solver's, bit for bit.  A2 = A + diag(A) / 100: Jacobi's spectrum moved by 0.01."""
    A = load("nos4")
    A2 = (A + 0.01 * sp.diags(A.diagonal())).tocsr()
    b = comm.bcast(np.random.default_rng(3).standard_normal(A.shape[0]))
    solver = pk.Solver(A, method, M="jacobi", comm=comm)
    first = solver.solve(b, rtol=1e-8)
    solver.update(A2)
    updated = solver.solve(b, rtol=1e-8)
    fresh = pk.Solver(A2, method, M="jacobi", comm=comm).solve(b, rtol=1e-8)
    assert first.info == updated.info == fresh.info == 0
    assert not np.allclose(fresh.shifts, first.shifts, rtol=1e-3)
    if method == "p(4)-cg":
        assert first.handed_over is not None and fresh.handed_over is not None
    assert np.array_equal(updated.shifts, fresh.shifts)
    assert updated.iterations == fresh.iterations
    assert np.array_equal(updated.residual_norms, fresh.residual_norms)
    assert np.array_equal(updated.x, fresh.x)


@pytest.mark.mpi
def test_the_functions_see_a_matrix_changed_in_place(comm):
    """The functions keep a Solver with the matrix; changing ``A.data`` in place is seen
    (the kept solver is checked against a checksum of the arrays) and solved anew."""
    A = load("nos4").copy()
    b = comm.bcast(np.random.default_rng(1).standard_normal(A.shape[0]))
    first = pk.cg(A, b, rtol=1e-10, comm=comm)
    kept = list(A._pipekrylov_solvers.values())
    assert len(kept) == 1
    pk.cg(A, b, rtol=1e-10, comm=comm)
    assert list(A._pipekrylov_solvers.values()) == kept           # the same call: reused
    A.data *= 4.0
    second = pk.cg(A, b, rtol=1e-10, comm=comm)
    assert true_residual(A, second.x, b) <= 1e-10 * 1.001
    assert np.allclose(second.x, first.x / 4.0, rtol=1e-6, atol=1e-12)


@pytest.mark.mpi
def test_a_solver_reports_an_error_of_one_rank_on_every_rank(comm):
    """A bad b on one rank only: every rank raises the original error, and the Solver
    solves the next (good) call."""
    A = pk.poisson2d(comm, 8)
    solver = pk.Solver(A, "p-cg", M="jacobi")
    b = A.matvec(np.ones(A.partition.nlocal))
    bad = np.ones(3) if comm.rank == comm.size - 1 else b
    with pytest.raises(ValueError, match="b has length 3"):
        solver.solve(bad, rtol=1e-8)
    result = solver.solve(b, rtol=1e-8)
    assert result.info == 0
    assert np.allclose(A.gather(result.x), 1.0, atol=1e-6)


@pytest.mark.mpi
def test_the_runtime_reduction_sums_and_waits_out_the_latency(comm):
    """The compiled reduction: start, local work, wait gives the global sums, and with an
    injected latency no wait ends before start + latency."""
    D = pk.poisson2d(comm, 9)
    rng = np.random.default_rng(1)
    u, v = rng.random(D.shape[0]), rng.random(D.shape[0])
    R = rd.reductions(comm, 2, 2)
    I, F = np.zeros(L.INTS, np.int64), np.zeros(L.FLOATS)
    I[L.RANKS] = comm.size
    trace = np.zeros((4, 6))
    for latency in (0.0, 0.02):
        F[L.LATENCY] = latency
        R.send[1, :2] = D.scatter(u) @ D.scatter(v), D.scatter(u) @ D.scatter(u)
        rd.start(R, 1, 2, 0, I, F, trace)
        D.matvec(D.scatter(u))
        assert rd.wait(R, 1, I, F, trace) == L.NONE
        uv, uu = R.recv[1, :2]
        assert abs(uv - u @ v) < 1e-12 * abs(u @ v) and abs(uu - u @ u) < 1e-12 * (u @ u)
        row = trace[I[L.TRACE] - 1]
        assert row[4] - row[0] >= latency


@pytest.mark.mpi(min_size=2)
def test_the_runtime_reduction_carries_a_failure_and_a_disagreement(comm):
    """A failure flag set on one rank, or an argument hash that differs, is what every
    rank's wait returns."""
    R = rd.reductions(comm, 1, 1)
    I, F = np.zeros(L.INTS, np.int64), np.zeros(L.FLOATS)
    I[L.RANKS] = comm.size
    trace = np.zeros((4, 6))
    events = []
    for flag, agree in ((1.0 * (comm.rank == 1), 5.0), (0.0, 5.0 + (comm.rank == 0)), (0.0, 7.0)):
        F[L.FLAG], F[L.AGREE] = flag, agree
        I[L.TRACE] = 0
        rd.start(R, 0, 1, 0, I, F, trace)
        events.append(rd.wait(R, 0, I, F, trace))
    assert events == [L.FAILED, L.DISAGREE, L.NONE]


@pytest.mark.mpi
@pytest.mark.parametrize("pc", [None, "jacobi", "ic0"])
def test_python_applies_and_reductions_are_the_operators(comm, pc):
    """A method's steps in Python (a hand-over, a residual replacement, a breakdown's
    check) apply A and M and reduce through the solver: the same operators as scipy's
    and the same sums, counted as the loop counts them, after an update too."""
    A = load("nos4")
    solver = pk.Solver(A, "p(2)-cg", M=pc, comm=comm)
    for step in range(2):
        if step:
            A = (A + sp.identity(A.shape[0])).tocsr()
            solver.update(A)
        p = solver.partition
        rows = slice(p.start, p.end)
        x = np.cos(np.arange(A.shape[0]))
        y = solver.apply("A", x[rows].copy(), np.empty(p.nlocal))
        assert np.allclose(y, (A @ x)[rows], rtol=1e-14, atol=1e-12)
        spmvs = solver.I[L.SPMVS]
        assert np.array_equal(solver.apply("A", x[rows].copy(), np.empty(p.nlocal)), y)
        assert solver.I[L.SPMVS] == spmvs + 1
        if pc == "jacobi":
            z = solver.apply("M", x[rows].copy(), np.empty(p.nlocal))
            assert np.allclose(z, x[rows] / A.diagonal()[rows], rtol=1e-15)
            am = solver.apply("AM", x[rows].copy(), np.empty(p.nlocal))
            assert np.allclose(am, (A @ (x / A.diagonal()))[rows], rtol=1e-13, atol=1e-12)
        local = np.array([comm.rank + 1.0, 2.0 * step])
        sums = solver.reduce(local, solver.spec.labels[0])
        size = comm.size
        assert np.array_equal(sums, [size * (size + 1) / 2, 2.0 * step * size])
