"""The plumbing of a deep pipeline: reductions in flight, keyed by the basis column they
compute, and the operator application they overlap."""
import numpy as np

__all__ = ["Pipeline", "VectorPool"]


class Pipeline:
    """Up to ``l + 1`` fused reductions in flight on one :class:`FusedReduction`."""

    def __init__(self, reduction):
        self.reduction = reduction
        self.in_flight = {}

    def start(self, column, values):
        self.in_flight[column] = self.reduction.start(values, f"G[:,{column}]")

    def wait(self, column):
        return self.in_flight.pop(column).wait()

    def drain(self):
        """Complete every reduction still in flight (every rank started the same ones)."""
        for column in sorted(self.in_flight):
            self.in_flight.pop(column).wait()

    def operator(self, run, right=False):
        """``apply(z, pool) -> (A z, M A z)``, or with ``right`` ``(A M z, A M z)``: the
        local work each reduction in flight hides behind, recorded in the trace and
        poking MPI progress between row chunks."""
        red, A = self.reduction, run.A

        def progress():
            if red.pending:
                red.progress()

        def apply(z, pool):
            if right:
                with red.work("pc"):
                    mz = run.precondition(z, pool.take()) if run.M is not None else z
                with red.work("spmv"):
                    w = A.matvec(mz, pool.take(), progress=progress)
                if mz is not z:
                    pool.give(mz)
                return w, w
            with red.work("spmv"):
                uw = A.matvec(z, pool.take(), progress=progress)
            with red.work("pc"):
                w = run.precondition(uw, pool.take())
            return uw, w
        return apply


class VectorPool:
    """Recycled local vectors: the recurrences retire one vector per basis per
    iteration and need a new one, and fresh large arrays cost page faults."""

    def __init__(self, n):
        self.n, self.free = n, []

    def take(self):
        return self.free.pop() if self.free else np.empty(self.n)

    def give(self, vector):
        if vector is not None:
            self.free.append(vector)
