"""What a Parareal run is asked to do: the time slices and when to stop."""
import warnings
from dataclasses import dataclass
from typing import Optional

__all__ = ["PararealConfig"]


@dataclass(frozen=True)
class PararealConfig:
    """Time slices and stopping rule of a Parareal run.

    Parameters
    ----------
    slices : int
        P, the number of time slices (one per rank or thread in the parallel controllers).
    t_end : float
        End time; the slices divide ``[t0, t_end]`` evenly.
    max_iterations : int
        K, the most Parareal iterations.  K = P reproduces the serial fine run.
    tol : float or None
        Stop a slice when the relative max-norm change of its end value is at most
        ``tol`` and its predecessor has stopped (LibPFASST's rule).  None: fixed K.  A
        slice whose input no longer changes is exact after one more fine run and stops
        then, whatever ``tol`` is.
    t0 : float
    keep_history : bool
        Keep every slice's end value at every iteration (for tests and defect plots).
    """
    slices: int
    t_end: float
    max_iterations: int
    tol: Optional[float] = None
    t0: float = 0.0
    keep_history: bool = False

    def __post_init__(self):
        if self.slices < 1:
            raise ValueError(f"slices must be at least 1, not {self.slices}")
        if self.max_iterations < 0:
            raise ValueError(f"max_iterations must be >= 0, not {self.max_iterations}")
        if not self.t_end > self.t0:
            raise ValueError(f"t_end ({self.t_end}) must be after t0 ({self.t0})")
        if self.tol is not None and not self.tol >= 0:
            raise ValueError(f"tol must be None or >= 0, not {self.tol}")
        if self.slices > 1 and self.max_iterations >= self.slices:
            warnings.warn(f"K = {self.max_iterations} >= P = {self.slices}: Parareal cannot be "
                          "faster than the serial fine run", RuntimeWarning, stacklevel=3)

    def interval(self, index):
        """``(t_n, t_n+1)`` of slice ``index``."""
        width = (self.t_end - self.t0) / self.slices
        return self.t0 + index * width, self.t0 + (index + 1) * width
