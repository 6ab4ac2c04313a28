"""Named setups: a problem with its coarse and fine propagators and time interval.

    setup = SETUPS["burgers"](n=40)
    result = run_serial(setup.u0, setup.coarse, setup.fine, PararealConfig(24, setup.t_end, 4))
"""
import inspect
import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .problems import Brusselator, Burgers3D, Heat, Lorenz
from .propagators import RungeKutta, StencilEuler, crank_nicolson, implicit_euler

__all__ = ["Setup", "SETUPS", "make_setup"]


@dataclass(frozen=True)
class Setup:
    name: str
    u0: np.ndarray
    coarse: Callable
    fine: Callable
    t_end: float
    description: str
    published: Optional[dict] = None  # {P: defects at k = 1, 2, ...} from the literature


def burgers(n=40, nu=0.02, t_end=1.0, initial="pararealf90"):
    """Ruprecht's study: coarse forward Euler dt = 1/192 with upwind advection and
    2nd-order diffusion, fine SSP-RK3 dt = 1/240 with WENO5 and 4th-order diffusion."""
    coarse = RungeKutta(Burgers3D(n, nu, order=1, initial=initial), "forward-euler", 1 / 192)
    fine = RungeKutta(Burgers3D(n, nu, order=5, initial=initial), "ssp-rk3", 1 / 240)
    study = (n, nu, t_end, initial) == (40, 0.02, 1.0, "pararealf90")
    return Setup("burgers", Burgers3D(n, nu, initial=initial).initial_value(), coarse, fine,
                 float(t_end), f"3D viscous Burgers {n}^3, nu={nu}: G = Euler/upwind dt 1/192, "
                 "F = SSP-RK3/WENO5 dt 1/240",
                 # Ruprecht 2017, the defect to the serial fine run at P = 24
                 published={24: [9.1e-3, 1.1e-3, 1.4e-4, 1.6e-5]} if study else None)


def heat(n=32, dim=2, nu=0.1, t_end=1.0, fine="crank-nicolson"):
    """Coarse implicit Euler dt = 1/40 (pipekrylov CG); fine Crank-Nicolson dt = 1/400, or
    with ``fine="stencil"`` forward Euler dt = 1/1000 by the stencil package's kernels."""
    problem = Heat(n, dim, nu)
    if fine == "stencil":
        fine_propagator, fine_text = StencilEuler(problem, 1 / 1000), "forward Euler dt 1/1000 (stencil)"
    elif fine == "crank-nicolson":
        fine_propagator, fine_text = crank_nicolson(problem, 1 / 400), "Crank-Nicolson dt 1/400"
    else:
        raise ValueError(f"fine must be 'crank-nicolson' or 'stencil', not {fine!r}")
    return Setup("heat", problem.initial_value(), implicit_euler(problem, 1 / 40),
                 fine_propagator, float(t_end),
                 f"heat equation {n}^{dim}, nu={nu}: G = implicit Euler dt 1/40 (pipekrylov.cg), "
                 f"F = {fine_text}")


def lorenz(t_end=2.0):
    """Coarse RK4 dt = 1/40, fine RK4 dt = 1/2000."""
    problem = Lorenz()
    return Setup("lorenz", problem.initial_value(), RungeKutta(problem, "rk4", 1 / 40),
                 RungeKutta(problem, "rk4", 1 / 2000), float(t_end),
                 "Lorenz system: G = RK4 dt 1/40, F = RK4 dt 1/2000")


def brusselator(t_end=10.0):
    """Coarse forward Euler dt = 1/10, fine RK4 dt = 1/200."""
    problem = Brusselator()
    return Setup("brusselator", problem.initial_value(),
                 RungeKutta(problem, "forward-euler", 1 / 10), RungeKutta(problem, "rk4", 1 / 200),
                 float(t_end), "Brusselator: G = forward Euler dt 1/10, F = RK4 dt 1/200")


SETUPS = {"burgers": burgers, "heat": heat, "lorenz": lorenz, "brusselator": brusselator}


def make_setup(name, **params):
    """The setup ``name`` with ``params``; a clear ValueError for an unknown name, an
    unknown parameter, a size that cannot make a grid or a number that is not finite."""
    check_setup(name, **params)
    return SETUPS[name](**params)


def check_setup(name, **params):
    """Refuse what :func:`make_setup` would be given wrong, before it builds anything."""
    if name not in SETUPS:
        raise ValueError(f"unknown setup {name!r}; choose from {', '.join(SETUPS)}")
    known = _parameters(name)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"setup {name!r} has no parameter {', '.join(map(repr, unknown))}; "
                         f"its parameters: {', '.join(f'{k}={v!r}' for k, v in known.items())}")
    n = params.get("n")
    if n is not None and not (isinstance(n, int) and n >= 2):
        raise ValueError(f"setup {name!r}: n must be an integer of at least 2 (grid points per axis), got {n!r}")
    for key, value in params.items():
        # a NaN would surface much later as "non-finite entries" of some matrix
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"setup {name!r}: {key} must be a finite number, got {value!r}")


def setup_unknowns(name, **params):
    """The size of the setup's state (values per time), without building it."""
    values = {**_parameters(name), **params}
    if name == "heat":
        return values["n"] ** values["dim"]
    if name == "burgers":
        return values["n"] ** 3
    return {"lorenz": 3, "brusselator": 2}[name]


def _parameters(name):
    """The setup's parameters and their defaults."""
    return {k: v.default for k, v in inspect.signature(SETUPS[name]).parameters.items()}
