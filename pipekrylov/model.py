"""A performance model of one Krylov iteration, for strong scaling far beyond this machine.

Per iteration, on P ranks sharing n unknowns and nnz nonzeros (ms/it = the sum below):

* S = spmv_per_nnz * nnz/P + halo (P > 1): the SpMV, memory-bound, plus its halo exchange;
* M = 3 * vector_per_entry * n/P: the Jacobi preconditioner (read d and r, write z);
* V = accesses * vector_per_entry * n/P: the method's vector updates and local dots;
* G(P) = reduction_latency + reduction_per_level * (log2 P - 1) for P > 1, else 0: one
  global reduction (a tree, so log2 P levels); of it, o = reduction_overhead is the
  processor's own time (LogP's overhead: starting the reduction, handling its messages),
  which no overlap hides, only the rest (the latency proper).

SpMV and vector costs per entry depend on the local size (a working set in cache streams
faster than one in memory): a Machine may hold them at several local sizes (``rates``),
interpolated in between.  The methods combine the terms as in Ghysels & Vanroose (2014)
and Cornelis, Cools & Vanroose (2018):

    cg          2G + S + M + V                  two blocking reductions
    cg-single   G + S + M + V                   one (Chronopoulos-Gear, Gropp-style)
    p-cg        o + max(G - o, S + M) + V       the reduction hidden behind SpMV and PC
    p(l)-cg     o + max((G - o) / l, S + M) + V each reduction spread over l iterations
    bicgstab    3G + 2(S + M) + V
    p-bicgstab  2 (o + max(G - o, S + M)) + V
    gmres       2G + S + M + V                  classical Gram-Schmidt, restart m
    p(l)-gmres  o + max((G - o) / l, S + M) + V

That is an ideal code: its time is its work and its waits.  This package's loops
(``loop="compiled"`` or ``"python"``) are modelled from what they take on one rank, as
:func:`calibrate` measures them at a few local sizes (:func:`loop_costs`): the time per
iteration less S and M there is the loop's own time, split into a fixed cost per
iteration F (``machine.fixed["p-cg compiled"]``: its calls and bookkeeping, a microsecond
or less compiled, the interpreter's tens of microseconds in Python; decisive at the
smallest local sizes) and V, its vector kernels (``machine.kernels``, per unknown).
p(l)-CG's are split once more into its base and one level pass, l of them counted.
:func:`predict` gives the ideal code and this package side by side.

The vector access counts (entries read or written per unknown per iteration) are counted
from this package's kernels for cg and p-cg and estimated from the methods' operation
counts for the rest (marked in METHODS).  A Machine holds the costs: measured here by
:func:`calibrate`, or given (``MACHINES``).
"""
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np

__all__ = ["Machine", "MACHINES", "METHODS", "PACKAGE", "time_per_iteration", "best_depth", "predict",
           "crossovers", "report", "plot_prediction", "calibrate", "loop_costs", "LOOP_KEYS", "Communication",
           "communication_costs"]

# the loops this package runs each modelled method on (the others have the Python loop only)
PACKAGE = (("cg", "compiled"), ("p-cg", "compiled"), ("p(l)-cg", "compiled"), ("p-cg", "python"),
           ("p(l)-cg", "python"))
# the keys of a Machine's fixed and per-unknown costs for them: "<method> <loop>", and one
# of p(l)-CG's l level passes
LOOP_KEYS = tuple(f"{m} {loop}" for m, loop in PACKAGE) + ("p(l)-cg compiled level", "p(l)-cg python level")


@dataclass(frozen=True)
class Machine:
    """Per-rank costs, in seconds."""
    name: str
    spmv_per_nnz: float
    vector_per_entry: float
    reduction_latency: float      # a nonblocking Allreduce of a few doubles on 2 ranks, waited for
    reduction_per_level: float    # added per doubling of the rank count
    halo: float                   # a halo exchange with the neighbouring ranks
    source: str = ""
    # of reduction_latency, the processor's time (no overlap hides it); 0: all of it hidable
    reduction_overhead: float = 0.0
    # this package's fixed seconds per iteration, by "<method> <loop>" (PACKAGE; and
    # "p(l)-cg <loop> level", one of p(l)-CG's l level passes)
    fixed: dict = field(default_factory=dict)
    # (local unknowns, spmv_per_nnz, vector_per_entry) at a few local sizes; () for the
    # two costs above at every size
    rates: tuple = ()
    # this package's own vector work per iteration, by "<method> <loop>" (and "p(l)-cg <loop>
    # level", one of p(l)-CG's l passes, also in fixed): ((local unknowns, seconds per
    # unknown), ...); a loop not here: the method's accesses
    kernels: dict = field(default_factory=dict)
    # a blocking Allreduce on 2 ranks (the classic methods'), where it differs from a
    # nonblocking one waited for at once; 0: reduction_latency
    blocking_latency: float = 0.0

    def costs(self, local):
        """(spmv_per_nnz, vector_per_entry) at ``local`` unknowns per rank: interpolated in
        log(local) between the measured sizes, the nearest outside them."""
        if not self.rates:
            return self.spmv_per_nnz, self.vector_per_entry
        sizes = np.log([r[0] for r in self.rates])
        where = np.log(max(local, 1.0))
        return (float(np.interp(where, sizes, [r[1] for r in self.rates])),
                float(np.interp(where, sizes, [r[2] for r in self.rates])))

    def kernel_cost(self, key, local):
        """Seconds per unknown of one iteration of the loop ``key``'s own vector work at
        ``local`` unknowns (interpolated as :meth:`costs`), or None if not measured."""
        if key not in self.kernels:
            return None
        points = self.kernels[key]
        return float(np.interp(np.log(max(local, 1.0)), np.log([q[0] for q in points]), [q[1] for q in points]))

    def reduction(self, ranks, blocking=False):
        """G on ``ranks`` ranks: of the pipelined methods' nonblocking reduction, or
        (``blocking``) of the classic methods' blocking one."""
        if ranks <= 1:
            return 0.0
        latency = self.blocking_latency if blocking and self.blocking_latency else self.reduction_latency
        return latency + self.reduction_per_level * (math.log2(ranks) - 1)

    @classmethod
    def load(cls, path):
        try:
            with open(path) as f:
                values = json.load(f)
            values["rates"] = tuple(tuple(r) for r in values.get("rates", ()))
            values["kernels"] = {m: tuple(tuple(q) for q in points) for m, points in values.get("kernels", {}).items()}
        except (ValueError, TypeError, AttributeError) as exc:   # not JSON, or not a machine's
            raise ValueError(f"{path}: not a machine file (the JSON that --save-machine writes): {exc}") from None
        unknown = sorted(set(values["kernels"]) - set(LOOP_KEYS))
        if unknown:   # an older calibrate() keyed its kernels by method, with its F fitted to them
            raise ValueError(f"{path}: costs by {', '.join(map(repr, unknown))} are not this version's "
                             f"({', '.join(LOOP_KEYS)}); calibrate again (pipekrylov model --machine here "
                             "--save-machine FILE)")
        try:
            return cls(**values)
        except TypeError as exc:   # keys missing or unknown
            raise ValueError(f"{path}: not a machine file (the JSON that --save-machine writes): {exc}") from None

    def save(self, path):
        with open(path, "w") as f:
            json.dump(asdict(self), f, indent=1)


MACHINES = {
    # Assumed, not measured: a Haswell node (2 x 16 cores, about 110 GB/s STREAM) run with 16
    # ranks per node (7 GB/s per rank), Cray Aries latencies of a few microseconds.
    # This package's fixed costs per iteration: as calibrate() measured them on a 2-core Xeon
    # VM (the intercepts of each loop's own time at 256 and 1,024 unknowns, five runs: cg
    # compiled 0.3-0.6 us, p-cg compiled 0.4-0.7, p(l)-cg compiled 0.0-0.7 and 0.0-0.6 per
    # level, p-cg python 22-24, p(l)-cg python 34-36 and 9-10 per level), about the middle
    # taken; its vector work is the accesses at the machine's rate.
    "cori-haswell": Machine("cori-haswell", spmv_per_nnz=12 / 7e9, vector_per_entry=8 / 7e9,
                            reduction_latency=3e-6, reduction_per_level=1.5e-6, halo=3e-6,
                            source="assumed, not measured: see docs/scaling.md",
                            fixed={"cg compiled": 0.5e-6, "p-cg compiled": 0.5e-6, "p(l)-cg compiled": 0.2e-6,
                                   "p(l)-cg compiled level": 0.4e-6, "p-cg python": 23e-6,
                                   "p(l)-cg python": 35e-6, "p(l)-cg python level": 9.5e-6}),
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
    "gmres": (1, None, ("blocking", 1)),             # DCGS2 (our default): accesses 2 m + 6, estimate
    "p(l)-gmres": (1, None, ("hidden", None)),       # accesses 2 m + 10 l: estimate
}


def time_per_iteration(method, machine, n, nnz, ranks, depth=1, restart=30, loop="ideal"):
    """Modelled seconds per iteration of ``method`` (a key of METHODS): of an ideal code,
    or (``loop`` "compiled" or "python") of this package, its own costs as calibrated."""
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
    work = local_work(machine, local, nnz / ranks, ranks)
    vector, fixed = accesses * machine.costs(local)[1] * local, 0.0
    if loop != "ideal":
        key = f"{method} {loop}"
        if key not in machine.fixed:
            raise ValueError(f"machine {machine.name!r} has no fixed cost for {key!r} (calibrate() measures "
                             f"{', '.join(' '.join(p) for p in PACKAGE)})")
        parts = [(key, 1)] + ([(f"{key} level", depth)] if method == "p(l)-cg" else [])   # l level passes
        fixed = sum(machine.fixed.get(k, 0.0) * count for k, count in parts)
        if key in machine.kernels:
            vector = sum((machine.kernel_cost(k, local) or 0.0) * count * local for k, count in parts)
    G = machine.reduction(ranks, blocking=kind == "blocking")
    if kind == "blocking":
        return fixed + phases * G + applications * work + vector
    o = min(machine.reduction_overhead, G)
    if phases is None:                                       # deep pipelines: G spread over l
        return fixed + o + max((G - o) / depth, work) + vector
    return fixed + phases * (o + max(G - o, work)) + vector


def local_work(machine, local, local_nnz, ranks=1):
    """S + M: seconds of one SpMV (its halo exchange on more than one rank) and one Jacobi
    application, on a rank of ``local`` unknowns and ``local_nnz`` nonzeros."""
    per_nnz, per_entry = machine.costs(local)
    return per_nnz * local_nnz + (machine.halo if ranks > 1 else 0.0) + 3 * per_entry * local


def best_depth(machine, n, nnz, ranks, depths=range(1, 11), loop="ideal"):
    """The pipeline depth l with the least modelled time of p(l)-CG, and that time."""
    return min(((l, time_per_iteration("p(l)-cg", machine, n, nnz, ranks, l, loop=loop)) for l in depths),
               key=lambda pair: pair[1])


def predict(machine, n, nnz, ranks, methods=("cg", "cg-single", "p-cg", "p(l)-cg")):
    """Rows ``{ranks, <method>: seconds per iteration, best_depth, speedup_plcg_over_cg}``
    of an ideal code, and ``<method> <loop>`` of this package (PACKAGE) where the machine
    has its fixed costs; p(l)-CG at its best depth for each rank count."""
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
        for m, loop in PACKAGE:
            if f"{m} {loop}" in machine.fixed:
                row[f"{m} {loop}"] = (best_depth(machine, n, nnz, p, loop=loop)[1] if m == "p(l)-cg" else
                                      time_per_iteration(m, machine, n, nnz, p, loop=loop))
        rows.append(row)
    return rows


def crossovers(rows, pairs=(("cg", "p-cg"), ("cg", "p(l)-cg"), ("cg compiled", "p-cg compiled"),
                            ("cg compiled", "p(l)-cg compiled"), ("cg compiled", "p(l)-cg python"))):
    """``{(slow, fast): the smallest rank count from which fast stays faster, or None}``."""
    out = {}
    for slow, fast in pairs:
        if not rows or slow not in rows[0] or fast not in rows[0]:
            continue
        faster = [r[fast] < r[slow] for r in rows]
        out[(slow, fast)] = None
        if faster[-1]:
            k = len(faster) - 1
            while k > 0 and faster[k - 1]:
                k -= 1
            out[(slow, fast)] = rows[k]["ranks"]
    return out


def report(rows, machine, title):
    """The prediction as a table (microseconds per iteration: the ideal code, then this
    package's loops), with the crossover rank counts."""
    ours = [f"{m} {loop}" for m, loop in PACKAGE if f"{m} {loop}" in machine.fixed]
    lines = [f"model: {title} on {machine.name} ({machine.source})",
             "microseconds per iteration: an ideal code (cg ... p(l)-cg), then this package's loops",
             f"{'ranks':>7s} {'cg':>10s} {'cg-single':>10s} {'p-cg':>10s} {'p(l)-cg':>10s} {'best l':>6s} "
             f"{'p(l)-cg / cg':>12s}" + "".join(f" {name:>15s}" for name in ours)]
    for r in rows:
        lines.append(f"{r['ranks']:7d} {r['cg'] * 1e6:10.2f} {r['cg-single'] * 1e6:10.2f} {r['p-cg'] * 1e6:10.2f} "
                     f"{r['p(l)-cg'] * 1e6:10.2f} {r['best_depth']:6d} {r['speedup_plcg_over_cg']:12.2f}" +
                     "".join(f" {r[name] * 1e6:15.2f}" for name in ours))
    for (slow, fast), p in crossovers(rows).items():
        lines.append(f"{fast} faster than {slow}: " + (f"from {p} ranks" if p else "not up to the largest rank count"))
    return "\n".join(lines)


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


RATE_SIZES = (256, 1024, 4096, 16384, 65536)   # local unknowns at which calibrate() measures the costs, with n^2


def calibrate(comm=None, n=1000, repeat=10, loops=True):
    """Measure this machine's costs: SpMV and vector streaming at a few local sizes on this
    process, the communication on ``comm`` (at least 2 ranks; else the latency terms stay
    0), and (``loops``) what this package's loops (PACKAGE) take there of their own
    (:func:`loop_costs`).  Collective."""
    from mpi4py import MPI
    import pipekrylov as pk
    from .kernels import fused_kernel
    from .matrix import poisson2d
    comm = MPI.COMM_WORLD if comm is None else comm
    # a solver's vector work: fused updates over its eight or so vectors, with the matrix in
    # the cache beside them (a working set of one vector would stay in a cache theirs leaves)
    update = fused_kernel(["x = x + alpha*p", "r = r - alpha*q", "u = u - alpha*s", "w = w - alpha*z"],
                          scalars=["alpha"])
    ACCESSES = 12

    def best(f, rounds):
        f()
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            f()
            times.append(time.perf_counter() - t)
        return min(times)

    def timings(side, rounds):
        """(one SpMV, one fused update) of 2D Poisson side x side, and the matrix.  The SpMV
        as the compiled loop runs it (its own clock around each, in a solve: no call from
        Python, which costs more than the SpMV at small sizes and more for the diagonal
        runs' kernel than for plain CSR's), or, where the compiled loop cannot run, timed
        from Python (its call's cost taken off below); the update timed from Python after
        an SpMV, as in an iteration."""
        A = poisson2d(MPI.COMM_SELF, side)
        vectors = {name: np.ones(A.shape[0]) for name in "xrpqusvwz"}
        x, y, b = vectors["v"], vectors["p"], np.ones(A.shape[0])

        def in_loop():
            result = pk.cg(A, b, rtol=0.0, maxiter=max(2, rounds // 10), M="jacobi", comm=MPI.COMM_SELF)
            if result.loop != "compiled":
                return None
            return result.timings["spmv"] / max(1, result.timings["spmv_count"])

        def from_python():
            update(vectors, {"alpha": 1e-9})
            t = time.perf_counter()
            A.matvec(x, y)
            return time.perf_counter() - t

        def after_spmv(work):
            A.matvec(x, y)
            t = time.perf_counter()
            work()
            return time.perf_counter() - t
        spmv = [in_loop() for _ in range(3)] if side > 2 else [None]
        return ((min(spmv), False) if None not in spmv else (min(from_python() for _ in range(rounds)), True),
                min(after_spmv(lambda: update(vectors, {"alpha": 1e-9})) for _ in range(rounds)), A)

    # a call from Python costs what a compiled loop does not pay: measured on a 2 x 2 grid,
    # taken off every size's time of the kernels timed from Python
    (spmv_call, _), vector_call, _ = timings(2, 2000)
    rates = []
    for local in RATE_SIZES + (n * n,):
        rounds = max(repeat, min(2000, 10 ** 7 // (5 * local)))   # small sizes: many rounds, the best kept
        (spmv, from_python), vector, A = timings(int(round(math.sqrt(local))), rounds)
        spmv = max(spmv - spmv_call, 0.0) if from_python else spmv
        rates.append((A.shape[0], spmv / A.nnz, max(vector - vector_call, 0.0) / (ACCESSES * A.shape[0])))
    latency = per_level = halo = overhead = blocking = 0.0
    if comm.Get_size() > 1:
        try:
            costs = communication_costs(comm)
            latency, overhead, halo, blocking = costs.reduction, costs.overhead, costs.halo, costs.blocking
        except RuntimeError as exc:    # on every rank alike: no MPI library for compiled code
            buf, out = np.ones(3), np.empty(3)
            comm.Barrier()
            latency = comm.allreduce(best(lambda: comm.Allreduce(buf, out), 200), op=MPI.MAX)
            halo = latency / 2          # one message each way versus a tree of messages
            if comm.Get_rank() == 0:
                print(f"calibrate: the communication not measured from compiled code ({exc}); the reduction "
                      "is the best time of a blocking Allreduce from Python, its overhead taken as 0",
                      flush=True)
    machine = Machine("here", rates[-1][1], rates[-1][2], latency, per_level, halo,
                      source=f"calibrate() on {comm.Get_size()} ranks at {time.strftime('%Y-%m-%d')}",
                      reduction_overhead=overhead, blocking_latency=blocking, rates=tuple(rates))
    if loops:
        comm.Barrier()   # under mpiexec -n p: every rank measures while the others do
        fixed, kernels = loop_costs(machine, [r[0] for r in rates])
        machine = replace(machine, fixed=fixed, kernels=kernels)
    return machine


def loop_costs(machine, sizes, passes=3):
    """``(fixed, kernels)``: what this package's loops (PACKAGE) take of their own on one
    rank, as :class:`Machine` holds it.  At each local size of ``sizes`` (2D Poisson,
    Jacobi), a loop's time per iteration (the difference of two solves, :mod:`.timing`)
    less the SpMV and Jacobi ``machine`` models there is its own time R: its vector
    kernels, calls and bookkeeping.  p(l)-CG runs at depths 1 and 2: R(2) - R(1) is one
    level pass (``"p(l)-cg <loop> level"``), R(1) less it the rest.  Each R is split into
    a fixed cost per iteration F, its line's intercept through the two smallest sizes
    (within 0 and R there), and (R - F) / local at each size.  Each time is the median of
    ``passes`` measurements, the sizes in turn between them (at a few hundred unknowns
    one measurement differs from the next by 10-20%, the state of the caches and of the
    allocator as it falls).  Local to this process."""
    from mpi4py import MPI
    import pipekrylov as pk
    from .timing import PLCG, per_iteration, poisson
    pcg = pk.pipelined("cg")
    run = dict(rtol=0.0, M="jacobi", comm=MPI.COMM_SELF)
    measured = {}
    for _ in range(passes):
        for local in sizes:
            A, b = poisson(MPI.COMM_SELF, local)
            funcs = {"cg compiled": lambda k: pk.cg(A, b, maxiter=k, loop="compiled", **run).iterations,
                     "p-cg compiled": lambda k: pcg(A, b, maxiter=k, loop="compiled", **run).iterations,
                     "p-cg python": lambda k: pcg(A, b, maxiter=k, loop="python", **run).iterations}
            for depth in (1, 2):
                for loop in ("compiled", "python"):
                    funcs[f"p({depth})-cg {loop}"] = lambda k, loop=loop, depth=depth: pk.plcg(
                        A, b, maxiter=k, loop=loop, **run, **dict(PLCG, depth=depth)).iterations
            work = local_work(machine, A.shape[0], A.nnz)
            # 8 and 30 iterations: at 256 unknowns p-CG reaches rounding (and stops) after about 37.
            # From 10^5 unknowns an iteration takes milliseconds, and 8 between the solves are
            # enough (22 there took most of the calibration's time); the shorter solve stays
            # above p(l)-CG's first 2l iterations, which are not like the others
            n1, n2 = (8, 30) if A.shape[0] < 100_000 else (6, 14)
            for key, value in per_iteration(MPI.COMM_SELF, funcs, n1, n2, repeat=3, budget=0.5 / passes).items():
                if value is not None:
                    measured.setdefault(key, {}).setdefault(A.shape[0], []).append(value[0] - work)
    own = {key: {m: float(np.median(values)) for m, values in points.items()} for key, points in measured.items()}
    fixed, kernels = {}, {}

    def split(key, points):
        """F and the per-unknown costs of one loop's own times ``{local: R}``; the R each
        gives back at the measured sizes (F + its cost there: R, or F where R < F)."""
        if len(points) < 2:
            return {}
        (m1, r1), (m2, r2) = sorted(points.items())[:2]
        fixed[key] = float(np.clip(r1 - m1 * (r2 - r1) / (m2 - m1), 0.0, max(0.0, min(r1, r2))))
        kernels[key] = tuple((m, max(r - fixed[key], 0.0) / m) for m, r in sorted(points.items()))
        return {m: fixed[key] + cost * m for m, cost in kernels[key]}
    for loop in ("compiled", "python"):
        one, two = own.pop(f"p(1)-cg {loop}", {}), own.pop(f"p(2)-cg {loop}", {})
        both = sorted(set(one) & set(two))
        # the level pass first, then the base as what depth 1 leaves of it (so that the
        # two give back depth 1 where the level pass was clipped at 0)
        level = split(f"p(l)-cg {loop} level", {m: two[m] - one[m] for m in both})
        split(f"p(l)-cg {loop}", {m: one[m] - level[m] for m in level})
    for key, points in own.items():
        split(key, points)
    return fixed, kernels


@dataclass(frozen=True)
class Communication:
    """What communication costs a rank, in seconds (the slowest rank's medians)."""
    reduction: float    # G: a nonblocking Allreduce of a few doubles, waited for at once
    overhead: float     # o: of it, the processor's own time, which no overlap hides
    halo: float         # an exchange of a halo with the neighbouring ranks
    blocking: float     # a blocking Allreduce of a few doubles (the classic methods')


def communication_costs(comm, halo=64, repeat=200, hold=None):
    """Measure :class:`Communication` on ``comm`` (at least 2 ranks) from compiled code, as
    the compiled loops communicate: ``MPI_Iallreduce`` (which Open MPI 4.1 completes in
    two rounds of messages where its blocking Allreduce takes one: over TCP 8 against 5.5
    us here), and an exchange of ``halo`` doubles with each neighbour on persistent
    requests, started and completed together, as a DistributedCSR's halo.

    The overhead o is the processor time of a reduction left to itself for ``hold``
    seconds (by default 3 G + 2 us) but for one ``MPI_Test`` halfway, as the halo's MPI
    calls advance it in a loop: its start, the test and its completion.  Over shared
    memory a fraction of a microsecond; over TCP on one machine most of G (the kernel's
    network stack runs on the ranks' own cores).  Meant for 2 ranks with a core each:
    with more ranks the later rounds of the reduction advance only in the wait, and
    oversubscribed ranks wait to be scheduled, so o is then an upper bound.  ``halo``,
    ``repeat`` and ``hold`` must be the same on every rank.  Collective."""
    from mpi4py import MPI
    from .kernels.compile import compile_for
    from .parallel import native
    from .parallel.errors import collective_check
    from .runtime.probe import communication
    rank, size = comm.Get_rank(), comm.Get_size()
    handles = native.handles([MPI.DOUBLE, MPI.SUM, comm])
    request, flag, status = native.handles([MPI.REQUEST_NULL]), np.zeros(1, np.int32), native.status_buffer()
    out = np.zeros((repeat, 4))
    persistent = []

    def arguments(phase, seconds):
        return (np.ones(3), np.zeros(3), halo_requests, halo_status, handles, request, flag, status, phase,
                seconds, out)
    try:
        with collective_check(comm, "communication_costs"):
            if len(set(comm.allgather((halo, repeat, hold)))) > 1:
                raise ValueError("communication_costs: halo, repeat and hold differ between the ranks")
            # the halo as a DistributedCSR exchanges it: a receive and a send with each neighbour
            for other in sorted({(rank + 1) % size, (rank - 1) % size} - {rank}):
                persistent += [comm.Recv_init(np.zeros(halo), other, tag=78),
                               comm.Send_init(np.ones(halo), other, tag=78)]
            halo_requests, halo_status = native.handles(persistent), native.status_buffer(len(persistent))
            kernel = compile_for(communication, arguments(0, 0.0))

        def run(phase, seconds):
            comm.Barrier()
            error = comm.allreduce(int(kernel(*arguments(phase, seconds))), op=MPI.MAX)
            if error:
                raise RuntimeError(f"communication_costs: MPI error code {error} on at least one rank")
            medians = np.empty(4)
            comm.Allreduce(np.median(out, axis=0), medians, op=MPI.MAX)
            return medians
        reduction, _, exchange, blocking = run(0, 0.0)
        overhead = run(1, 3 * reduction + 2e-6 if hold is None else hold)[1]
    finally:
        for r in persistent:
            r.Free()
    return Communication(float(reduction), float(overhead), float(exchange), float(blocking))
