"""A reported convergence is a true one: no method, under its default arguments, returns
``info == 0`` while ``||b - A x||`` exceeds ``max(rtol ||b||, atol)``.

Every method the package ships, on the shared SuiteSparse matrices it applies to, with no
preconditioner and with Jacobi, at a moderate and a tight tolerance; the check is ours
(the true residual computed here, on the gathered x), not the solver's.  The
slack covers the summation order alone: the solver's b - A x and scipy's round
differently (1.0000-1.09x seen at rtol 1e-14 on 1138_bus; at the tolerances below, 1.0x)."""
import numpy as np
import pytest

import pipekrylov as pk
from helpers import NONSYMMETRIC, SPD, load

pytestmark = pytest.mark.mpi

SLACK = 1.1
SMALL_SPD = ["nos4", "gr_30_30"]   # GMRES on the large SPD ones: thousands of iterations, no news
METHODS = {   # name -> (solver, the matrices it applies to)
    "cg": (pk.cg, SPD),
    "cr": (pk.cr, SPD),
    "bicgstab": (pk.bicgstab, SPD + NONSYMMETRIC),
    "gmres": (pk.gmres, SMALL_SPD + NONSYMMETRIC),
    "p-cg": (pk.pipelined("cg"), SPD),
    "p-cr": (pk.pipelined("cr"), SPD),
    "p-bicgstab": (pk.pipelined("bicgstab"), SPD + NONSYMMETRIC),
    "p-cgs": (pk.pipelined("cgs"), SPD + NONSYMMETRIC),
    "p(2)-cg": (pk.pipelined("cg", 2), SPD),
    "p(3)-cg": (pk.pipelined("cg", 3), SPD),
    "p(1)-gmres": (pk.pipelined("gmres", 1), SMALL_SPD + NONSYMMETRIC),
    "p(2)-gmres": (pk.pipelined("gmres", 2), SMALL_SPD + NONSYMMETRIC),
    "s(4)-cg": (pk.sstep_cg, SPD),
    "p-cg2": (pk.pipecg2, SPD),
    "p-fcg": (pk.pipefcg, SPD),
    "p-gcr": (pk.pipegcr, SMALL_SPD + NONSYMMETRIC),
    "s(4)-gmres": (pk.sstep_gmres, SMALL_SPD + NONSYMMETRIC),
    "p-fgmres": (pk.pipefgmres, SMALL_SPD + NONSYMMETRIC),
}
CASES = [(name, matrix) for name, (_, matrices) in METHODS.items() for matrix in matrices]


@pytest.mark.parametrize("name,matrix", CASES)
def test_converged_means_the_true_residual_met_the_tolerance(name, matrix, comm):
    solve = METHODS[name][0]
    A = load(matrix)
    b = A @ np.ones(A.shape[0]) + 1e-3 * np.cos(np.arange(A.shape[0]))
    reported = 0
    for M in (None, "jacobi"):
        for rtol in (1e-8, 1e-12):
            res = solve(A, b, M=M, rtol=rtol, maxiter=50 if "gmres" in name else 1500, comm=comm)
            if res.info != 0:
                continue
            reported += 1
            true = np.linalg.norm(b - A @ res.x)
            assert true <= SLACK * rtol * np.linalg.norm(b), (M, rtol, res, true / (rtol * np.linalg.norm(b)))
    if matrix in ("gr_30_30", "nos4") and name in ("cg", "gmres", "s(4)-gmres"):
        assert reported == 4   # the check ran: these converge at every setting


@pytest.mark.parametrize("name", ["cg", "p-cg", "p(2)-cg", "p(3)-cg", "s(4)-cg", "p-cg2"])
def test_an_indefinite_preconditioner_is_reported_not_converged(name, comm):
    """hor_131's diagonal has entries of both signs, so Jacobi is indefinite and ``r^T M r``,
    the square of the norm a preconditioned CG tests, goes below 0.  Each CG ends with
    ``diverged_indefinite_pc`` within a few iterations.  (p(l)-CG took the square root of 0
    for a norm and reported a convergence at a true relative residual of 0.1; s-step CG
    passed the same 0 to its confirmation, missed, and started again from the same
    iteration forever, its history growing.)"""
    A = load("hor_131")
    b = A @ np.ones(A.shape[0])
    res = METHODS[name][0](A, b, M="jacobi", rtol=1e-8, maxiter=300, comm=comm)
    assert res.reason == "diverged_indefinite_pc", (res.reason, res.message)
    assert res.iterations <= 10 and len(res.residual_norms) <= 11


@pytest.mark.parametrize("name", ["cg", "p-cg", "p(2)-cg", "s(4)-cg"])
def test_a_non_finite_x0_is_named_not_taken_for_an_indefinite_preconditioner(name, comm):
    """A NaN in x0 makes every (r, M r) NaN: it is reported as x0's, on every rank (the
    checks of (r, M r) < 0 above must not take it for an indefinite M)."""
    A = load("nos4")
    x0 = np.zeros(A.shape[0])
    x0[3] = np.nan
    with pytest.raises(ValueError, match="x0 has non-finite entries"):
        METHODS[name][0](A, np.ones(A.shape[0]), x0=x0, M="jacobi", comm=comm)
