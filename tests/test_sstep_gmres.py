"""s-step GMRES against classic GMRES, a dense solve and its own contract: the true residual
it reports, one reduction per block in the trace, the Arnoldi relation of its basis, the
shifts, the blocks that lose rank, the callback, the monitor and bad input."""
import io

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import pipekrylov as pk
from pipekrylov.loops import sstep_gmres as loop
from helpers import load, rhs, true_residual

S_VALUES = [1, 2, 4, 7, 10]


def count(result, label):
    return int(np.sum(result.reductions.rows[:, 5] == label))


def generators(comm):
    return {"convection-diffusion": pk.convection_diffusion2d(comm, 40),
            "strong wind": pk.convection_diffusion2d(comm, 40, wind=(200.0, 100.0)),
            "poisson2d": pk.poisson2d(comm, 40)}


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["convection-diffusion", "strong wind", "poisson2d"])
@pytest.mark.parametrize("pc", [None, "jacobi"])
def test_sstep_gmres_reaches_the_true_residual_in_gmres_iterations(name, pc):
    """Done-when of the s-step issue on the generators, at 1, 2 and 4 ranks: ||b - A x||
    at most 1e-8 ||b|| within 1.1 x GMRES's iterations + 2, for every s, and no column
    lost."""
    A = generators(MPI.COMM_WORLD)[name]
    b = rhs(A)
    base = pk.gmres(A, b, rtol=1e-8, M=pc, callback_type="x", maxiter=200).iterations
    for s in S_VALUES:
        res = pk.sstep_gmres(A, b, s=s, rtol=1e-8, M=pc, callback_type="x", maxiter=200)
        assert res.info == 0, (s, res.reason)
        assert true_residual(A, res.x, b) <= 1e-8
        assert res.iterations <= 1.1 * base + 2, (s, res.iterations, base)
        assert res.short_blocks == 0
        assert count(res, loop.AGAIN_LABEL) == res.second_passes


@pytest.mark.parametrize("name,slack", [("orsirr_1", 1.1), ("cage9", 1.1), ("hor_131", 1.25)])
def test_sstep_gmres_on_the_nonsymmetric_matrices_with_jacobi(name, slack):
    """On the shared nonsymmetric matrices (west0479 has zeros on its diagonal: no Jacobi)
    at s = 4 and 10: the true residual 1e-8 within 1.1 x GMRES(30)'s iterations + 2
    (hor_131, condition 4e4, where GMRES's own count moves by 10% with rounding: 1.25 x)."""
    A = load(name)
    b = A @ np.ones(A.shape[0])
    kw = dict(rtol=1e-8, M="jacobi", callback_type="x", maxiter=200, comm=MPI.COMM_SELF)
    base = pk.gmres(A, b, **kw)
    assert base.info == 0
    for s in (4, 10):
        res = pk.sstep_gmres(A, b, s=s, **kw)
        assert res.info == 0, (s, res.reason)
        assert np.linalg.norm(b - A @ res.x) <= 1e-8 * np.linalg.norm(b)
        assert res.iterations <= slack * base.iterations + 2, (s, res.iterations, base.iterations)


def test_sstep_gmres_solution_matches_a_dense_solve():
    rng = np.random.default_rng(3)
    A = sp.csr_matrix(rng.standard_normal((60, 60)) + 12 * np.eye(60))
    b = rng.standard_normal(60)
    res = pk.sstep_gmres(A, b, s=5, restart=20, rtol=1e-12, M="jacobi", comm=MPI.COMM_SELF, callback_type="x")
    assert res.info == 0
    assert np.allclose(res.x, np.linalg.solve(A.toarray(), b), rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("s,matrix", [(4, "convection-diffusion"), (6, "strong wind"), (1, "hor_131"),
                                      (2, "hor_131"), (4, "orsirr_1")])
def test_the_basis_is_orthonormal_and_keeps_arnoldis_relation(s, matrix):
    """After a cycle of blocks: Q orthonormal and A M Q_k = Q_(k+1) H (H unrotated), the
    Hessenberg matrix made from the Cholesky factors and the shifts' change of basis, not
    by Arnoldi; on the ill-conditioned hor_131 and orsirr_1 too, where one pass of block
    Gram-Schmidt would let the loss of orthogonality grow to 1e-3 and beyond."""
    A = load(matrix) if matrix in ("hor_131", "orsirr_1") else generators(MPI.COMM_SELF)[matrix].to_scipy()
    b = A @ np.ones(A.shape[0])
    solver = pk.Solver(A, "s-gmres", M="jacobi", s=s, comm=MPI.COMM_SELF)
    solver.solve(b, rtol=1e-8)      # its shifts
    for its in (30, 60, 90):        # a first cycle, and cycles later on, where GMRES converges slowly
        solver.solve(b, rtol=0.0, maxiter=its)
        W = dict(zip(loop.W_NAMES, solver.W))
        Q, H = W["Q"], W["Hu"]
        assert int(W["J"][loop.COLUMN]) == 30
        assert np.abs(Q @ Q.T - np.eye(31)).max() < 1e-8, its
        AMQ = A @ (Q[:30].T / A.diagonal()[:, None])
        assert np.abs(AMQ - Q.T @ H[:, :30]).max() < 1e-8 * np.abs(AMQ).max(), its
        assert np.allclose(np.tril(H, -2), 0.0)


def test_the_shifts_are_ritz_values_in_leja_order_with_conjugates_together():
    """From a Hessenberg matrix with known eigenvalues (two complex pairs, three reals):
    the first shift the largest in modulus, each next the farthest by product of distances,
    a complex one's conjugate right after it (as curv = Im^2 on the second step), and the
    scale a quarter of their spread."""
    values = [3.0, 1.0 + 2.0j, 1.0 - 2.0j, 0.5, 2.0 + 0.5j, 2.0 - 0.5j, -1.0]
    blocks = [np.array([[v.real, v.imag], [-v.imag, v.real]]) for v in values if isinstance(v, complex) and v.imag > 0]
    D = sp.block_diag(blocks + [np.array([[v]]) for v in values if not isinstance(v, complex)]).toarray()
    rng = np.random.default_rng(1)
    X = rng.standard_normal((7, 7))
    H = np.linalg.solve(X, D @ X)
    theta, curv, scale = np.zeros(7), np.zeros(7), np.zeros(7)
    Hu = np.zeros((8, 7))
    Hu[:7, :7] = H
    assert loop.estimate_shifts(Hu, 7, theta, curv, scale)
    steps = []
    for i in range(7):
        if curv[i]:
            assert theta[i] == theta[i - 1] and curv[i - 1] == 0.0
            steps[-1] = complex(theta[i], np.sqrt(curv[i]))
            steps.append(complex(theta[i], -np.sqrt(curv[i])))
        else:
            steps.append(complex(theta[i], 0.0))
    assert np.allclose(sorted(steps, key=lambda z: (z.real, z.imag)),
                       sorted(np.array(values, complex), key=lambda z: (z.real, z.imag)), atol=1e-10)
    assert abs(steps[0]) == pytest.approx(3.0)
    # Leja: each first step (a real, or a pair's first) the farthest of those left
    firsts = [i for i in range(7) if curv[i] == 0.0]
    for n, i in enumerate(firsts[1:], 1):
        left = [steps[q] if q + 1 >= 7 or curv[q + 1] == 0.0 else complex(steps[q].real, abs(steps[q].imag))
                for q in firsts[n:]]
        products = [np.prod([abs(z - c) for c in steps[:i]]) for z in left]
        assert products[0] >= max(products) * (1 - 1e-9), (i, products)
    spread = max(abs(a - b) for a in values for b in values)
    assert np.allclose(scale, spread / 4)


def test_s_one_takes_gmres_iterations_with_one_reduction_each():
    """s = 1: GMRES by classical Gram-Schmidt, a second pass where the basis would lose
    orthogonality: GMRES's residual norms, one reduction per iteration and per second
    pass."""
    A = pk.convection_diffusion2d(MPI.COMM_SELF, 30)
    b = rhs(A)
    gm = pk.gmres(A, b, rtol=1e-8, M="jacobi", callback_type="x")
    res = pk.sstep_gmres(A, b, s=1, rtol=1e-8, M="jacobi", callback_type="x")
    assert res.iterations == gm.iterations
    assert np.allclose(res.residual_norms, gm.residual_norms, rtol=1e-6)
    assert count(res, loop.GRAM_LABEL) == res.iterations
    assert count(res, loop.AGAIN_LABEL) == res.second_passes


def test_compiled_and_interpreted_loops_agree_bit_for_bit():
    A = load("orsirr_1")
    b = A @ np.ones(A.shape[0])
    runs = [pk.sstep_gmres(A, b, s=4, rtol=1e-8, M="jacobi", comm=MPI.COMM_SELF, loop=way, callback_type="x")
            for way in ("compiled", "python")]
    assert [r.loop for r in runs] == ["compiled", "python"]
    assert np.array_equal(runs[0].residual_norms, runs[1].residual_norms)
    assert np.array_equal(runs[0].x, runs[1].x)


def test_a_linear_operator_runs_the_same_loop_interpreted():
    A = pk.convection_diffusion2d(MPI.COMM_SELF, 20).to_scipy()
    b = A @ np.ones(400)
    op = sp.linalg.aslinearoperator(A)
    res = pk.sstep_gmres(op, b, s=4, rtol=1e-8, callback_type="x", comm=MPI.COMM_SELF)
    assert res.info == 0 and res.loop == "python"
    assert np.linalg.norm(b - A @ res.x) <= 1e-8 * np.linalg.norm(b)


def test_a_solver_keeps_its_shifts_for_the_next_solve():
    """The second solve with the same Solver starts with whole blocks on the first solve's
    shifts: one Gram reduction per block of s columns (per cycle: ceil(30 / s)), the same
    iterations."""
    A = pk.convection_diffusion2d(MPI.COMM_SELF, 40)
    b = rhs(A)
    solver = pk.Solver(A, "s-gmres", M="jacobi", s=5)
    first, second = (solver.solve(b, rtol=1e-8) for _ in range(2))
    assert second.info == 0 and second.iterations == first.iterations
    assert second.shifts == first.shifts and len(second.shifts) == 5
    cycles = -(-second.iterations // 30)
    assert count(second, loop.GRAM_LABEL) + count(second, loop.AGAIN_LABEL) < count(first, loop.GRAM_LABEL)
    assert count(second, loop.GRAM_LABEL) <= cycles * 6
    assert pk.Solver(A, "s(5)-gmres", M="jacobi").solve(b, rtol=1e-8).s == 5


def test_callback_after_each_cycle_and_the_monitor_every_norm():
    A = pk.convection_diffusion2d(MPI.COMM_SELF, 30)
    b = rhs(A)
    seen, norms, pr = [], [], []
    res = pk.sstep_gmres(A, b, s=4, rtol=1e-8, M="jacobi", callback=lambda xk: seen.append(xk.copy()),
                         callback_type="x", monitor=lambda k, rnorm: norms.append(rnorm))
    plain = pk.sstep_gmres(A, b, s=4, rtol=1e-8, M="jacobi", callback_type="x")
    assert len(seen) == -(-res.iterations // 30) and np.array_equal(seen[-1], res.x)
    assert np.allclose(norms, plain.residual_norms, rtol=1e-10)
    pk.sstep_gmres(A, b, s=4, rtol=1e-8, M="jacobi", callback=pr.append, callback_type="pr_norm")
    assert len(pr) == res.iterations
    out = io.StringIO()
    pk.sstep_gmres(A, b, s=4, rtol=1e-8, M="jacobi", monitor=out, callback_type="x")
    assert "KSP Residual norm" in out.getvalue()


def test_maxiter_inside_a_block_is_gmres_iterate_of_that_iteration():
    """Iterations counted (scipy's legacy maxiter) stop inside a block: x is the
    least-squares iterate of that many columns, GMRES's to rounding."""
    A = pk.convection_diffusion2d(MPI.COMM_SELF, 30)
    b = rhs(A)
    for k in (9, 10, 11):
        kw = dict(rtol=1e-14, M="jacobi", maxiter=k, callback=lambda r: None, callback_type="legacy")
        res, gm = pk.sstep_gmres(A, b, s=4, **kw), pk.gmres(A, b, **kw)
        assert res.iterations == k and res.info > 0
        assert np.allclose(res.x, gm.x, rtol=1e-8, atol=0), k


@pytest.mark.parametrize("buffered", [2, 3, 5])
def test_small_buffers_flush_between_cycles(buffered, monkeypatch):
    A = load("orsirr_1")
    b = A @ np.ones(A.shape[0])
    plain = pk.Solver(A, "s-gmres", M="jacobi", s=4, comm=MPI.COMM_SELF).solve(b, rtol=1e-8)
    monkeypatch.setattr("pipekrylov.solvers.solver.BUFFERED", buffered)
    small = pk.Solver(A, "s-gmres", M="jacobi", s=4, comm=MPI.COMM_SELF).solve(b, rtol=1e-8)
    assert small.iterations == plain.iterations
    assert np.array_equal(small.residual_norms, plain.residual_norms)
    assert small.reductions.count == plain.reductions.count


def test_an_invariant_subspace_ends_the_cycle_happily():
    """A with three distinct eigenvalues: the block's fourth column is lost (its image lies
    in the basis), the cycle ends with the exact solution in three iterations."""
    A = (2.0 * sp.eye(20)).tocsr()
    res = pk.sstep_gmres(A, np.ones(20), s=4, rtol=1e-14, comm=MPI.COMM_SELF, callback_type="x")
    assert res.info == 0 and res.iterations == 1
    assert np.allclose(res.x, 0.5, rtol=1e-15)
    A = sp.diags(np.repeat([1.0, 4.0, 9.0], 8)).tocsr()
    b = np.arange(1.0, 25.0)
    solver = pk.Solver(A, "s-gmres", s=4, comm=MPI.COMM_SELF)
    solver.solve(b, rtol=1e-14)
    res = solver.solve(b, rtol=1e-14)     # with shifts: blocks of four from the start
    assert res.info == 0 and res.iterations <= 4
    assert np.linalg.norm(b - A @ res.x) <= 1e-13 * np.linalg.norm(b)


def test_zero_right_hand_side_and_a_converged_start():
    A = pk.convection_diffusion2d(MPI.COMM_SELF, 20)
    zero = pk.sstep_gmres(A, np.zeros(400), s=4, callback_type="x")
    assert zero.info == 0 and not zero.x.any()
    x = pk.gmres(A, rhs(A), rtol=1e-12, callback_type="x").x
    again = pk.sstep_gmres(A, rhs(A), x0=x, s=4, rtol=1e-8, callback_type="x")
    assert again.info == 0 and again.iterations == 0


@pytest.mark.parametrize("s", [0, 11, 2.5, True, "4"])
def test_bad_s_gets_a_clear_error(s):
    A = pk.convection_diffusion2d(MPI.COMM_SELF, 10)
    with pytest.raises(ValueError, match="s must be an integer from 1 to 10"):
        pk.sstep_gmres(A, np.ones(100), s=s)


def test_shifts_from_a_short_first_solve_are_estimated_again():
    """A first solve of one iteration leaves shifts from one Ritz value; the next solve
    estimates them again from 2 s columns (distinct shifts) and converges as GMRES."""
    A = pk.convection_diffusion2d(MPI.COMM_SELF, 30)
    b = rhs(A)
    solver = pk.Solver(A, "s-gmres", M="jacobi", s=4)
    assert len(set(solver.solve(b, rtol=1e-8, maxiter=1).shifts)) == 1
    res = solver.solve(b, rtol=1e-8)
    assert res.info == 0 and len(set(res.shifts)) == 4
    assert res.iterations == pk.gmres(A, b, rtol=1e-8, M="jacobi", callback_type="x").iterations


def test_complex_shifts_are_reported_as_conjugate_pairs():
    """A rotation-dominated matrix (eigenvalues 2 +- i and 3 +- 2i, each many times): its
    Ritz values are complex, the shifts come in conjugate pairs, and it converges."""
    blocks = [np.array([[a, c], [-c, a]]) for a, c in ((2.0, 1.0), (3.0, 2.0)) for _ in range(20)]
    A = sp.block_diag(blocks).tocsr() + sp.diags(np.linspace(0.0, 0.1, 80)).tocsr()
    b = np.ones(80)
    solver = pk.Solver(A, "s-gmres", s=6, comm=MPI.COMM_SELF)
    solver.solve(b, rtol=1e-10)
    res = solver.solve(b, rtol=1e-10)
    assert res.info == 0 and np.linalg.norm(b - A @ res.x) <= 1e-10 * np.linalg.norm(b)
    shifts = res.shifts
    assert any(isinstance(z, complex) and z.imag != 0 for z in shifts)
    for i, z in enumerate(shifts):
        if isinstance(z, complex) and z.imag > 0 and i + 1 < len(shifts):
            assert shifts[i + 1] == z.conjugate(), shifts


@pytest.mark.mpi
def test_every_rank_takes_rank_zeros_shifts(monkeypatch):
    """Where LAPACK rounds differently on another rank's CPU (here: eigenvalues perturbed
    by 1e-13 on ranks other than 0), every rank still takes rank 0's shifts, bit for bit,
    and the same iterations (their branches depend on the shifts)."""
    comm = MPI.COMM_WORLD
    if comm.rank > 0:
        eigvals = np.linalg.eigvals
        monkeypatch.setattr(np.linalg, "eigvals", lambda H: eigvals(H) * (1 + 1e-13 * comm.rank))
    A = pk.convection_diffusion2d(comm, 40)
    b = rhs(A)
    res = pk.sstep_gmres(A, b, s=4, rtol=1e-8, M="jacobi", callback_type="x")
    assert res.info == 0
    assert len(set(map(str, comm.allgather(res.shifts)))) == 1
    assert len(set(comm.allgather(res.iterations))) == 1
