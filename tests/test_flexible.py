"""Pipelined flexible CG, GCR and GMRES against CG, GMRES, a dense solve and their own contract,
and the block-CG preconditioner (a changing M) against a reference written here: with a
fixed M p-FCG takes CG's iterations; with an M that changes it converges where p-CG does
not, and p-GCR converges on a nonsymmetric problem; one reduction per iteration; the
callback, the monitor, the options and bad input.  (Against PETSc's pipefcg and
pipegcr: tests/test_petsc_ksp.py.)"""
import io

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import pipekrylov as pk
from pipekrylov.loops import flexible as loop
from pipekrylov.precond import BlockCG, PreconditionerFailure
from helpers import NONSYMMETRIC, SPD, load, rhs, true_residual


def count(result, label):
    return int(np.sum(result.reductions.rows[:, 5] == label))


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["poisson2d", "anisotropic2d"])
@pytest.mark.parametrize("pc", [None, "jacobi", "bjacobi"])
def test_with_a_fixed_preconditioner_it_takes_cgs_iterations(name, pc):
    """With a fixed M flexible CG is CG (its Gram-Schmidt coefficients but the last vanish in
    exact arithmetic): within 1.1 x CG's iterations + 2, ||b - A x|| <= 1e-8 ||b||, one
    reduction per iteration besides the start's and the confirmation's."""
    A = getattr(pk, name)(MPI.COMM_WORLD, 40)
    b = rhs(A)
    base = pk.cg(A, b, rtol=1e-8, M=pc, maxiter=2000)
    for mmax, truncation in [(15, "notay"), (1, "standard"), (4, "standard")]:
        res = pk.pipefcg(A, b, rtol=1e-8, M=pc, maxiter=2000, mmax=mmax, truncation=truncation)
        assert res.info == 0, (mmax, truncation, res.reason)
        assert res.iterations <= 1.1 * base.iterations + 2, (mmax, truncation, res.iterations, base.iterations)
        assert true_residual(A, res.x, b) <= 1e-8
        assert count(res, loop.ITERATION_LABEL) == res.iterations
        assert count(res, loop.START_LABEL) == 1 + res.restarts + res.replacements
        assert len(res.residual_norms) == res.iterations + 1


@pytest.mark.parametrize("name", SPD)
def test_on_the_spd_matrices_with_jacobi_it_attains_cgs_accuracy(name):
    """The shared SPD matrices: convergence where CG converges, within 1.1 x CG's
    iterations + 2 where rounding does not decide (the well-conditioned ones), and the
    true residual CG attains, within 10 x, at a tolerance near it."""
    A = load(name)
    b = A @ np.ones(A.shape[0])
    for rtol in (1e-8, 1e-12):
        base = pk.cg(A, b, rtol=rtol, M="jacobi", maxiter=20000, comm=MPI.COMM_SELF)
        res = pk.pipefcg(A, b, rtol=rtol, M="jacobi", maxiter=20000, comm=MPI.COMM_SELF)
        assert res.info == 0 or base.info != 0, (rtol, res.reason)
        if base.info == 0 and rtol == 1e-8 and name in ("nos4", "gr_30_30", "bcsstk01"):
            assert res.iterations <= 1.1 * base.iterations + 2, (res.iterations, base.iterations)
        if res.info == 0:
            assert np.linalg.norm(b - A @ res.x) <= max(rtol * np.linalg.norm(b),
                                                        10 * np.linalg.norm(b - A @ base.x))


def test_solution_matches_a_dense_solve():
    A = pk.poisson2d(MPI.COMM_SELF, 12).to_scipy().toarray() + np.diag(np.linspace(0.0, 3.0, 144))
    b = np.cos(np.arange(144.0))
    res = pk.pipefcg(A, b, rtol=1e-12, M="bjacobi-cg(3)", comm=MPI.COMM_SELF)
    assert res.info == 0
    assert np.allclose(res.x, np.linalg.solve(A, b), rtol=1e-9, atol=1e-12)


@pytest.mark.mpi
@pytest.mark.parametrize("k", [2, 4, 8])
def test_with_a_changing_preconditioner_it_converges_where_pipelined_cg_does_not(k):
    """The flexible issue's done-when: M = a few CG steps on each rank's block (not linear,
    so it changes with its argument).  p-fcg reaches ||b - A x|| <= 1e-8 ||b||; p-CG, whose
    recurrences assume one fixed M, stagnates or breaks down in 10 x those iterations
    (PETSc's pipecg runs to its maxiter there: tests/test_petsc_ksp.py)."""
    A = pk.poisson2d(MPI.COMM_WORLD, 48)
    b = rhs(A) + 0.1 * np.sin(np.arange(A.partition.nlocal))
    M = f"bjacobi-cg({k})"
    res = pk.pipefcg(A, b, rtol=1e-8, M=M, maxiter=3000)
    assert res.info == 0, res.reason
    assert true_residual(A, res.x, b) <= 1e-8
    assert count(res, loop.ITERATION_LABEL) == res.iterations
    assert len(res.residual_norms) == res.iterations + 1     # new cycles and failed confirmations add none
    plain = pk.pipelined("cg")(A, b, rtol=1e-8, M=M, maxiter=10 * res.iterations)
    assert plain.info != 0
    assert true_residual(A, plain.x, b) > 1e-4


def test_block_cg_is_k_steps_of_jacobi_cg_on_the_block():
    """The preconditioner against CG written here with numpy on the rank's block, and its
    compiled apply (through a solve's operands) against its Python one."""
    A = pk.poisson2d(MPI.COMM_SELF, 10)
    B = A.local_block().toarray()
    dinv = 1.0 / np.diag(B)
    r = np.cos(np.arange(100.0)) + 1.0
    for k in (1, 2, 5):
        z, res = np.zeros(100), r.copy()
        h = dinv * res
        p, rho = h.copy(), res @ h
        for step in range(k):
            q = B @ p
            alpha = rho / (p @ q)
            z, res = z + alpha * p, res - alpha * q
            h = dinv * res
            rho, rho_old = res @ h, rho
            p = h + rho / rho_old * p
        M = BlockCG(A, k)
        assert M.name == f"bjacobi-cg({k})"
        assert np.allclose(M(r, np.empty(100)), z, rtol=1e-12, atol=1e-14)
    runs = [pk.pipefcg(A, rhs(A), rtol=1e-10, M="bjacobi-cg(3)", loop=way) for way in ("compiled", "python")]
    assert [r.loop for r in runs] == ["compiled", "python"]
    assert np.array_equal(runs[0].x, runs[1].x)


def test_block_cg_refuses_bad_input_on_every_rank():
    A = pk.poisson2d(MPI.COMM_SELF, 4)
    with pytest.raises(ValueError, match="positive integer"):
        BlockCG(A, 0)
    with pytest.raises(ValueError, match="bjacobi-cg"):
        pk.pipefcg(A, rhs(A), M="bjacobi-gc")
    D = pk.DistributedCSR.from_scipy(sp.diags(np.r_[1.0, -1.0, np.ones(14)]).tocsr(), MPI.COMM_SELF)
    with pytest.raises(PreconditionerFailure, match="nonpositive diagonal in row 1"):
        BlockCG(D, 2)


def test_compiled_and_interpreted_loops_agree_bit_for_bit():
    A = load("gr_30_30")
    b = A @ np.ones(A.shape[0])
    runs = [pk.pipefcg(A, b, rtol=1e-10, M="jacobi", comm=MPI.COMM_SELF, loop=way) for way in ("compiled", "python")]
    assert [r.loop for r in runs] == ["compiled", "python"]
    assert np.array_equal(runs[0].residual_norms, runs[1].residual_norms)
    assert np.array_equal(runs[0].x, runs[1].x)


def test_callback_every_iteration_and_the_monitor_every_norm():
    """A callback stops the loop after each update and a monitor at each test: the solve
    goes on where it stopped, with the numbers of a solve with neither."""
    A = pk.poisson2d(MPI.COMM_SELF, 30)
    b = rhs(A)
    seen, norms = [], []
    plain = pk.pipefcg(A, b, rtol=1e-8, M="bjacobi-cg(3)")
    res = pk.pipefcg(A, b, rtol=1e-8, M="bjacobi-cg(3)", callback=lambda xk: seen.append(xk.copy()),
                     monitor=lambda k, rnorm: norms.append(rnorm))
    assert res.iterations == plain.iterations == len(seen)
    assert np.array_equal(seen[-1], res.x) and np.array_equal(res.x, plain.x)
    assert np.array_equal(norms, plain.residual_norms)
    out = io.StringIO()
    pk.pipefcg(A, b, rtol=1e-8, M="jacobi", monitor=out)
    assert "KSP Residual norm" in out.getvalue()


def test_maxiter_small_buffers_and_a_solver_solved_twice(monkeypatch):
    import pipekrylov.solvers.solver as solver_module
    monkeypatch.setattr(solver_module, "BUFFERED", 8)
    A = pk.poisson2d(MPI.COMM_SELF, 20)
    b = rhs(A)
    res = pk.pipefcg(A, b, rtol=1e-14, maxiter=7, M="jacobi")
    assert res.info == 7 and res.reason == "diverged_its" and res.iterations == 7
    solver = pk.Solver(A, "p-fcg", M="bjacobi-cg(2)", mmax=5)
    first, second = (solver.solve(b, rtol=1e-8) for _ in range(2))
    assert first.info == second.info == 0 and first.iterations == second.iterations
    assert np.array_equal(first.residual_norms, second.residual_norms)
    assert first.mmax == 5 and first.truncation == "notay"


def test_breakdown_zero_rhs_and_a_converged_start():
    A = sp.diags(np.r_[np.ones(10), -np.ones(10)]).tocsr()
    b = np.ones(20)
    res = pk.pipefcg(A, b, comm=MPI.COMM_SELF)
    assert res.info < 0 and res.reason == "diverged_indefinite_mat"
    A = load("nos4")
    zero = pk.pipefcg(A, np.zeros(A.shape[0]), comm=MPI.COMM_SELF)
    assert zero.info == 0 and zero.iterations == 0 and not zero.x.any()
    x = np.linalg.solve(A.toarray(), np.ones(A.shape[0]))
    start = pk.pipefcg(A, np.ones(A.shape[0]), x0=x, rtol=1e-6, comm=MPI.COMM_SELF)
    assert start.info == 0 and start.iterations == 0


@pytest.mark.parametrize("options", [{"mmax": 0}, {"mmax": 2.5}, {"truncation": "full"}])
def test_bad_options_get_a_clear_error(options):
    A = pk.poisson2d(MPI.COMM_SELF, 4)
    with pytest.raises(ValueError, match="mmax|truncation"):
        pk.pipefcg(A, rhs(A), **options)


@pytest.mark.mpi
@pytest.mark.parametrize("pc", [None, "jacobi", "bjacobi"])
def test_pipegcr_solves_convection_diffusion_with_one_reduction_per_iteration(pc):
    """p-GCR (Notay's truncation, mmax 15) on a nonsymmetric generator at 1, 2 and 4
    ranks: ||b - A x|| <= 1e-8 ||b||, within 1.5 x GMRES(30)'s iterations (truncated GCR
    keeps the last directions across what GMRES's restart forgets: fewer, here), one
    reduction per iteration."""
    A = pk.convection_diffusion2d(MPI.COMM_WORLD, 40)
    b = rhs(A)
    base = pk.gmres(A, b, rtol=1e-8, M=pc, callback_type="x", maxiter=100)
    res = pk.pipegcr(A, b, rtol=1e-8, M=pc, maxiter=3000)
    assert res.info == 0, res.reason
    assert true_residual(A, res.x, b) <= 1e-8
    assert res.iterations <= 1.5 * base.iterations, (res.iterations, base.iterations)
    assert count(res, loop.ITERATION_LABEL) == res.iterations


@pytest.mark.parametrize("name", [m for m in NONSYMMETRIC if m != "west0479"])
def test_pipegcr_on_the_nonsymmetric_matrices_with_jacobi(name):
    """The shared nonsymmetric matrices (west0479: nothing converges): the true residual
    at rtol 1e-8, and GMRES's attainable accuracy within 10x at 1e-12."""
    A = load(name)
    b = A @ np.ones(A.shape[0])
    for rtol in (1e-8, 1e-12):
        res = pk.pipegcr(A, b, rtol=rtol, M="jacobi", maxiter=5000, comm=MPI.COMM_SELF)
        base = pk.gmres(A, b, rtol=rtol, M="jacobi", maxiter=500, callback_type="x", comm=MPI.COMM_SELF)
        if rtol == 1e-8:
            assert res.info == 0, res.reason
        if res.info == 0:
            assert np.linalg.norm(b - A @ res.x) <= max(rtol * np.linalg.norm(b),
                                                        10 * np.linalg.norm(b - A @ base.x))


@pytest.mark.mpi
def test_pipegcr_with_a_changing_preconditioner():
    """p-GCR under four inner CG steps per block: the true residual, in fewer iterations
    than p(1)-GMRES, whose basis assumes one M (measured: 171 against 600 serially)."""
    A = pk.convection_diffusion2d(MPI.COMM_WORLD, 48)
    b = rhs(A) + 0.1 * np.sin(np.arange(A.partition.nlocal))
    res = pk.pipegcr(A, b, rtol=1e-8, M="bjacobi-cg(4)", maxiter=3000)
    assert res.info == 0, res.reason
    assert true_residual(A, res.x, b) <= 1e-8
    plain = pk.Solver(A, "p(1)-gmres", M="bjacobi-cg(4)").solve(b, rtol=1e-8, maxiter=3000)
    assert res.iterations < plain.iterations


def test_pipegcr_solves_a_dense_nonsymmetric_system_and_refuses_a_singular_start():
    rng = np.random.default_rng(3)
    A = np.eye(60) * 4 + rng.standard_normal((60, 60)) * 0.3
    b = rng.standard_normal(60)
    res = pk.pipegcr(A, b, rtol=1e-12, comm=MPI.COMM_SELF)
    assert res.info == 0 and res.mmax == 15
    assert np.allclose(res.x, np.linalg.solve(A, b), rtol=1e-9, atol=1e-12)
    Z = sp.diags(np.r_[np.zeros(5), np.ones(5)]).tocsr()
    broke = pk.pipegcr(Z, np.r_[np.ones(5), np.zeros(5)], comm=MPI.COMM_SELF)
    assert broke.info < 0 and broke.reason == "diverged_breakdown"


@pytest.mark.mpi
@pytest.mark.parametrize("k", [2, 4])
def test_pipefgmres_with_a_changing_preconditioner_converges_where_plgmres_lags(k):
    """p-FGMRES under k inner CG steps per block: the true residual, one reduction per
    iteration, and under a third of the iterations of p(1)-GMRES, whose update assumes one
    M (measured serially at k = 2: 142 against 578)."""
    from pipekrylov.loops import pipefgmres as fgmres_loop
    A = pk.convection_diffusion2d(MPI.COMM_WORLD, 40)
    b = rhs(A)
    res = pk.pipefgmres(A, b, rtol=1e-8, M=f"bjacobi-cg({k})", maxiter=100)
    assert res.info == 0, res.reason
    assert true_residual(A, res.x, b) <= 1e-8
    assert count(res, 1) == res.iterations and res.shift > 0
    plain = pk.Solver(A, "p(1)-gmres", M=f"bjacobi-cg({k})").solve(b, rtol=1e-8, maxiter=3000)
    assert 3 * res.iterations < plain.iterations, (res.iterations, plain.iterations)
    assert fgmres_loop.PipeFGMRES().name == "p-fgmres"


@pytest.mark.mpi
@pytest.mark.parametrize("pc", [None, "jacobi", "bjacobi"])
def test_pipefgmres_with_a_fixed_preconditioner_takes_gmres_iterations(pc):
    """With a fixed M, p-FGMRES(30) spans GMRES(30)'s Krylov spaces: GMRES's iterations
    within 5% + 2 (the orthogonalization differs: rounding), on 1, 2 and 4 ranks."""
    A = pk.convection_diffusion2d(MPI.COMM_WORLD, 30)
    b = rhs(A)
    base = pk.gmres(A, b, rtol=1e-8, M=pc, callback_type="x", maxiter=100)
    for shift in ("auto", 1.0):
        res = pk.pipefgmres(A, b, rtol=1e-8, M=pc, shift=shift, callback_type="x", maxiter=100)
        assert res.info == 0 and true_residual(A, res.x, b) <= 1e-8
        assert abs(res.iterations - base.iterations) <= 0.05 * base.iterations + 2, (res.iterations, base.iterations)


def test_pipefgmres_shift_of_the_scale_of_a_m():
    """scipy's badly scaled M (1e-6 R R^T): with PETSc's shift, 1, z_j ~ -v_j and all cycles
    but a few end in a square-root breakdown (no convergence in 100 cycles); the default
    shift, each cycle's ||A M v_0||, converges to the dense solution, with at most a tenth
    of the breakdowns."""
    rng = np.random.default_rng(1234)
    A = rng.random((10, 10))
    A = A @ A.T + 10 * np.eye(10)
    b = 1e3 * rng.random(10)
    R = rng.standard_normal((10, 10))
    M = 1e-6 * (R @ R.T)
    fixed = pk.pipefgmres(A, b, rtol=1e-10, M=M, shift=1.0, maxiter=100, comm=MPI.COMM_SELF)
    assert fixed.info != 0 and fixed.restarts > 50
    res = pk.pipefgmres(A, b, rtol=1e-10, M=M, maxiter=100, comm=MPI.COMM_SELF)
    assert res.info == 0 and res.restarts <= 0.1 * fixed.restarts
    assert np.allclose(res.x, np.linalg.solve(A, b), rtol=1e-8)
    assert 1e-6 < res.shift < 1.0


def test_pipefgmres_compiled_and_interpreted_agree_bit_for_bit():
    A = load("orsirr_1")
    b = A @ np.ones(A.shape[0])
    runs = [pk.pipefgmres(A, b, rtol=1e-10, M="jacobi", comm=MPI.COMM_SELF, loop=way, maxiter=50)
            for way in ("compiled", "python")]
    assert [r.loop for r in runs] == ["compiled", "python"]
    assert np.array_equal(runs[0].residual_norms, runs[1].residual_norms)
    assert np.array_equal(runs[0].x, runs[1].x)


@pytest.mark.parametrize("name", [m for m in NONSYMMETRIC if m != "west0479"])
def test_pipefgmres_on_the_nonsymmetric_matrices_attains_gmres_accuracy(name):
    """The shared nonsymmetric matrices with Jacobi: the true residual at rtol 1e-8, and
    GMRES's attainable accuracy within 10x at 1e-12."""
    A = load(name)
    b = A @ np.ones(A.shape[0])
    for rtol in (1e-8, 1e-12):
        res = pk.pipefgmres(A, b, rtol=rtol, M="jacobi", maxiter=500, callback_type="x", comm=MPI.COMM_SELF)
        base = pk.gmres(A, b, rtol=rtol, M="jacobi", maxiter=500, callback_type="x", comm=MPI.COMM_SELF)
        if rtol == 1e-8:
            assert res.info == 0, res.reason
        if res.info == 0:
            assert np.linalg.norm(b - A @ res.x) <= max(rtol * np.linalg.norm(b),
                                                        10 * np.linalg.norm(b - A @ base.x))


@pytest.mark.parametrize("shift", ["auto", 1.0])
def test_pipefgmres_solves_a_multiple_of_the_identity_without_a_breakdown(shift):
    """A M v_0 parallel to v_0: ||z_0||^2 - (v_0, z_0)^2 is zero but for rounding, which
    may make it negative; that is a happy breakdown, not a square-root one.  (Where it
    comes out positive, h is that rounding's square root, ~1e-8 ||z_0||: then a second
    step.)"""
    rng = np.random.default_rng(5)
    A = sp.identity(400_000, format="csr") * 3.0
    b = rng.standard_normal(400_000)
    res = pk.pipefgmres(A, b, rtol=1e-10, shift=shift, comm=MPI.COMM_SELF)
    assert res.info == 0 and res.iterations <= 2 and res.restarts == 0
    assert np.allclose(res.x, b / 3.0, rtol=1e-9)


@pytest.mark.parametrize("options", [{"shift": "big"}, {"shift": np.inf}, {"restart": 0}])
def test_pipefgmres_bad_options_get_a_clear_error(options):
    A = pk.poisson2d(MPI.COMM_SELF, 4)
    with pytest.raises(ValueError, match="shift|restart"):
        pk.pipefgmres(A, rhs(A), **options)
