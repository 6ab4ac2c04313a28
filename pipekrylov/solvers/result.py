"""What a solve returns, and the reasons it stops (PETSc's KSPConvergedReason values)."""
import numpy as np

__all__ = ["SolveResult", "REASONS", "Breakdown"]

# name -> PETSc KSPConvergedReason value; the negative ones are also the scipy-style info.
REASONS = {
    "converged_rtol": 2,
    "converged_atol": 3,
    "converged_happy_breakdown": 5,
    "diverged_its": -3,
    "diverged_dtol": -4,
    "diverged_breakdown": -5,
    "diverged_breakdown_bicg": -6,
    "diverged_lost_accuracy": -5,   # a pipelined method's recurrences drifted (PETSc: breakdown)
    "diverged_indefinite_pc": -8,
    "diverged_nanorinf": -9,
    "diverged_indefinite_mat": -10,
    "diverged_pc_failed": -11,
}


class Breakdown(ArithmeticError):
    """Raised inside a solver loop; becomes ``info < 0`` with its reason."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason


class SolveResult(tuple):
    """``(x, info)`` as scipy returns it, with the details as attributes.

    ``x, info = cg(A, b)`` works as in scipy; ``result = cg(A, b)`` also gives

    Attributes
    ----------
    x : ndarray
        The solution (whole if A was given whole, else this rank's slice).
    info : int
        0 converged; > 0 the iterations done without converging; < 0 breakdown (the
        value of PETSc's KSPConvergedReason for :attr:`reason`).
    reason : str
        ``converged_rtol``, ``converged_atol``, ``diverged_its``, ``diverged_dtol`` (a
        residual norm reached ``divtol ||b||``: :meth:`Solver.solve`), ``diverged_breakdown``,
        ``diverged_indefinite_mat``, ``diverged_indefinite_pc``, ``diverged_nanorinf``,
        ``diverged_pc_failed``, ``diverged_lost_accuracy`` (a pipelined method's
        recurrences drifted from b - A x until a check failed), ...
    message : str
        A sentence saying why it stopped.
    iterations : int
    residual_norms : ndarray
        The norm the convergence test used, one per iteration starting with iteration 0.
    timings : dict
        Seconds in ``spmv``, ``pc``, ``reductions_blocked``, ``total``; counts too.
    reductions :
        The trace: its ``events`` (starts, local work and waits), ``count``, ``blocked_time``.
    loop, replacements, restarts, shifts, handed_over :
        Which loop ran, and what some methods report (defaults where a method has none).
    """

    loop = "python"     # "compiled" where the method's compiled loop ran
    replacements = 0    # residual replacements (and restarts from x) of a pipelined method
    restarts = 0        # BiCGStab's shadow-space restarts; a deep pipeline's restarts
    shifts = None       # a deep pipeline's basis shifts
    handed_over = None  # the iteration p(l)-CG handed over to p-CG at (None: it did not)
    depth = None        # a deep pipeline's depth in its last cycle

    def __new__(cls, x, info, **details):
        self = super().__new__(cls, (x, info))
        self.x, self.info = x, info
        self.__dict__.update(details)
        self.residual_norms = np.asarray(details.get("residual_norms", ()), dtype=float)
        return self

    @classmethod
    def of(cls, x, info, details):
        """The result of ``x, info`` with ``details`` (a dict it keeps; ``residual_norms``
        an array): as the constructor, without copying the details."""
        self = tuple.__new__(cls, (x, info))
        details["x"], details["info"] = x, info
        self.__dict__ = details
        return self

    @property
    def converged(self):
        return self.info == 0

    def replace(self, **changes):
        """This result with ``x`` or ``info`` (or another detail) changed: a new SolveResult."""
        details = {k: v for k, v in self.__dict__.items() if k not in ("x", "info")}
        x, info = changes.pop("x", self.x), changes.pop("info", self.info)
        return type(self)(x, info, **{**details, **changes})

    def __getattr__(self, name):
        # the details made only when read (a solve does not pay for them): ``timings``
        # and ``reductions`` from the ``_details`` callable a solver gives
        if name in ("timings", "reductions") and "_details" in self.__dict__:
            self.__dict__.update(self.__dict__.pop("_details")())
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self):
        last = f"{self.residual_norms[-1]:.3e}" if self.residual_norms.size else "none"
        return (f"SolveResult(info={self.info}, reason={self.reason!r}, "
                f"iterations={self.iterations}, residual={last})")
