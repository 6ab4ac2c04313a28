"""Deep pipelines: p(l)-CG and p(l)-GMRES against CG, GMRES(m), a dense solve and PETSc;
the staggered reductions in the trace; shifts, breakdowns and bad input."""
import io
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import pipekrylov as pk
from pipekrylov.deep import chebyshev_shifts, plcg, plgmres
from pipekrylov.deep.basis import BandedColumns, SqrtBreakdown, complete_column
from pipekrylov.loops.plcg import W_NAMES, read_from
from helpers import SPD, load, textbook_pcg, rhs, symmetric_generators as generators, true_residual

DEPTHS = [1, 2, 3, 4, 5]


# ---------------------------------------------------------------- the small algebra
def test_cholesky_columns_reproduce_a_dense_factorization():
    """G from Gram entries column by column equals numpy's Cholesky factor of Z^T Z."""
    rng = np.random.default_rng(1)
    Z = rng.standard_normal((30, 6))
    gram = Z.T @ Z
    G = BandedColumns(6, 6)
    for c in range(6):
        G.new_column(c)
        complete_column(G, c, 0, gram[:c + 1, c])
    dense = np.column_stack([G.rows(c, 0, 6) for c in range(6)])
    assert np.allclose(dense, np.linalg.cholesky(gram).T, rtol=1e-12, atol=1e-12)
    G.new_column(6)
    with pytest.raises(SqrtBreakdown):
        complete_column(G, 6, 6, np.array([-1.0]))


def test_chebyshev_shifts_are_the_roots_of_the_chebyshev_polynomial():
    shifts = chebyshev_shifts(5, 1.0, 3.0)
    t = np.polynomial.Chebyshev.basis(5)
    assert np.allclose(t((shifts - 2.0) / 1.0), 0.0, atol=1e-12)


# ---------------------------------------------------------------- p(l)-CG
@pytest.mark.mpi
@pytest.mark.parametrize("name", ["poisson2d", "poisson3d", "anisotropic2d"])
@pytest.mark.parametrize("pc", [None, "jacobi"])
def test_plcg_converges_within_cg_iterations_plus_fill(name, pc):
    """Done-when of the deep-pipelines issue, on the generators at 1, 2 and 4 ranks:
    relative residual 1e-8 in at most 1.1 x CG's iterations + l."""
    comm = MPI.COMM_WORLD
    A = generators(comm)[name]
    b = rhs(A)
    base = pk.cg(A, b, rtol=1e-8, M=pc).iterations
    for l in DEPTHS:
        res = pk.pipelined("cg", depth=l)(A, b, rtol=1e-8, M=pc) if l > 1 else plcg(A, b, depth=1, rtol=1e-8, M=pc)
        assert res.info == 0, (l, res.message)
        assert res.iterations <= 1.1 * base + l, (l, res.iterations, base)
        # natural norm ||r||_M vs the 2-norm: same up to the preconditioner's scaling (Jacobi: 1/4)
        assert true_residual(A, res.x, b) < (1e-8 if pc is None else 3e-8), l


# Every shared SPD matrix (Jacobi) at every depth: on the ill-conditioned ones (bcsstk01,
# 494_bus, 1138_bus, bcsstk15) the drift check hands over to p-CG before a breakdown
MATRIX_CASES = [(name, l) for name in SPD for l in DEPTHS]


@pytest.mark.mpi
@pytest.mark.parametrize("name,l", MATRIX_CASES)
def test_plcg_on_real_matrices(name, l):
    A = load(name)
    b = A @ np.ones(A.shape[0])
    comm = MPI.COMM_WORLD     # given whole: distributed for the solve, x returned whole
    base = pk.cg(A, b, rtol=1e-8, M="jacobi", comm=comm, maxiter=20000).iterations
    res = plcg(A, b, depth=l, rtol=1e-8, M="jacobi", comm=comm, maxiter=5 * base)
    assert res.info == 0 and res.iterations <= 1.1 * base + l, (res.iterations, base, res.message)
    assert res.restarts == 0 and (res.handed_over is None or 0 < res.handed_over < res.iterations)
    # the true residual in the Jacobi norm is what was tested
    r = b - A @ res.x
    assert np.sqrt(r @ (r / A.diagonal())) < 1e-8 * np.sqrt(b @ (b / A.diagonal()))


@pytest.mark.mpi
@pytest.mark.parametrize("l", [2, 5])
def test_smooth_right_hand_side_keeps_cg_iterations_at_depth(l):
    """b = 1 on 2D Poisson 200^2: its first Lanczos vectors are smooth and a basis made by
    the shifted recurrence from them lost 1e-5 of G at l = 5 (579 iterations to CG's
    369); the exact start keeps CG's count.  Whether the drift check hands over in the
    last iterations, where the quantities it compares near the rounding level, is
    rounding's (at 2 ranks: at iteration 358 of 369 on one CPU, not at all on another), so
    a hand-over is allowed there, and only there."""
    A = pk.poisson2d(MPI.COMM_WORLD, 200)
    b = np.ones(A.partition.nlocal)
    base = pk.cg(A, b, rtol=1e-8).iterations
    res = plcg(A, b, depth=l, rtol=1e-8)
    assert res.info == 0 and res.iterations <= base + 2 and res.restarts == 0
    assert res.handed_over is None or res.handed_over > 0.9 * base, (res.handed_over, base)


@pytest.mark.parametrize("l", [1, 3])
def test_exact_start_is_the_shifted_basis(l):
    """The start's Lanczos vectors, CG's preconditioned residuals, are orthonormal, and its
    z_j are P_j(B) v_0 and P_l(B) v_(j-l) made densely from them (those the pipeline reads:
    at l = 1 z_1 in the ring, at l = 3 z_5 and z_6 kept apart)."""
    A = pk.poisson2d(MPI.COMM_SELF, 12).to_scipy()
    dense = A.toarray()
    b = np.random.default_rng(2).standard_normal(A.shape[0])
    lmax = 8.0
    sigma = chebyshev_shifts(l, 0.0, lmax)
    solver = pk.Solver(A, f"p({l})-cg", interval=(0.0, lmax), comm=MPI.COMM_SELF)
    solver.solve(b, rtol=0.0, maxiter=1)          # the start and one iteration
    W = dict(zip(W_NAMES, solver.W))
    V = W["V"][:2 * l + 1]
    np.testing.assert_allclose(V @ V.T, np.eye(2 * l + 1), atol=1e-12)
    np.testing.assert_allclose(V[0], b / np.linalg.norm(b), atol=1e-14)

    def P(m, v):
        for s in sigma[:m]:
            v = dense @ v - s * v
        return v
    first = read_from(l)[0]
    assert first <= 2 * l - 1
    for j in range(first, 2 * l + 1):
        z = W["Z"][j % (l + 3)] if j <= l else W["EXZ"][j - l - 1]
        expected = P(j, V[0]) if j <= l else P(l, V[j - l])
        np.testing.assert_allclose(z, expected, atol=1e-10 * np.linalg.norm(expected))


def test_plcg_solution_matches_a_dense_solve():
    A = load("nos4")
    b = np.random.default_rng(3).standard_normal(A.shape[0])
    x = plcg(A, b, depth=3, rtol=1e-12, M="jacobi", comm=MPI.COMM_SELF).x
    exact = np.linalg.solve(A.toarray(), b)
    assert np.linalg.norm(x - exact) < 1e-8 * np.linalg.norm(exact)


@pytest.mark.mpi
def test_each_reduction_is_waited_on_l_iterations_later():
    """Column c's reduction starts in iteration c - 1 and is waited for in iteration
    c - 1 + l: l - 1 other columns start between its start and its wait (each iteration
    starts one, after its operator application); the start's are blocking."""
    comm = MPI.COMM_WORLD
    A = pk.poisson2d(comm, 40)
    b = rhs(A)
    for l in (1, 2, 3):
        res = plcg(A, b, depth=l, rtol=1e-8)
        assert res.restarts == 0 and res.handed_over is None and res.info == 0
        events = res.reductions.events
        columns = [e for e in events if e.label.startswith("G[:,")]
        starts = sorted((e.start, e.id) for e in columns if e.kind == "start")
        for wait in (e for e in columns if e.kind == "wait"):
            started = next(t for t, i in starts if i == wait.id)
            between = sum(1 for t, i in starts if started < t < wait.start)
            assert between == l - 1 or wait.start >= starts[-1][0], (l, between)
        blocking = [e for e in events if e.kind == "start" and not e.label.startswith("G[:,")]
        assert len(blocking) >= 2 * l + 1   # the start's Lanczos steps and the confirmation


@pytest.mark.mpi
@pytest.mark.parametrize("scale,depth", [(0.05, 2), (0.05, 5), (0.002, 3)])
def test_solves_shorter_than_the_estimate_or_the_start(scale, depth):
    """A well-conditioned system (I + c L, a backward Euler step) that CG solves in fewer
    iterations than the shift estimate takes, or even than the start's 2l steps: the
    default p(l)-CG converges, b - A x meets the tolerance, within one iteration of CG's
    count, and with shifts set (its Solver's next solve keeps them)."""
    comm = MPI.COMM_WORLD
    L = pk.poisson2d(MPI.COMM_SELF, 24).to_scipy()
    A = (sp.identity(L.shape[0]) + scale * L).tocsr()
    b = np.sin(np.arange(A.shape[0]) * 0.37) + 1.0
    cg = pk.cg(A, b, rtol=1e-8, M="jacobi", comm=comm)
    solver = pk.Solver(A, f"p({depth})-cg", M="jacobi", comm=comm)
    for x0 in (None, cg.x + 1e-6):
        res = solver.solve(b, x0, rtol=1e-8)
        assert res.info == 0, res.message
        r = b - A @ res.x                            # scipy's test, on the 2-norm, is met
        assert np.linalg.norm(r) <= 1e-8 * np.linalg.norm(b)
        # (none where CG's iterate came from the start's steps, before the estimate's end)
        assert np.all(np.isfinite(res.shifts)) if res.shifts is not None else res.iterations <= 2 * depth
        assert res.residual_norms[-1] <= 1e-8 * np.linalg.norm(b) * 1.01   # and says so
        if x0 is None:
            assert res.iterations <= cg.iterations + 1


def test_automatic_shifts_beat_the_monomial_basis():
    """PETSc's pipelcg default (all shifts zero) needs restarts and many more iterations
    at l = 3 on 2D Poisson; the automatic Chebyshev shifts need neither."""
    A = pk.poisson2d(MPI.COMM_SELF, 40)
    b = rhs(A)
    auto = plcg(A, b, depth=3, rtol=1e-8)
    mono = plcg(A, b, depth=3, rtol=1e-8, shifts=0.0, maxiter=2000, fallback_depth=None, drift_tol=None)
    assert auto.info == 0 and auto.restarts <= 1 and auto.handed_over is None
    assert mono.restarts > 5 and (mono.info != 0 or mono.iterations > 2 * auto.iterations)
    assert np.all(auto.shifts > 0) and auto.shifts.max() < 8.0 * 1.3


def test_petsc_pipelcg_without_lmax_stalls_where_ours_converges():
    pytest.importorskip("petsc4py.PETSc")
    A = pk.poisson2d(MPI.COMM_SELF, 40).to_scipy()
    b = A @ np.ones(A.shape[0])
    base = pk.cg(A, b, rtol=1e-8, comm=MPI.COMM_SELF).iterations
    from pipekrylov.petsc import make_ksp, run_ksp
    ksp = make_ksp(A, "pipelcg", "none", max_it=10 * base, options=[("ksp_pipelcg_pipel", 3)])
    theirs, reason, _ = run_ksp(ksp, b)
    ours = plcg(A, b, depth=3, rtol=1e-8, comm=MPI.COMM_SELF)
    assert ours.info == 0 and ours.iterations <= 1.1 * base + 3
    assert reason < 0 or theirs > 3 * base


def test_breakdowns_restart_and_are_reported():
    A = pk.poisson2d(MPI.COMM_SELF, 40)
    b = rhs(A)
    res = plcg(A, b, depth=4, rtol=1e-8, shifts=0.0, maxiter=3000, fallback_depth=None, drift_tol=None)
    assert res.restarts > 0 and res.depth == 4
    if res.info == 0:
        assert true_residual(A, res.x, b) < 1e-8
    else:
        assert res.reason in ("diverged_breakdown", "diverged_its")


def test_a_breakdown_falls_back_to_a_smaller_depth():
    """Without the drift check, bcsstk15 breaks the depth-3 basis within the first 40
    iterations, and again after every restart at depth 3; falling back to depth 1
    finishes within CG's count."""
    A = load("bcsstk15")
    b = A @ np.ones(A.shape[0])
    comm = MPI.COMM_SELF
    base = pk.cg(A, b, rtol=1e-8, M="jacobi", comm=comm).iterations
    lines = io.StringIO()
    res = plcg(A, b, depth=3, rtol=1e-8, M="jacobi", comm=comm, monitor=lines, drift_tol=None)
    same = plcg(A, b, depth=3, rtol=1e-8, M="jacobi", comm=comm, fallback_depth=None, maxiter=20 * base,
                drift_tol=None)
    assert res.info == 0 and res.restarts >= 1 and res.depth == 1
    assert res.iterations <= 1.1 * base + 3, (res.iterations, base)
    assert same.depth == 3 and same.restarts > 5 and (same.info != 0 or same.iterations > 1.5 * res.iterations)
    assert "p(3)-cg: restart 1 after iteration" in lines.getvalue() and "depth 1" in lines.getvalue()
    two = plcg(A, b, depth=3, rtol=1e-8, M="jacobi", comm=comm, fallback_depth=2, maxiter=20 * base,
               drift_tol=None)
    assert two.info == 0 and two.depth == 2


def test_hand_over_continues_cg_in_the_same_krylov_space():
    """Where the drift check hands over (bcsstk01, depth 3), p-CG goes on from the
    iterate and the last direction with CG's residual norms, not those of CG restarted
    from that iterate."""
    A = load("bcsstk01")
    b = A @ np.ones(A.shape[0])
    dinv = 1.0 / A.diagonal()
    res = plcg(A, b, depth=3, rtol=1e-8, M="jacobi", comm=MPI.COMM_SELF)
    k = res.handed_over
    assert k is not None and 10 < k < res.iterations - 10, k
    xs, _, norms = textbook_pcg(A, b, k + 15, dinv)
    np.testing.assert_allclose(res.residual_norms[:k + 15], norms[:k + 15], rtol=1e-7)
    restarted = textbook_pcg(A, b - A @ xs[k - 1], 15, dinv)[2]
    assert abs(restarted[10] - norms[k + 10]) > 0.1 * norms[k + 10]     # the test can tell


def test_the_drift_check_hands_over_and_is_reported():
    A = load("494_bus")
    b = A @ np.ones(A.shape[0])
    lines = io.StringIO()
    res = plcg(A, b, depth=4, rtol=1e-8, M="jacobi", comm=MPI.COMM_SELF, monitor=lines)
    assert res.info == 0 and res.depth == 1 and res.restarts == 0 and 0 < res.handed_over < res.iterations
    unchecked = plcg(A, b, depth=4, rtol=1e-8, M="jacobi", comm=MPI.COMM_SELF, drift_tol=None,
                     fallback_depth=None)
    assert unchecked.restarts >= 1 and unchecked.iterations > 1.5 * res.iterations   # 1046 against 402
    assert f"after iteration {res.handed_over}: CG goes on as p-CG" in lines.getvalue()
    # its three dots (r, M r), (M r, A p), (p, A p): one reduction, the loop's own
    labels = [e.label for e in res.reductions.events if e.kind == "start"]
    assert labels.count("hand-over (r,Mr) (Mr,Ap) (p,Ap)") == 1, sorted(set(labels))
    # the hand-over's first iteration is not reported twice
    its = [int(line.split()[0]) for line in lines.getvalue().splitlines() if "KSP Residual norm" in line]
    assert its == sorted(set(its))


def test_indefinite_matrix_is_reported():
    A = sp.diags(np.r_[np.ones(50), -np.ones(50)]).tocsr() + sp.eye(100, k=1) * 0.1
    A = (A + A.T).tocsr()
    res = plcg(A, np.ones(100), depth=2, rtol=1e-8, comm=MPI.COMM_SELF, interval=(0, 2), maxiter=500)
    assert res.info < 0 and res.reason in ("diverged_indefinite_mat", "diverged_breakdown")


@pytest.mark.parametrize("kwargs,match", [({"depth": 0}, "depth"), ({"depth": 2.5}, "depth"),
                                          ({"depth": 3, "shifts": [1.0, 2.0, 3.0, 4.0]}, "shifts"),
                                          ({"depth": 2, "shifts": "chebyshev"}, "shifts"), ({"depth": 2, "interval": (2, 1)}, "interval"),
                                          ({"depth": 2, "shifts": [np.nan]}, "shifts"),
                                          ({"depth": 2, "drift_tol": -1.0}, "drift_tol"),
                                          ({"depth": 2, "drift_tol": "tight"}, "drift_tol"),
                                          ({"depth": 2, "fallback_depth": 0}, "depth")])
def test_bad_options_get_clear_errors(kwargs, match):
    A = pk.poisson2d(MPI.COMM_SELF, 10)
    with pytest.raises(ValueError, match=match):
        plcg(A, rhs(A), **kwargs)


# ---------------------------------------------------------------- p(l)-GMRES
def nonsymmetric_cases():
    yield "convection_diffusion2d", pk.convection_diffusion2d(MPI.COMM_SELF, 40).to_scipy(), None
    yield "cage9", load("cage9"), None
    yield "hor_131", load("hor_131"), "jacobi"
    yield "orsirr_1", load("orsirr_1"), "jacobi"


@pytest.mark.parametrize("case", list(nonsymmetric_cases()), ids=lambda c: c[0])
def test_plgmres_within_gmres_iterations(case):
    name, A, pc = case
    b = A @ np.ones(A.shape[0])
    comm = MPI.COMM_SELF
    base = pk.gmres(A, b, rtol=1e-8, restart=30, M=pc, comm=comm, maxiter=5000)
    assert base.info == 0
    for l in (1, 2, 3):
        res = pk.pipelined("gmres", depth=l)(A, b, rtol=1e-8, restart=30, M=pc, comm=comm, maxiter=5000)
        assert res.info == 0, (l, res.message)
        assert res.iterations <= 1.1 * base.iterations, (l, res.iterations, base.iterations)
        assert np.linalg.norm(b - A @ res.x) < 1e-8 * np.linalg.norm(b)


@pytest.mark.mpi
def test_plgmres_in_parallel_matches_serial_counts():
    comm = MPI.COMM_WORLD
    A = pk.convection_diffusion2d(comm, 40)
    b = rhs(A)
    base = pk.gmres(A, b, rtol=1e-8, restart=20).iterations
    for l in (1, 2, 3):
        res = plgmres(A, b, depth=l, restart=20, rtol=1e-8)
        assert res.info == 0 and res.iterations <= 1.1 * base
        assert true_residual(A, res.x, b) < 1e-8


# hor_131 is left out: ours cuts 7 of its cycles short at a square-root breakdown and
# restarts from the iterate reached, which happens to take 457 iterations to pgmres's 530
PGMRES_CASES = [("convection_diffusion2d", None), ("cage9", None), ("cage9", "jacobi"), ("orsirr_1", "jacobi"),
                ("gr_30_30", "jacobi"), ("nos4", "jacobi")]


@pytest.mark.parametrize("name,pc", PGMRES_CASES)
def test_plgmres_depth_one_agrees_with_petsc_pgmres(name, pc):
    pytest.importorskip("petsc4py.PETSc")
    A = dict((n, a) for n, a, _ in nonsymmetric_cases()).get(name)
    A = load(name) if A is None else A
    b = A @ np.ones(A.shape[0])
    from pipekrylov.petsc import make_ksp, run_ksp
    ksp = make_ksp(A, "pgmres", pc or "none", max_it=5000, right=True,   # right preconditioned, as ours
                   options=[("ksp_gmres_restart", 30)])
    theirs, reason, _ = run_ksp(ksp, b)
    assert reason > 0
    ours = plgmres(A, b, depth=1, restart=30, rtol=1e-8, M=pc, comm=MPI.COMM_SELF, maxiter=5000)
    assert ours.info == 0
    assert abs(ours.iterations - theirs) <= max(1, 0.05 * theirs), (name, ours.iterations, theirs)


def test_plgmres_rejects_a_depth_beyond_the_restart():
    A = pk.convection_diffusion2d(MPI.COMM_SELF, 10)
    with pytest.raises(ValueError, match="depth"):
        plgmres(A, rhs(A), depth=5, restart=4)


# ---------------------------------------------------------------- printing
def test_cli_prints_the_deep_variant():
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "derive", "cg", "--depth", "3"],
                         capture_output=True, text=True, check=True).stdout
    assert "p(3)-CG" in out and "wait R_c" in out and "(started 3 iterations ago)" in out
    assert "q2_(k+1)" in out and "| x_(k+1) = x_k + alpha_k p_k" in out
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "derive", "gmres", "--depth", "2"],
                         capture_output=True, text=True, check=True).stdout
    assert "p(2)-GMRES" in out and "started 2 iterations ago" in out
