"""The derivation framework: passes, generated solvers against their base methods,
the published p-CG, PETSc's pipelined KSPs, the schedule in the trace, residual replacement."""
import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from mpi4py import MPI

import pipekrylov as pk
from pipekrylov import derive as dv
from pipekrylov.derive.interpret import run_base
from helpers import load, problem, reference_stencil, rel, textbook_pcg

BASES = ["cg", "cg-hs", "cg-gropp", "cg-pr", "cr", "bicgstab", "cgs"]


# ---------------------------------------------------------------- the passes
@pytest.mark.parametrize("name", BASES)
def test_every_form_prints_and_the_budget_is_kept(name):
    sched = dv.derive(name)
    aux = sched.reductions.auxiliaries
    for form in (aux.symbolic, aux, sched.reductions, sched):
        assert str(form)
    # per segment, the overlapped applications are exactly the base method's
    for k, phase in enumerate(sched.phases):
        used = sorted(img.word[0] for img in phase.overlap)
        assert used == sorted(op for op, n in aux.symbolic.budget[k].items() for _ in range(n))
    text = str(sched)
    assert "# from:" in text and "start reduction 0" in text


def test_cg_derivation_is_ghysels_vanroose():
    """p-CG: one reduction of (r,r), (r,u), (w,u); m = M w and n = A m overlap it; the
    update is GV's z = n + beta z, q = m + beta q, s = w + beta s, p = u + beta p,
    x += alpha p, r -= alpha s, u -= alpha q, w -= alpha z."""
    sched = dv.derive("cg")
    assert len(sched.phases) == 1
    pairs = {(a.name, b.name) for a, b in sched.phases[0].pairs}
    assert pairs == {("r", "r"), ("r", "Mr"), ("AMr", "Mr")}
    assert [img.name for img in sched.phases[0].overlap] == ["MAMr", "AMAMr"]
    updates = {img.name: {i.name for i in value} for img, value, _, _ in sched.phases[0].updates}
    assert updates == {"p": {"Mr", "p"}, "s": {"AMr", "s"}, "Ms": {"MAMr", "Ms"}, "AMs": {"AMAMr", "AMs"},
                       "x": {"x", "p"}, "r": {"r", "s"}, "Mr": {"Mr", "Ms"}, "AMr": {"AMr", "AMs"}}


def test_natural_norm_needs_no_extra_dot_and_reproduces_cg():
    """CG testing sqrt((r, M r)) (what p(l)-CG hands over to): the norm is the reduction's
    (r, Mr), so (r, r) leaves it; its residual history is preconditioned CG's natural
    norm, computed independently here."""
    natural = dataclasses.replace(dv.BASE_METHODS["cg"], norm="natural")
    sched = dv.derive(natural)
    pairs = {(a.name, b.name) for a, b in sched.phases[0].pairs}
    assert pairs == {("r", "Mr"), ("AMr", "Mr")} and "||r||_M = sqrt(d[0])" in str(sched)
    assert dv.verify(natural) < 1e-8
    A = load("nos4")
    b = A @ np.ones(A.shape[0])
    dinv = 1.0 / A.diagonal()
    res = dv.pipelined(natural)(A, b, rtol=1e-8, M="jacobi", comm=MPI.COMM_SELF)
    norms = textbook_pcg(A, b, 20, dinv)[2]
    assert np.allclose(res.residual_norms[:21], norms, rtol=1e-6)
    assert res.info == 0 and np.sqrt((b - A @ res.x) @ (dinv * (b - A @ res.x))) < 1e-8 * norms[0]
    with pytest.raises(ValueError, match="norm"):
        dataclasses.replace(dv.BASE_METHODS["cg"], norm="energy")


def test_bicgstab_needs_two_reductions_cg_one():
    assert len(dv.derive("bicgstab").phases) == 2
    assert len(dv.derive("cgs").phases) == 2
    assert len(dv.derive("cr").phases) == 1


def test_cli_prints_the_derived_algorithm():
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "derive", "cg", "--depth", "1", "--passes"],
                         capture_output=True, text=True, check=True).stdout
    assert "AMAMr = A MAMr   # overlaps reduction 0" in out
    assert "p = Mr + beta*p   # from: p = u + beta*p" in out
    assert "== auxiliary vectors" in out


def test_a_method_written_by_a_user():
    """A method the library does not ship: the minimal residual iteration."""
    mr = dv.Method(name="mr", title="Minimal residual iteration", state=("x", "r"),
                   startup=("Ax = A x", "r = b - Ax"),
                   iteration=("w = A r", "rw = (r, w)", "ww = (w, w)", "alpha = rw / ww",
                              "x = x + alpha*r", "r = r - alpha*w"),
                   checks=(("ww > 0", "diverged_breakdown"),))
    solver = pk.pipelined(mr)           # verified on acceptance
    A = reference_stencil("convection_diffusion2d", 12)
    b = A @ np.ones(A.shape[0])
    res = solver(A, b, rtol=1e-6, maxiter=2000)
    base = run_base(mr, A, b, iterations=20)
    assert res.info == 0 and rel(A @ res.x, b) < 1e-5
    assert np.allclose(res.residual_norms[:20], base[:20], rtol=1e-8)


def test_a_wrong_derivation_is_rejected(monkeypatch):
    sched = dv.derive("cg")
    phase = sched.phases[0]
    broken = [dataclasses.replace(s, expression=s.expression.replace("beta * gamma", "2 * beta * gamma"))
              for s in phase.scalars]
    bad = dataclasses.replace(sched, phases=[dataclasses.replace(phase, scalars=broken)])
    monkeypatch.setattr(dv, "derive", lambda *a, **k: bad)
    dv.verify.cache_clear()
    try:
        with pytest.raises(dv.DerivationError):
            dv.verify("cg")
    finally:
        dv.verify.cache_clear()


@pytest.mark.parametrize("line,message", [
    ("p = u * r", "product of two vectors"),
    ("p = u + (gamma / 2)*r", "products of scalars"),
    ("p = ", "cannot parse"),
    ("v = A q", "not a vector"),
    ("p = u + zeta*r", "'p = u \\+ zeta\\*r' \\(iteration\\) reads 'zeta', which no statement defines"),
    ("p = u + delta*r", "reads 'delta', which is set only later: give it a start-up value"),
])
def test_bad_descriptions_are_clear_errors(line, message):
    with pytest.raises(ValueError, match=message):
        dv.Method(name="bad", title="bad", state=("x", "r"), startup=("Ax = A x", "r = b - Ax"),
                  iteration=("u = M r", "gamma = (r, u)", line, "x = x + r", "delta = (u, u)"))


def test_given_reduction_points_give_gropps_cg():
    """Gropp's CG: two reductions, (r, u) hidden behind A u and (p, s) behind M s, and
    no vector kept beyond the base method's (the fewest points would give a p-CG)."""
    sched = dv.derive("cg-gropp")
    assert [sorted(img.word for img in phase.overlap) for phase in sched.phases] == [["A"], ["M"]]
    assert [len(pairs) for pairs in sched.reductions.pairs] == [2, 1]
    assert all(not img.word for img in sched.reductions.auxiliaries.maintained)
    free = dataclasses.replace(dv.BASE_METHODS["cg-gropp"], name="cg-free", reduction_points=())
    assert len(dv.derive(free).phases) == 1


@pytest.mark.parametrize("points,message", [(("q = M t",), "not a statement"), (("w = A u",), "after its first"),
                                            (("x = x + alpha*p",), "needs a dot")])
def test_a_reduction_point_must_name_a_later_statement_with_a_dot_after_it(points, message):
    with pytest.raises((ValueError, dv.NoPipelinedForm), match=message):
        dv.derive(dataclasses.replace(dv.BASE_METHODS["cg-gropp"], name="bad", reduction_points=points))


# ---------------------------------------------------------------- against the base methods
SYMMETRIC = {"poisson2d": 24, "poisson3d": 9, "anisotropic2d": 20}
NONSYMMETRIC = {"convection_diffusion2d": 24}
CLASSIC = {"cg": pk.cg, "cg-hs": pk.cg, "cg-gropp": pk.cg, "cg-pr": pk.cg, "cr": pk.cr, "bicgstab": pk.bicgstab}
# The real matrices each base method solves to 1e-8 with Jacobi, every SPD one for the
# symmetric methods.  Left out, as scipy's tests list their per-case exceptions:
# - BiCGStab on 494_bus, 1138_bus, bcsstk15 and orsirr_1: the classic method's own count
#   moves by more than 5% with the partition alone (494_bus 699 / 1824 / 1579 iterations
#   at 1 / 2 / 4 ranks), so rounding, not the derivation, decides the comparison;
# - CGS on 1138_bus (the same) and hor_131 (its residuals leave the base method's within
#   20 iterations: CGS squares the rounding errors of an ill-conditioned BiCG);
# - west0479: no base method converges on it with Jacobi (INDEX.md: hard unpreconditioned).
# Without a preconditioner the badly scaled matrices (bcsstk*, *_bus) cost the pipelined
# methods 5-30% more iterations, PETSc's pipecg as ours (docs/derivation.md has the table).
SPD_MATRICES = ["bcsstk01", "nos4", "494_bus", "gr_30_30", "1138_bus", "bcsstk15"]
MATRICES = {"cg": SPD_MATRICES, "cg-hs": SPD_MATRICES, "cg-gropp": SPD_MATRICES, "cg-pr": SPD_MATRICES,
            "cr": SPD_MATRICES,
            "bicgstab": ["bcsstk01", "nos4", "gr_30_30", "hor_131", "cage9"],
            "cgs": ["bcsstk01", "nos4", "gr_30_30", "494_bus", "bcsstk15", "orsirr_1", "cage9"]}
# CGS squares the BiCG polynomial and with it the rounding errors: on the nonsymmetric
# generator its count moves by 8% between two orderings of the same sums, so it is
# checked on the generators where it is not erratic
GENERATED_FOR = {"cg": list(SYMMETRIC), "cg-hs": list(SYMMETRIC), "cg-gropp": list(SYMMETRIC),
                 "cg-pr": list(SYMMETRIC), "cr": list(SYMMETRIC),
                 "bicgstab": list(NONSYMMETRIC) + ["poisson2d"], "cgs": ["poisson2d", "anisotropic2d"]}
CASES = [(m, p) for m in BASES for p in GENERATED_FOR[m] + MATRICES[m]]
# BiCGStab on hor_131 (cond 4.3e4) nearly breaks down at iteration 15, after which the two
# histories part at the 1e-3 level (equal histories are asked of well-conditioned problems)
HISTORY_PARTS = {("bicgstab", "hor_131")}
# Where rounding alone decides the count, it is not compared: BiCGStab with Jacobi on the
# ill-conditioned real matrices.  b perturbed by 4 ulps moves the difference between the
# derived and the base count over -5..+3 (bcsstk01, ~50 iterations), -5..+3 (nos4, ~63),
# -8..+11 (hor_131, ~136); and CGS's on the ill-conditioned ones, which square the
# rounding errors, over -2..+17 (494_bus, ~395), -6..+21 (bcsstk15, ~480), -6..+38
# (orsirr_1, ~272) (benchmarks/rounding_spread.py at 1, 2 and 4 ranks; docs/rounding.md).
# The test keeps convergence, the true residual and the first residual norms there.
COUNT_BY_ROUNDING = {("bicgstab", "bcsstk01"), ("bicgstab", "nos4"), ("bicgstab", "hor_131"),
                     ("cgs", "494_bus"), ("cgs", "bcsstk15"), ("cgs", "orsirr_1")}


@pytest.mark.mpi
@pytest.mark.parametrize("method,name", CASES, ids=[f"{m}-{p}" for m, p in CASES])
def test_derived_reproduces_its_base_method(comm, method, name):
    D, A = problem(comm, name)
    b = D.scatter(A @ np.ones(A.shape[0]))
    derived = pk.pipelined(method)(D, b, rtol=1e-8, maxiter=5000, M="jacobi")
    if method in CLASSIC:
        base = CLASSIC[method](D, b, rtol=1e-8, maxiter=5000, M="jacobi")
        base_norms, base_its = base.residual_norms, base.iterations
    else:
        dinv = 1.0 / A.diagonal()
        base_norms = run_base(dv.BASE_METHODS[method], A, A @ np.ones(A.shape[0]), M=lambda v: dinv * v,
                              iterations=derived.iterations + 5)
        converged = base_norms < 1e-8 * np.linalg.norm(A @ np.ones(A.shape[0]))
        base_its = int(np.argmax(converged)) if converged.any() else len(base_norms)
    assert derived.info == 0, derived.message
    k = min(20 if (method, name) not in HISTORY_PARTS else 12, len(base_norms), len(derived.residual_norms))
    assert np.allclose(derived.residual_norms[:k], base_norms[:k], rtol=1e-6), "first 20 iterations differ"
    if (method, name) not in COUNT_BY_ROUNDING:
        assert abs(derived.iterations - base_its) <= max(1, 0.05 * base_its), (derived.iterations, base_its)
    assert rel(A @ D.gather(derived.x), A @ np.ones(A.shape[0])) < 1e-7


# ---------------------------------------------------------------- the published p-CG
def ghysels_vanroose_pcg(A, b, Minv, rtol, maxiter):
    """Preconditioned pipelined CG as printed in Ghysels & Vanroose (2014), Alg. 4."""
    x = np.zeros_like(b)
    r = b - A @ x
    u = Minv * r
    w = A @ u
    norms = []
    z = q = s = p = np.zeros_like(b)
    gamma_old = alpha_old = None
    for i in range(maxiter + 1):
        gamma, delta, rr = r @ u, w @ u, r @ r
        norms.append(np.sqrt(rr))
        if norms[-1] < rtol * np.linalg.norm(b):
            break
        m = Minv * w
        n = A @ m
        if i > 0:
            beta = gamma / gamma_old
            alpha = gamma / (delta - beta * gamma / alpha_old)
        else:
            beta, alpha = 0.0, gamma / delta
        z = n + beta * z
        q = m + beta * q
        s = w + beta * s
        p = u + beta * p
        x = x + alpha * p
        r = r - alpha * s
        u = u - alpha * q
        w = w - alpha * z
        gamma_old, alpha_old = gamma, alpha
    return x, np.array(norms)


@pytest.mark.parametrize("name", ["poisson2d", "anisotropic2d", "nos4", "gr_30_30", "bcsstk01", "494_bus"])
def test_derived_pcg_agrees_with_the_published_algorithm(name):
    from mpi4py import MPI
    D, A = problem(MPI.COMM_SELF, name)
    b = A @ np.ones(A.shape[0])
    _, oracle = ghysels_vanroose_pcg(A, b, 1.0 / A.diagonal(), 1e-8, 20000)
    res = pk.pipelined("cg")(A, b, rtol=1e-8, maxiter=20000, M="jacobi", comm=MPI.COMM_SELF)
    k = min(20, len(oracle))
    assert np.allclose(res.residual_norms[:k], oracle[:k], rtol=1e-8)
    assert abs(res.iterations - (len(oracle) - 1)) <= 0.05 * len(oracle)


# ---------------------------------------------------------------- PETSc's pipelined KSPs
def petsc_iterations(A, b, ksp_type, pc="none"):
    from pipekrylov.petsc import make_ksp, run_ksp
    # pipecr only has the preconditioned norm
    ksp = make_ksp(A, ksp_type, pc, max_it=20000, unpreconditioned=ksp_type != "pipecr")
    its, reason, x = run_ksp(ksp, b)
    assert reason > 0
    petsc_iterations.true_residual = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
    return its


# Without a preconditioner, where the count is not decided by rounding; with Jacobi, every
# matrix the method solves except BiCGStab on the matrices listed at MATRICES above and on
# hor_131 (ours 135, pipebcgs 146, classic BiCGStab 140: within the spread of rounding).
# On COUNT_BY_ROUNDING's cases both converge, and the counts are not compared (a few ulps
# in b move pipebcgs - ours over -5..+6 on bcsstk01 and nos4 with Jacobi, -2..+2 on nos4
# without a preconditioner, ~60 iterations).
# PETSc's CR tests ||M r||, ours ||r||: compared without a preconditioner only.
PETSC_UNPRECONDITIONED = {
    ("cg", "pipecg"): ["poisson2d", "anisotropic2d", "nos4", "gr_30_30", "bcsstk01", "494_bus", "bcsstk15"],
    ("cg-gropp", "groppcg"): ["poisson2d", "anisotropic2d", "nos4", "gr_30_30", "bcsstk01", "494_bus", "bcsstk15"],
    ("cg-pr", "pipeprcg"): ["poisson2d", "anisotropic2d", "nos4", "gr_30_30", "bcsstk01", "494_bus", "bcsstk15"],
    ("cr", "pipecr"): ["poisson2d", "nos4", "gr_30_30", "494_bus", "1138_bus", "bcsstk15"],
    ("bicgstab", "pipebcgs"): ["convection_diffusion2d", "gr_30_30", "cage9", "nos4"]}
PETSC_JACOBI = {
    ("cg", "pipecg"): ["poisson2d", "anisotropic2d"] + SPD_MATRICES,
    ("cg-gropp", "groppcg"): ["poisson2d", "anisotropic2d"] + SPD_MATRICES,
    ("cg-pr", "pipeprcg"): ["poisson2d", "anisotropic2d"] + SPD_MATRICES,
    ("bicgstab", "pipebcgs"): ["convection_diffusion2d", "bcsstk01", "nos4", "gr_30_30", "cage9"]}
PETSC_CASES = [(ours, theirs, pc, name) for pc, table in (("none", PETSC_UNPRECONDITIONED), ("jacobi", PETSC_JACOBI))
               for (ours, theirs), names in table.items() for name in names]


@pytest.mark.parametrize("ours,theirs,pc,name", PETSC_CASES, ids=[f"{t}-{pc}-{n}" for _, t, pc, n in PETSC_CASES])
def test_iteration_counts_agree_with_petsc(ours, theirs, pc, name):
    from mpi4py import MPI
    pytest.importorskip("petsc4py")
    _, A = problem(MPI.COMM_SELF, name)
    b = A @ np.ones(A.shape[0])
    res = pk.pipelined(ours)(A, b, rtol=1e-8, maxiter=20000, comm=MPI.COMM_SELF, M=None if pc == "none" else pc)
    its = petsc_iterations(A, b, theirs, pc)
    assert res.info == 0
    if (ours, name) in COUNT_BY_ROUNDING:   # both converge; rounding decides the counts
        assert np.linalg.norm(b - A @ res.x) < 1e-8 * np.linalg.norm(b)
        return
    if theirs != "pipecr" and petsc_iterations.true_residual > 1.01e-8:
        # PETSc stopped on a recursive residual that had drifted from b - A x; ours checks
        # the true residual at convergence and goes on until it passes
        assert np.linalg.norm(b - A @ res.x) < 1e-8 * np.linalg.norm(b)
        assert res.iterations >= its - max(2, 0.05 * its)
        return
    assert abs(res.iterations - its) <= max(2, 0.05 * its), (res.iterations, its)


# ---------------------------------------------------------------- blocking schedules
def test_the_blocking_schedule_of_cg_is_single_reduction_cg():
    """The Chronopoulos-Gear form scheduled without overlap: its operators as written,
    then its three dots in one reduction, no auxiliary vector; the Hestenes-Stiefel form's
    is classic CG (two reductions); no image is made at start-up for either."""
    sched = dv.derive("cg", blocking=True)
    (phase,) = sched.phases
    assert [img.name for img in phase.overlap] == ["Mr", "AMr"]
    assert {frozenset((a.name, b.name)) for a, b in phase.pairs} == {frozenset(p) for p in
                                                                      (("r", "r"), ("r", "Mr"), ("AMr", "Mr"))}
    assert not [img for img in sched.reductions.auxiliaries.maintained if img.word] and not sched.start
    assert "1 blocking reduction(s)" in str(sched) and "overlaps" not in str(sched)
    hs = dv.derive("cg-hs", blocking=True)
    assert [[img.name for img in ph.overlap] for ph in hs.phases] == [["Mr"], ["Ap"]] and not hs.start
    with pytest.raises(ValueError, match="residual replacement"):
        dv.derive("cg", replace_every=10, blocking=True)


# Where the counts are not rounding's (as p-CG's against pipecg above)
SINGLE_REDUCTION_CASES = [("none", n) for n in PETSC_UNPRECONDITIONED[("cg", "pipecg")]] + \
    [("jacobi", n) for n in PETSC_JACOBI[("cg", "pipecg")]]


@pytest.mark.parametrize("pc,name", SINGLE_REDUCTION_CASES, ids=[f"{pc}-{n}" for pc, n in SINGLE_REDUCTION_CASES])
def test_single_reduction_cg_agrees_with_petscs(pc, name):
    """b-cg against PETSc's ``-ksp_type cg -ksp_cg_single_reduction``: iterations within
    5% (or 2), and ||b - A x|| within the tolerance."""
    pytest.importorskip("petsc4py")
    from pipekrylov.petsc import make_ksp, run_ksp
    _, A = problem(MPI.COMM_SELF, name)
    b = A @ np.ones(A.shape[0])
    res = pk.Solver(A, "b-cg", M=None if pc == "none" else pc, comm=MPI.COMM_SELF).solve(b, rtol=1e-8, maxiter=20000)
    ksp = make_ksp(A, "cg", pc, max_it=20000, unpreconditioned=True, options=[("ksp_cg_single_reduction", True)])
    its, reason, _ = run_ksp(ksp, b)
    assert res.info == 0 and reason > 0
    assert np.linalg.norm(b - A @ res.x) <= 1e-8 * np.linalg.norm(b)
    assert abs(res.iterations - its) <= max(2, 0.05 * its), (res.iterations, its)


@pytest.mark.mpi
def test_single_reduction_cg_blocks_on_one_reduction_an_iteration_and_overlaps_none(comm):
    D, A = problem(comm, "poisson2d")
    b = A @ np.ones(A.shape[0])
    res = pk.Solver(D, "b-cg", M="jacobi").solve(D.scatter(b), rtol=1e-8)
    ref = pk.cg(A, b, rtol=1e-8, M="jacobi", comm=MPI.COMM_SELF)
    assert res.info == 0 and abs(res.iterations - ref.iterations) <= 1
    assert np.linalg.norm(b - A @ D.gather(res.x)) <= 1e-8 * np.linalg.norm(b)
    events = res.reductions.events
    starts = [e for e in events if e.kind == "start" and e.label == "reduction 0"]
    assert len(starts) == res.iterations + 1   # the last one tests and stops
    assert not [e for e in events if e.kind == "work" and e.label == "overlap"]


# ---------------------------------------------------------------- the schedule in the trace
@pytest.mark.mpi
@pytest.mark.parametrize("method,reductions", [("cg", 1), ("bicgstab", 2)])
def test_trace_one_iallreduce_per_phase_around_the_operators(comm, method, reductions):
    name = "poisson2d" if method == "cg" else "convection_diffusion2d"
    D, A = problem(comm, name)
    res = pk.pipelined(method)(D, D.scatter(A @ np.ones(A.shape[0])), rtol=1e-6, latency=1e-3)
    events = res.reductions.events
    starts = [e for e in events if e.kind == "start" and e.label.startswith("reduction")]
    # one per phase per iteration, plus the first phase of the iteration that stops
    assert len(starts) == reductions * res.iterations + 1
    by_id = {e.id: e for e in events if e.kind == "start"}
    for work in (e for e in events if e.kind == "work" and e.label == "overlap"):
        pending = [w for w in events if w.kind == "wait" and by_id[w.id].start <= work.start
                   and w.start >= work.end]
        assert pending, "an overlap span must lie between a start and its wait"
    waits = [e for e in events if e.kind == "wait" and by_id[e.id].label.startswith("reduction")]
    assert len(waits) == len(starts)


# ---------------------------------------------------------------- attainable accuracy
# Whether BiCGStab's recursive residual drifts from the true one on 1138_bus is rounding's:
# with b perturbed by 4 ulps, the true residual without replacement is 0.9x to 2.7e6x the
# classic method's (benchmarks/rounding_spread.py).  On the other cases without a
# preconditioner it is 200x or more in every perturbation measured.
DRIFT_BY_ROUNDING = {("bicgstab", "1138_bus")}
# Whether replacement reaches the classic accuracy within the budget is rounding's on two
# cases without a preconditioner: p-CG on 1138_bus (0.9x to 4.3e4x the classic method's
# true residual: one solve in eight stagnated past the budget) and p-CR on bcsstk15 (1x
# to 372x).  There the test asserts that replacement happened and that the recursive
# residual drifts without it; docs/rounding.md has the table.
REPLACEMENT_BY_ROUNDING = {("cg", "1138_bus", None), ("cr", "bcsstk15", None)}
ACCURACY_CASES = [("cg", "494_bus", None), ("cg", "1138_bus", None), ("cr", "bcsstk15", None),
                  ("bicgstab", "orsirr_1", None), ("bicgstab", "1138_bus", None),
                  ("cg", "1138_bus", "jacobi"), ("cg", "bcsstk15", "jacobi"), ("bicgstab", "bcsstk15", "jacobi")]


@pytest.mark.parametrize("method,name,M", ACCURACY_CASES, ids=[f"{m}-{n}-{M}" for m, n, M in ACCURACY_CASES])
def test_attainable_accuracy_with_residual_replacement(method, name, M):
    """Solve to rtol 1e-10 on ill-conditioned matrices: with replacement the derived
    method's true residual is within 10x of the classic method's; without a
    preconditioner and without replacement, the recursive residual drifts and the true one
    is orders of magnitude worse.  (docs/derivation.md has the table; p-CG on bcsstk15
    without a preconditioner stops short, as PETSc's pipecgrr does.)"""
    from mpi4py import MPI
    A = load(name)
    b = A @ np.ones(A.shape[0])
    kw = dict(comm=MPI.COMM_SELF, M=M)
    classic_8 = getattr(pk, method)(A, b, rtol=1e-8, maxiter=30000, **kw)
    budget = 3 * classic_8.iterations
    classic = getattr(pk, method)(A, b, rtol=1e-10, maxiter=budget, **kw)
    with_rr = pk.pipelined(method, replace_automatic=True)(A, b, rtol=1e-10, maxiter=budget, **kw)
    without = pk.pipelined(method)(A, b, rtol=1e-10, maxiter=budget, **kw)
    true = lambda x: np.linalg.norm(b - A @ x) / np.linalg.norm(b)  # noqa: E731
    assert with_rr.replacements > 0
    if (method, name, M) not in REPLACEMENT_BY_ROUNDING:
        assert true(with_rr.x) <= 10 * true(classic.x), (true(with_rr.x), true(classic.x))
    if M is None and (method, name) not in DRIFT_BY_ROUNDING:
        assert true(without.x) > 100 * true(classic.x)


@pytest.mark.parametrize("method", ["cg-gropp", "cg-pr"])
@pytest.mark.parametrize("name", ["494_bus", "1138_bus"])
def test_gropp_and_predict_recompute_cg_attain_cgs_accuracy_without_replacement(method, name):
    """Where p-CG's recursive residual drifts 1e5 times above classic CG's attainable
    accuracy (the test above), Gropp's CG (no auxiliary recurrence) and predict-and-
    recompute p-CG (A M r recomputed) reach CG's without residual replacement."""
    from mpi4py import MPI
    A = load(name)
    b = A @ np.ones(A.shape[0])
    kw = dict(comm=MPI.COMM_SELF)
    budget = 3 * pk.cg(A, b, rtol=1e-8, maxiter=30000, **kw).iterations
    classic = pk.cg(A, b, rtol=1e-10, maxiter=budget, **kw)
    derived = pk.pipelined(method)(A, b, rtol=1e-10, maxiter=budget, **kw)
    true = lambda x: np.linalg.norm(b - A @ x) / np.linalg.norm(b)  # noqa: E731
    assert derived.info == 0, derived.message
    assert true(derived.x) <= 10 * true(classic.x), (true(derived.x), true(classic.x))


def test_derive_knows_nothing_of_deep_and_one_door_routes_to_both():
    """deep uses derive (its hand-over to p-CG); derive never imports deep: the choice
    between them is pipekrylov.pipelining's alone."""
    import ast
    import glob
    import os
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pipekrylov", "derive")
    for path in glob.glob(os.path.join(folder, "*.py")):
        with open(path) as f:
            tree = ast.parse(f.read())
        imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        imported += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not any("deep" in name for name in imported), (path, imported)
    assert pk.pipelined("cg", depth=3).depth == 3 and pk.pipelined("gmres").__name__ == "p1_gmres"
    assert str(pk.pipelined("cg").schedule) == str(dv.derive("cg"))
    with pytest.raises(ValueError, match="deep pipelines exist"):
        dv.derive("cg", 3)
