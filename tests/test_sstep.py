"""s-step CG against classic CG, a dense solve and its own contract: the true residual it
reports, one reduction per block in the trace, the Newton basis, the blocks that lose
rank, the callback, the monitor and bad input."""
import io

import numpy as np
import pytest
import scipy.sparse as sp
from mpi4py import MPI

import pipekrylov as pk
from pipekrylov.loops import sstep
from helpers import SPD, load, rhs, symmetric_generators as generators, true_residual

S_VALUES = [1, 2, 4, 7, 10]


def gram_reductions(result):
    return int(np.sum(result.reductions.rows[:, 5] == sstep.GRAM_LABEL))


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["poisson2d", "poisson3d", "anisotropic2d"])
@pytest.mark.parametrize("pc", [None, "jacobi"])
def test_sstep_cg_reaches_the_true_residual_in_cgs_iterations(name, pc):
    """Done-when of the s-step issue on the generators, at 1, 2 and 4 ranks: ||b - A x||
    at most 1e-8 ||b|| within 1.1 x CG's iterations + 2, for every s; one reduction of
    Gram matrices per block (the first s iterations are blocks of one)."""
    A = generators(MPI.COMM_WORLD)[name]
    b = rhs(A)
    base = pk.cg(A, b, rtol=1e-8, M=pc).iterations
    for s in S_VALUES:
        res = pk.sstep_cg(A, b, s=s, rtol=1e-8, M=pc)
        assert res.info == 0, (s, res.reason)
        assert true_residual(A, res.x, b) <= 1e-8
        assert res.iterations <= 1.1 * base + 2, (s, res.iterations, base)
        blocks = s + -(-(res.iterations - s) // s) + 1 + res.short_blocks
        assert gram_reductions(res) <= blocks, (s, gram_reductions(res), blocks)
        assert res.short_blocks == 0


@pytest.mark.parametrize("name", SPD)
def test_sstep_cg_on_the_spd_matrices_with_jacobi(name):
    """On every shared SPD matrix (condition numbers 2e2 to 7e9) with Jacobi, at s = 4 and
    10: the true residual 1e-8 where CG reaches it, within 1.1 x CG's iterations + 2."""
    A = load(name)
    b = A @ np.ones(A.shape[0])
    base = pk.cg(A, b, rtol=1e-8, M="jacobi", maxiter=20 * A.shape[0], comm=MPI.COMM_SELF)
    assert base.info == 0
    for s in (4, 10):
        res = pk.sstep_cg(A, b, s=s, rtol=1e-8, M="jacobi", maxiter=20 * A.shape[0], comm=MPI.COMM_SELF)
        assert res.info == 0, (s, res.reason)
        assert np.linalg.norm(b - A @ res.x) <= 1e-8 * np.linalg.norm(b)
        assert res.iterations <= 1.1 * base.iterations + 2, (s, res.iterations, base.iterations)


def test_sstep_cg_solution_matches_a_dense_solve():
    rng = np.random.default_rng(3)
    B = rng.standard_normal((60, 60))
    A = sp.csr_matrix(B @ B.T + 60 * np.eye(60))
    b = rng.standard_normal(60)
    res = pk.sstep_cg(A, b, s=5, rtol=1e-12, M="jacobi", comm=MPI.COMM_SELF)
    assert np.allclose(res.x, np.linalg.solve(A.toarray(), b), rtol=1e-9, atol=1e-11)


def test_s_one_is_cg_with_one_reduction_per_iteration():
    """s = 1: Chronopoulos & Gear's CG, CG's iterations and one reduction each."""
    A = load("nos4")
    b = A @ np.ones(A.shape[0])
    cg = pk.cg(A, b, rtol=1e-8, M="jacobi", comm=MPI.COMM_SELF)
    res = pk.sstep_cg(A, b, s=1, rtol=1e-8, M="jacobi", comm=MPI.COMM_SELF)
    assert abs(res.iterations - cg.iterations) <= 2
    assert gram_reductions(res) == res.iterations + 1


def test_lambda_max_estimate_covers_the_spectrum():
    """The shifts' interval comes from CG's own coefficients: its end, 1.1 x the largest
    Ritz value, covers the Jacobi-scaled spectrum of bcsstk15 (condition 7e9) within 10%
    (the largest Ritz value converges from below), and s = 10 converges on it."""
    A = load("bcsstk15")
    b = A @ np.ones(A.shape[0])
    res = pk.sstep_cg(A, b, s=10, rtol=1e-8, M="jacobi", comm=MPI.COMM_SELF)
    assert res.info == 0
    scale = sp.diags(1.0 / np.sqrt(A.diagonal()))
    top = sp.linalg.eigsh(scale @ A @ scale, 1, return_eigenvectors=False)[0]
    assert 0.9 * top <= res.lambda_max <= 1.1 * top * 1.001


def test_the_shifts_are_chebyshev_points_with_zero_first():
    theta, scale = np.zeros(6), np.zeros(6)
    sstep._shifts.py_func(theta, scale, 6, 8.0)
    assert theta[0] == 0.0 and scale[0] == 1.0 and np.all(scale[1:] == 2.0)
    t = np.polynomial.Chebyshev.basis(5)
    assert np.allclose(t((theta[1:] - 4.0) / 4.0), 0.0, atol=1e-12)
    assert len(set(theta[1:])) == 5


def test_largest_ritz_value_is_the_lanczos_matrix_eigenvalue():
    """From CG's coefficients on a diagonal matrix, the bisection finds the largest
    eigenvalue of the Lanczos tridiagonal matrix numpy finds, to 0.1% and not below."""
    d = np.linspace(1.0, 50.0, 200)
    A = sp.diags(d).tocsr()
    b = np.ones(200)
    alphas, betas, r, p, rr = [], [], b.copy(), b.copy(), b @ b
    for _ in range(12):
        q = A @ p
        alpha = rr / (p @ q)
        r = r - alpha * q
        beta = (r @ r) / rr
        alphas.append(alpha)
        betas.append(beta)
        p, rr = r + beta * p, r @ r
    a, bb = np.array(alphas), np.array(betas)
    T = np.diag(1 / a + np.r_[0, bb[:-1] / a[:-1]]) + np.diag(np.sqrt(bb[:-1]) / a[:-1], 1) + \
        np.diag(np.sqrt(bb[:-1]) / a[:-1], -1)
    top, found = np.linalg.eigvalsh(T)[-1], sstep._largest_ritz.py_func(a, bb, 12)
    assert top <= found <= top * (1 + 1e-3)     # bisected to 0.1%, from above


def test_compiled_and_interpreted_loops_agree_bit_for_bit():
    A = load("494_bus")
    b = A @ np.ones(A.shape[0])
    runs = [pk.sstep_cg(A, b, s=4, rtol=1e-8, M="jacobi", comm=MPI.COMM_SELF, loop=loop) for loop in
            ("compiled", "python")]
    assert [r.loop for r in runs] == ["compiled", "python"]
    assert np.array_equal(runs[0].residual_norms, runs[1].residual_norms)
    assert np.array_equal(runs[0].x, runs[1].x)


def test_a_solver_keeps_its_estimate_for_the_next_solve():
    """The second solve with the same Solver starts with whole blocks on the first solve's
    estimate, which it never lowers: fewer reductions, the same iterations within
    rounding."""
    A = pk.poisson2d(MPI.COMM_SELF, 40)
    b = rhs(A)
    solver = pk.Solver(A, "s-cg", M="jacobi", s=5)
    first, second = (solver.solve(b, rtol=1e-8) for _ in range(2))
    assert second.info == 0 and abs(second.iterations - first.iterations) <= 2
    assert gram_reductions(second) < gram_reductions(first)
    assert second.lambda_max >= first.lambda_max
    assert pk.Solver(A, "s(5)-cg", M="jacobi").solve(b, rtol=1e-8).s == 5


def test_callback_sees_every_iterate_and_the_monitor_every_norm():
    A = pk.poisson2d(MPI.COMM_SELF, 30)
    b = rhs(A)
    seen, norms = [], []
    res = pk.sstep_cg(A, b, s=4, rtol=1e-8, M="jacobi", callback=lambda xk: seen.append(xk.copy()),
                      monitor=lambda k, rnorm: norms.append(rnorm))
    plain = pk.sstep_cg(A, b, s=4, rtol=1e-8, M="jacobi")
    assert len(seen) == res.iterations and np.allclose(seen[-1], res.x)
    # the iterates inside a block are CG's (its first ten: before rounding tells them apart)
    cg_seen = []
    pk.cg(A, b, rtol=1e-8, M="jacobi", callback=lambda xk: cg_seen.append(xk.copy()))
    for k in range(10):
        assert np.allclose(seen[k], cg_seen[k], rtol=1e-8, atol=0), k
    assert res.iterations == plain.iterations
    assert np.allclose(norms, plain.residual_norms, rtol=1e-10)
    out = io.StringIO()
    pk.sstep_cg(A, b, s=4, rtol=1e-8, M="jacobi", monitor=out)
    assert "KSP Residual norm" in out.getvalue()


def test_maxiter_returns_the_iterate_of_that_iteration():
    """Stopping inside a block gives that iteration's x (its coordinates recovered): CG's
    iterate of the same iteration."""
    A = pk.poisson2d(MPI.COMM_SELF, 30)
    b = rhs(A)
    cg_seen = []
    pk.cg(A, b, rtol=1e-14, M="jacobi", maxiter=12, callback=lambda xk: cg_seen.append(xk.copy()))
    for k in (9, 10, 11):
        res = pk.sstep_cg(A, b, s=4, rtol=1e-14, M="jacobi", maxiter=k)
        assert res.info == k
        assert np.allclose(res.x, cg_seen[k - 1], rtol=1e-8, atol=0), k


@pytest.mark.parametrize("buffered", [2, 3, 5])
def test_small_buffers_flush_inside_blocks(buffered, monkeypatch):
    """Buffers of a few iterations: the loop returns to its driver (FLUSH) in the middle
    of its blocks and goes on, with the same residual norms, bit for bit, and the same
    reductions as with room to spare."""
    A = load("494_bus")
    b = A @ np.ones(A.shape[0])
    plain = pk.Solver(A, "s-cg", M="jacobi", s=4, comm=MPI.COMM_SELF).solve(b, rtol=1e-8)
    monkeypatch.setattr("pipekrylov.solvers.solver.BUFFERED", buffered)
    small = pk.Solver(A, "s-cg", M="jacobi", s=4, comm=MPI.COMM_SELF).solve(b, rtol=1e-8)
    assert small.iterations == plain.iterations
    assert np.array_equal(small.residual_norms, plain.residual_norms)
    assert small.reductions.count == plain.reductions.count


def test_indefinite_matrix_is_a_breakdown():
    A = sp.diags(np.r_[np.linspace(1, 2, 30), -np.linspace(1, 2, 30)]).tocsr()
    res = pk.sstep_cg(A, np.ones(60), s=4, rtol=1e-8, comm=MPI.COMM_SELF)
    assert res.info < 0 and res.reason == "diverged_indefinite_mat"


def test_zero_right_hand_side_and_a_converged_start():
    A = pk.poisson2d(MPI.COMM_SELF, 20)
    zero = pk.sstep_cg(A, np.zeros(400), s=4)
    assert zero.info == 0 and not zero.x.any()
    x = pk.cg(A, rhs(A), rtol=1e-12).x
    again = pk.sstep_cg(A, rhs(A), x0=x, s=4, rtol=1e-8)
    assert again.info == 0 and again.iterations == 0


@pytest.mark.parametrize("s", [0, 11, 2.5, True, "4"])
def test_bad_s_gets_a_clear_error(s):
    A = pk.poisson2d(MPI.COMM_SELF, 10)
    with pytest.raises(ValueError, match="s must be an integer from 1 to 10"):
        pk.sstep_cg(A, np.ones(100), s=s)


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_blocks_fitted_to_a_small_system(n):
    """At most (n - 1) / 2 iterations a block (its 2s + 1 basis vectors in n dimensions),
    as GMRES's restart is at most n: a small system is solved with the default s (it was
    refused), to a dense solve's answer."""
    A = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n)).tocsr()
    b = np.arange(1.0, n + 1)
    res = pk.sstep_cg(A, b, rtol=1e-10, comm=MPI.COMM_SELF)
    assert res.info == 0 and res.s == max(1, min(4, (n - 1) // 2))
    exact = np.linalg.solve(A.toarray(), b)
    assert np.linalg.norm(res.x - exact) <= 1e-9 * np.linalg.norm(exact)


def test_an_exhausted_krylov_space_ends_its_block():
    """A = 2 I: the first iteration solves exactly, (r, z) in coordinates is 0, the block
    ends there (a short block) and the next block's exact dots find r = 0.  With two or
    five distinct eigenvalues (rounding decides where the coordinates give out) the true
    residual reaches rounding in about as many iterations."""
    A = (2.0 * sp.eye(20)).tocsr()
    res = pk.sstep_cg(A, np.ones(20), s=4, rtol=1e-14, comm=MPI.COMM_SELF)
    assert res.info == 0 and res.iterations == 1 and res.short_blocks == 1
    assert np.array_equal(res.x, np.full(20, 0.5))
    for k in (2, 5):
        A = sp.diags(np.repeat(np.linspace(1.0, 10.0, k), 12)).tocsr()
        b = np.ones(A.shape[0])
        res = pk.sstep_cg(A, b, s=8, rtol=1e-13, comm=MPI.COMM_SELF)
        assert res.info == 0 and res.iterations <= k + 2
        assert np.linalg.norm(b - A @ res.x) <= 1e-13 * np.linalg.norm(b)


def test_the_block_kernels_against_numpy():
    """gram (the upper triangle of Y^T T, in chunks) and recover_block on lengths that
    are not multiples of 8 nor of the chunk, and an odd and an even number of rows."""
    from pipekrylov.kernels.basis import GRAM_CHUNK, gram, recover_block
    rng = np.random.default_rng(5)
    for n in (5, 8, GRAM_CHUNK + 3, 3 * GRAM_CHUNK + 11):
        for used in (1, 6, 9):
            Y, T = rng.standard_normal((used, n)), rng.standard_normal((used, n))
            out, lanes = np.zeros(used * (used + 1) // 2), np.zeros((used * (used + 1) // 2, 8))
            full = Y @ T.T
            for first in sorted({0, used // 2, used - 1}):   # the columns from first (s-step GMRES's new ones)
                gram(Y, T, used, lanes, out, first)
                expected = [full[a, b] for b in range(first, used) for a in range(b + 1)]
                assert np.allclose(out[:len(expected)], expected, rtol=1e-12, atol=1e-12)
            a, c, d = (rng.standard_normal(used) for _ in range(3))
            x0 = rng.standard_normal(n)
            x, p, r = x0.copy(), np.empty(n), np.empty(n)
            recover_block(Y, T, used, a, c, d, x, p, r)
            assert np.allclose(x, x0 + a @ Y) and np.allclose(p, c @ Y) and np.allclose(r, d @ T)
