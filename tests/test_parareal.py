"""Parareal: the math (K = 0 / K = P), every controller against the serial emulation,
per-slice stopping, errors that reach every slice, and the propagators' accuracy."""
import threading
import warnings

import numpy as np
import pytest

from parareal import PararealConfig, run_mpi, run_serial, run_threads
from parareal.problems import Burgers3D, Heat
from parareal.propagators import RungeKutta, TABLEAUX, crank_nicolson, implicit_euler
from parareal.report import speedup_bound
from parareal.setups import make_setup

# small versions of every setup; each interval splits into 1, 2 and 4 slices evenly
SETUPS = {
    "lorenz": dict(t_end=1.0),
    "brusselator": dict(t_end=4.0),
    "burgers": dict(n=10, t_end=1 / 6),
    "heat": dict(n=12, dim=2, t_end=0.1),
}


def setup_of(name):
    return make_setup(name, **SETUPS[name])


def rel(a, b):
    return np.max(np.abs(a - b)) / np.max(np.abs(b))


def quiet_config(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # K >= P on purpose
        return PararealConfig(*args, **kwargs)


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_zero_iterations_reproduce_the_serial_coarse_run(name):
    s = setup_of(name)
    result = run_serial(s.u0, s.coarse, s.fine, PararealConfig(4, s.t_end, 0))
    assert rel(result.u_end, s.coarse(s.u0, 0.0, s.t_end)) < 1e-13


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_P_iterations_reproduce_the_serial_fine_run(name):
    s = setup_of(name)
    result = run_serial(s.u0, s.coarse, s.fine, quiet_config(4, s.t_end, 4, keep_history=True))
    fine = s.fine(s.u0, 0.0, s.t_end)
    assert rel(result.u_end, fine) < 1e-13
    assert rel(result.history[1][-1], fine) > 1e-8  # it took the iterations to get there
    # slice n is exact after n + 1 iterations and then stops: n + 1 fine runs, not K
    assert result.fine_runs == [1, 2, 3, 4]
    assert result.converged_at == [1, 2, 3, 4]


def test_burgers_study_reproduces_the_published_convergence():
    """The study's setup at its size, in shared-memory mode: the defect to the serial
    fine run at k = 1..4 within 25% of the published figures."""
    s = make_setup("burgers", n=40)
    result = run_threads(s.u0, s.coarse, s.fine, PararealConfig(24, s.t_end, 4, keep_history=True))
    fine = s.fine(s.u0, 0.0, s.t_end)
    defects = [rel(result.history[k][-1], fine) for k in range(1, 5)]
    assert np.allclose(defects, s.published[24], rtol=0.25), defects  # Ruprecht 2017


def _same_history(a, b):
    for k in a.history:
        for x, y in zip(a.history[k], b.history[k]):
            assert (x is None) == (y is None)
            if x is not None:
                assert rel(x, y) <= 1e-13 if np.any(y) else np.array_equal(x, y)
    assert a.converged_at == b.converged_at
    assert a.fine_runs == b.fine_runs


@pytest.mark.parametrize("pipelined", [True, False], ids=["pipelined", "standard"])
@pytest.mark.parametrize("name", ["burgers", "heat", "lorenz"])
def test_threads_reproduce_the_serial_emulation_at_every_iteration(name, pipelined):
    s = setup_of(name)
    for tol in (None, 1e-7):
        config = PararealConfig(4, s.t_end, 3, tol=tol, keep_history=True)
        oracle = run_serial(s.u0, s.coarse, s.fine, config)
        for _ in range(3):  # repeated: races would show as differences
            _same_history(run_threads(s.u0, s.coarse, s.fine, config, pipelined=pipelined), oracle)


@pytest.mark.mpi
@pytest.mark.parametrize("pipelined", [True, False], ids=["pipelined", "standard"])
@pytest.mark.parametrize("name", ["burgers", "heat", "brusselator"])
def test_mpi_reproduces_the_serial_emulation_at_every_iteration(comm, name, pipelined):
    s = setup_of(name)
    P = comm.Get_size()
    for tol in (None, 1e-7):
        config = quiet_config(P, s.t_end, max(P - 1, 1), tol=tol, keep_history=True)
        oracle = run_serial(s.u0, s.coarse, s.fine, config)
        for _ in range(3):
            result = run_mpi(s.u0, s.coarse, s.fine, config, comm=comm, pipelined=pipelined)
            _same_history(result, oracle)
            assert np.array_equal(result.u_end, oracle.u_end)


def test_converged_slices_stop_working():
    s = make_setup("lorenz", t_end=2.0)
    config = PararealConfig(8, s.t_end, 7, tol=1e-9)
    result = run_threads(s.u0, s.coarse, s.fine, config)
    assert result.converged  # every slice stopped before K = 7 ran out
    stopped = result.converged_at
    assert stopped == sorted(stopped)  # never before the predecessor (LibPFASST's rule)
    assert sum(result.fine_runs) < 8 * 7  # fewer fine runs than plain Parareal's P K
    assert all(r == c for r, c in zip(result.fine_runs, stopped))  # none after stopping
    assert rel(result.u_end, s.fine(s.u0, 0.0, s.t_end)) < 1e-7
    assert stopped[-1] < 7  # and the run stopped early


def test_warns_when_K_is_at_least_P():
    with pytest.warns(RuntimeWarning, match="cannot be faster"):
        PararealConfig(4, 1.0, 4)


def test_bad_configurations_raise():
    with pytest.raises(ValueError, match="t_end"):
        PararealConfig(4, 0.0, 1)
    with pytest.raises(ValueError, match="slices"):
        PararealConfig(0, 1.0, 1)
    s = setup_of("lorenz")
    with pytest.raises(ValueError, match="whole number of steps"):  # raised, not hung
        run_threads(s.u0, s.coarse, s.fine, PararealConfig(3, s.t_end, 1))


class FailsOnSlice:
    """A fine propagator that raises on one slice (a solver failure, say)."""

    def __init__(self, fine, t_fail):
        self.fine, self.t_fail = fine, t_fail

    def __call__(self, u, t0, t1):
        if t0 == self.t_fail:
            raise FloatingPointError("fine propagator failed")
        return self.fine(u, t0, t1)


@pytest.mark.parametrize("pipelined", [True, False], ids=["pipelined", "standard"])
def test_a_failing_thread_stops_every_thread(pipelined):
    s = setup_of("lorenz")
    config = PararealConfig(4, s.t_end, 2)
    fine = FailsOnSlice(s.fine, config.interval(1)[0])
    with pytest.raises(FloatingPointError, match="fine propagator failed"):
        run_threads(s.u0, s.coarse, fine, config, pipelined=pipelined)
    assert threading.active_count() < 4


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("pipelined", [True, False], ids=["pipelined", "standard"])
def test_a_failing_rank_raises_on_every_rank(comm, pipelined):
    s = setup_of("lorenz")
    config = quiet_config(comm.Get_size(), s.t_end, 2)
    fine = FailsOnSlice(s.fine, config.interval(1)[0])
    with pytest.raises(FloatingPointError, match="rank 1: fine propagator failed"):
        run_mpi(s.u0, s.coarse, fine, config, comm=comm, pipelined=pipelined)


@pytest.mark.mpi
def test_mpi_needs_one_slice_per_rank(comm):
    s = setup_of("lorenz")
    with pytest.raises(ValueError, match="one slice per rank"):
        run_mpi(s.u0, s.coarse, s.fine, PararealConfig(comm.Get_size() + 1, s.t_end, 1), comm=comm)


# ----------------------------------------------------------------- propagators
@pytest.mark.parametrize("method,order", [("forward-euler", 1), ("ssp-rk3", 3), ("rk4", 4)])
def test_runge_kutta_orders(method, order):
    class Decay:  # u' = -u + cos t, against its exact solution
        def rhs(self, t, u, out):
            out[:] = -u + np.cos(t)
    exact = np.exp(-1.0) * 0.5 + 0.5 * (np.cos(1.0) + np.sin(1.0))  # u(0) = 1
    errors = [abs(RungeKutta(Decay(), method, 1 / n)(np.array([1.0]), 0.0, 1.0)[0] - exact)
              for n in (20, 40)]
    assert np.log2(errors[0] / errors[1]) == pytest.approx(order, abs=0.25)
    assert TABLEAUX[method].stages == len(TABLEAUX[method].b)


def test_theta_methods_against_the_matrix_exponential():
    from scipy.sparse.linalg import expm_multiply
    problem = Heat(10, dim=2, nu=0.1)
    u0 = problem.initial_value()
    exact = expm_multiply(problem.operator() * 0.2, u0.reshape(-1)).reshape(u0.shape)
    errors = {}
    for name, make in (("ie", implicit_euler), ("cn", crank_nicolson)):
        errors[name] = [rel(make(problem, 0.2 / n)(u0, 0.0, 0.2), exact) for n in (10, 20)]
    assert np.log2(errors["ie"][0] / errors["ie"][1]) == pytest.approx(1, abs=0.2)
    assert np.log2(errors["cn"][0] / errors["cn"][1]) == pytest.approx(2, abs=0.2)
    assert errors["cn"][1] < 3e-4 and errors["cn"][1] < errors["ie"][1] / 10


@pytest.mark.parametrize("order,expected", [(1, 1), (5, 4)])
def test_burgers_space_discretization_order(order, expected):
    """The right-hand side on smooth data against the exact one: the fine scheme's
    error falls with its formal order (4th-order diffusion bounds WENO5's 5th)."""
    def error(n):
        p = Burgers3D(n, nu=0.02, order=order, initial="sine")
        x = (np.arange(n) + 0.5) / n
        w = 2 * np.pi
        u = np.broadcast_to(0.5 + 0.25 * np.sin(w * x)[:, None, None], (n, n, n)).copy()
        exact = -(u * 0.25 * w * np.cos(w * x)[:, None, None]) - 0.02 * 0.25 * w * w * np.sin(w * x)[:, None, None]
        out = np.empty_like(u)
        p.rhs(0.0, u, out)
        return np.max(np.abs(out - exact))
    e1, e2 = error(16), error(32)
    assert np.log2(e1 / e2) > expected - 0.3


def test_burgers_fluxes_conserve_the_mean():
    s = make_setup("burgers", n=10, t_end=0.25)
    u = s.fine(s.u0 + 0.3, 0.0, 0.25)
    assert abs(u.mean() - (s.u0 + 0.3).mean()) < 1e-14


def test_speedup_bounds_match_the_published_formula():
    for K, P, alpha in [(4, 24, 0.02), (1, 2, 0.05)]:
        assert speedup_bound(alpha, K, P, False) == pytest.approx(1 / ((1 + K) * alpha + K / P))
        assert speedup_bound(alpha, K, P, True) == pytest.approx(1 / ((1 + K / P) * alpha + K / P))
        assert speedup_bound(alpha, K, P, True) > speedup_bound(alpha, K, P, False)
