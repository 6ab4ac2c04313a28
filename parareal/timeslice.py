"""One time slice of Parareal: its state and the three steps every controller runs.

For slice n on ``[t_n, t_n+1]`` and iteration k (``U_n^k`` its input, ``G``/``F`` the
coarse and fine propagators):

    k = 0:   U_n+1^0 = G(U_n^0)                                     (prediction)
    k >= 1:  U_n+1^k = G(U_n^k) + F(U_n^k-1) - G(U_n^k-1)           (correction)

``F(U_n^k-1)`` depends only on the previous iteration, so a slice runs it *before* its
new input arrives: that is what lets the pipelined controllers overlap slices.  Once
the predecessor has stopped, the input is final and one more fine run makes the slice
exact: ``U_n+1 = F(U_n)``, and the slice stops (slice 0 stops after one fine run).

Controllers only move inputs and outputs between slices and call these steps; the
arithmetic is here, once, so every controller computes the same numbers.
"""
import time

import numpy as np

__all__ = ["TimeSlice"]


class TimeSlice:
    """State of slice ``index`` between iterations.

    Attributes
    ----------
    iteration : int
        Last completed iteration (-1 before the prediction).
    u_in, coarse_of_input, u_out : ndarray
        ``U_n^k``, ``G(U_n^k)`` and ``U_n+1^k`` after iteration k.
    converged_at : int or None
        The iteration after which this slice stopped.
    predecessor_stopped_at : int or None
        The iteration at which the predecessor stopped (slice 0: 0, its input is u0).
    changes : dict
        Relative max-norm change of ``u_out`` at each iteration >= 1.
    history : dict
        ``u_out`` at each iteration, when kept.
    fine_runs, coarse_runs, fine_time, coarse_time : counters
    """

    def __init__(self, index, config, coarse, fine):
        self.index, self.config, self.coarse, self.fine = index, config, coarse, fine
        self.t_start, self.t_end = config.interval(index)
        self.iteration = -1
        self.u_in = self.coarse_of_input = self.u_out = None
        self.converged_at = None
        self.predecessor_stopped_at = 0 if index == 0 else None
        self.changes, self.history = {}, {}
        self.fine_runs = self.coarse_runs = 0
        self.fine_time = self.coarse_time = 0.0

    @property
    def converged(self):
        return self.converged_at is not None

    @property
    def needs_input(self):
        """Whether the next iteration receives a new input from the predecessor."""
        return self.predecessor_stopped_at is None

    def predict(self, u_in):
        """Iteration 0: ``U_n+1^0 = G(U_n^0)``.  Returns the output."""
        self.u_in = u_in
        self.coarse_of_input = self._run_coarse(u_in)
        self._finish(0, self.coarse_of_input, converged=False)
        return self.u_out

    def run_fine(self):
        """``F(U_n^k-1)``: the expensive part, run before the new input arrives."""
        start = time.perf_counter()
        value = self.fine(self.u_in, self.t_start, self.t_end)
        self.fine_time += time.perf_counter() - start
        self.fine_runs += 1
        return value

    def correct(self, fine_value, u_in=None, predecessor_stopped=False):
        """Iteration k >= 1 from ``F(U_n^k-1)`` and, unless the input is final, the new
        input ``U_n^k`` and whether the predecessor stopped with it.  Returns
        ``(U_n+1^k, converged)``."""
        k = self.iteration + 1
        if not self.needs_input:
            self._finish(k, fine_value, converged=True)
            return self.u_out, True
        if predecessor_stopped:
            self.predecessor_stopped_at = k
        coarse_value = self._run_coarse(u_in)
        u_out = coarse_value + (fine_value - self.coarse_of_input)
        self.u_in, self.coarse_of_input = u_in, coarse_value
        tol = self.config.tol
        converged = predecessor_stopped and tol is not None and self._change(u_out) <= tol
        self._finish(k, u_out, converged)
        return self.u_out, converged

    def _run_coarse(self, u):
        start = time.perf_counter()
        value = self.coarse(u, self.t_start, self.t_end)
        self.coarse_time += time.perf_counter() - start
        self.coarse_runs += 1
        return value

    def _change(self, u_out):
        scale = np.max(np.abs(u_out))
        return float(np.max(np.abs(u_out - self.u_out)) / (scale if scale > 0 else 1.0))

    def _finish(self, k, u_out, converged):
        if k > 0:
            self.changes[k] = self._change(u_out)
        self.u_out, self.iteration = u_out, k
        if converged:
            self.converged_at = k
        if self.config.keep_history:
            self.history[k] = u_out

    # checkpointing: the state as arrays and numbers, and back
    def state(self):
        return {"index": self.index, "iteration": self.iteration, "u_in": self.u_in,
                "coarse_of_input": self.coarse_of_input, "u_out": self.u_out,
                "converged_at": self.converged_at,
                "predecessor_stopped_at": self.predecessor_stopped_at,
                "changes": dict(self.changes), "fine_runs": self.fine_runs,
                "coarse_runs": self.coarse_runs}

    def restore(self, state):
        if state["index"] != self.index:
            raise ValueError(f"checkpoint of slice {state['index']} given to slice {self.index}")
        for key, value in state.items():
            setattr(self, key, value)
