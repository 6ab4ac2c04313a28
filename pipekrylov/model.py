"""A performance model of one Krylov iteration, for strong scaling far beyond this machine.

Per iteration, on P ranks sharing n unknowns and nnz nonzeros (ms/it = the sum below):

* S = spmv_per_nnz * nnz/P + halo (P > 1): the SpMV, memory-bound, plus one neighbour exchange;
* M = 3 * vector_per_entry * n/P: the Jacobi preconditioner (read d and r, write z);
* V = accesses * vector_per_entry * n/P: the method's vector updates and local dots;
* G(P) = reduction_latency + reduction_per_level * (log2 P - 1) for P > 1, else 0: one
  global reduction (a tree, so log2 P levels).

and the methods combine them as in Ghysels & Vanroose (2014) and Cornelis, Cools &
Vanroose (2018):

    cg          2G + S + M + V          two blocking reductions
    cg-single   G + S + M + V           one (Chronopoulos-Gear, Gropp-style)
    p-cg        max(G, S + M) + V       the reduction hidden behind SpMV and PC
    p(l)-cg     max(G / l, S + M) + V   each reduction spread over l iterations
    bicgstab    3G + 2(S + M) + V
    p-bicgstab  2 max(G, S + M) + V
    gmres       2G + S + M + V          classical Gram-Schmidt, restart m
    p(l)-gmres  max(G / l, S + M) + V

The vector access counts (entries read or written per unknown per iteration) are counted
from this package's kernels for cg and p-cg and estimated from the methods' operation
counts for the rest (marked in METHODS).  A Machine holds
the four costs: measured here by :func:`calibrate`, or given (``MACHINES``).
"""
import json
import math
import time
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Machine", "MACHINES", "METHODS", "time_per_iteration", "best_depth", "predict",
           "plot_prediction", "calibrate"]


@dataclass(frozen=True)
class Machine:
    """Per-rank costs, in seconds."""
    name: str
    spmv_per_nnz: float
    vector_per_entry: float
    reduction_latency: float      # an Allreduce of a few doubles on 2 ranks
    reduction_per_level: float    # added per doubling of the rank count
    halo: float                   # one neighbour exchange
    source: str = ""

    def reduction(self, ranks):
        if ranks <= 1:
            return 0.0
        return self.reduction_latency + self.reduction_per_level * (math.log2(ranks) - 1)

    @classmethod
    def load(cls, path):
        with open(path) as f:
            return cls(**json.load(f))

    def save(self, path):
        with open(path, "w") as f:
            json.dump(asdict(self), f, indent=1)


MACHINES = {
    # Assumed, not measured: a Haswell node (2 x 16 cores, about 110 GB/s STREAM) run with 16
    # ranks per node (7 GB/s per rank), Cray Aries latencies of a few microseconds.
    "cori-haswell": Machine("cori-haswell", spmv_per_nnz=12 / 7e9, vector_per_entry=8 / 7e9,
                            reduction_latency=3e-6, reduction_per_level=1.5e-6, halo=3e-6,
                            source="assumed, not measured: see docs/scaling.md"),
}

# name: (SpMVs and PC applications per iteration, vector accesses per unknown, how the
# reductions combine with the local work: "blocking" k phases or "hidden")
METHODS = {
    "cg": (1, 13, ("blocking", 2)),                 # counted: cg.py's fused updates and dots
    "cg-single": (1, 17, ("blocking", 1)),          # estimate
    "p-cg": (1, 18, ("hidden", 1)),                 # counted: the derived kernel reads 10, writes 8
    "p(l)-cg": (1, None, ("hidden", None)),          # accesses 12 + 6 l: estimate
    "bicgstab": (2, 30, ("blocking", 3)),           # estimate
    "p-bicgstab": (2, 48, ("hidden", 2)),           # estimate
    "gmres": (1, None, ("blocking", 2)),             # accesses 2 m + 6: estimate
    "p(l)-gmres": (1, None, ("hidden", None)),       # accesses 2 m + 10 l: estimate
}


def time_per_iteration(method, machine, n, nnz, ranks, depth=1, restart=30):
    """Modelled seconds per iteration of ``method`` (a key of METHODS)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    applications, accesses, (kind, phases) = METHODS[method]
    if method == "p(l)-cg":
        accesses = 12 + 6 * depth
    elif method == "gmres":
        accesses = 2 * restart + 6
    elif method == "p(l)-gmres":
        accesses = 2 * restart + 10 * depth
    local = n / ranks
    spmv = machine.spmv_per_nnz * nnz / ranks + (machine.halo if ranks > 1 else 0.0)
    work = spmv + 3 * machine.vector_per_entry * local       # SpMV + Jacobi
    vector = accesses * machine.vector_per_entry * local
    G = machine.reduction(ranks)
    if kind == "blocking":
        return phases * G + applications * work + vector
    if phases is None:                                       # deep pipelines: G spread over l
        return max(G / depth, work) + vector
    return phases * max(G, work) + vector


def best_depth(machine, n, nnz, ranks, depths=range(1, 11)):
    """The pipeline depth l with the least modelled time of p(l)-CG, and that time."""
    return min(((l, time_per_iteration("p(l)-cg", machine, n, nnz, ranks, l)) for l in depths),
               key=lambda pair: pair[1])


def predict(machine, n, nnz, ranks, methods=("cg", "cg-single", "p-cg", "p(l)-cg")):
    """Rows ``{ranks, <method>: seconds per iteration, best_depth, speedup_plcg_over_cg}``;
    p(l)-CG at its best depth for each rank count."""
    rows = []
    for p in ranks:
        row = {"ranks": p}
        for m in methods:
            if m == "p(l)-cg":
                row["best_depth"], row[m] = best_depth(machine, n, nnz, p)
            else:
                row[m] = time_per_iteration(m, machine, n, nnz, p)
        if "cg" in row and "p(l)-cg" in row:
            row["speedup_plcg_over_cg"] = row["cg"] / row["p(l)-cg"]
        rows.append(row)
    return rows


def plot_prediction(rows, machine, problem, path):
    """Two panels: modelled time per iteration per method, and p(l)-CG's speedup over CG
    with its best depth, against the rank count (``rows`` from :func:`predict`)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ranks = [r["ranks"] for r in rows]
    fig, (ax, ax_depth) = plt.subplots(1, 2, figsize=(12, 4.8))
    for method in ("cg", "cg-single", "p-cg", "p(l)-cg"):
        label = "p(l)-cg, best l" if method == "p(l)-cg" else method
        ax.loglog(ranks, [r[method] * 1e6 for r in rows], "o-", markersize=3, label=label)
    ax.set_xlabel("MPI ranks")
    ax.set_ylabel("modelled time per iteration (microseconds)")
    ax.set_title("strong scaling, modelled")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax_depth.semilogx(ranks, [r["speedup_plcg_over_cg"] for r in rows], "o-", markersize=3,
                      label="speedup of p(l)-cg over cg")
    ax_depth.semilogx(ranks, [r["best_depth"] for r in rows], "s--", markersize=3, label="best depth l")
    ax_depth.set_xlabel("MPI ranks")
    ax_depth.set_ylabel("speedup / depth")
    ax_depth.set_title("p(l)-CG: speedup over CG and best depth")
    ax_depth.grid(True, which="both", alpha=0.3)
    ax_depth.legend()
    fig.suptitle(f"performance model: {problem} on {machine.name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def calibrate(comm=None, n=1000, repeat=10):
    """Measure this machine's costs: SpMV and vector streaming on this process, the
    Allreduce on ``comm`` (at least 2 ranks; else the latency terms stay 0).  Collective."""
    from mpi4py import MPI
    from .matrix import poisson2d
    comm = MPI.COMM_WORLD if comm is None else comm
    A = poisson2d(MPI.COMM_SELF, n)
    x, y = np.ones(A.shape[0]), np.empty(A.shape[0])

    def best(f):
        f()
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        return min(times)
    spmv = best(lambda: A.matvec(x, y)) / A.nnz
    # the solvers' vector work runs in fused kernels: time one (3 accesses per entry)
    from .kernels import fused_kernel
    axpy = fused_kernel(["z = x + alpha*y"], scalars=["alpha"])
    vectors = {"x": x, "y": y, "z": np.empty_like(x)}
    vector = best(lambda: axpy(vectors, {"alpha": 0.5})) / (3 * x.size)
    latency = per_level = halo = 0.0
    if comm.Get_size() > 1:
        buf, out = np.ones(3), np.empty(3)
        comm.Barrier()
        latency = comm.allreduce(best(lambda: comm.Allreduce(buf, out)), op=MPI.MAX)
        halo = latency / 2          # one message each way versus a tree of messages
    return Machine("here", spmv, vector, latency, per_level, halo,
                   source=f"calibrate() on {comm.Get_size()} ranks at {time.strftime('%Y-%m-%d')}")
