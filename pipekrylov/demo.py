"""``make demo``: where pipelining wins, and why, in one picture and one table.

One MPI job on 2 ranks (started here with ``mpiexec``) measures time per iteration (the
difference of two solves, :mod:`pipekrylov.timing`; compilation excluded) of 2D Poisson
with Jacobi:

* against the unknowns per rank (256 to 65,536), as the machine is: our CG, p-CG and
  p(2)-CG on the compiled loop, and PETSc's cg and pipecg where petsc4py is installed.  Where the local work is small, the reduction's latency and each
  code's fixed cost per iteration decide;
* against a reduction latency injected into our solvers (0 to 500 us, as the Allreduce
  of a machine of thousands of nodes takes), at 4,096 unknowns per rank.  CG waits for
  two reductions per iteration, p-CG hides one behind its SpMV and preconditioner, p(2)-CG
  spreads one over two iterations: past a crossover latency p-CG is the faster;
* and time per *solve* as users make them: 100 backward Euler steps of the heat equation,
  each a solve of about 10 iterations warm-started from the last step, our solvers with
  default arguments through a :class:`~pipekrylov.Solver` set up once against PETSc's on
  a KSP set up once (:mod:`pipekrylov.timing`; set-up not timed, nothing else subtracted).

It prints the table and writes ``demo.png``, ``demo.json`` and ``demo.csv`` to the output
folder.
"""
import json
import os
import shutil
import subprocess
import sys
import time

from .parallel.commandline import output_errors

__all__ = ["main"]

SIZES = (256, 1024, 4096, 16384, 65536)
STEP_SIZES = (256, 1024, 4096, 16384)
STEP_ITERATIONS = 10   # per time step, about (the time step is chosen for it)
LATENCIES = (0.0, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6)
LATENCY_SIZE = 4096
RANKS = 2
OURS = ("CG", "p-CG", "p(2)-CG")
PETSC = ("PETSc cg", "PETSc pipecg")


# ------------------------------------------------------------------ the MPI job
def _ours(latency):
    import pipekrylov as pk
    from .timing import PLCG
    pcg = pk.pipelined("cg")
    common = dict(rtol=0.0, M="jacobi", latency=latency)
    return {"CG": lambda A, b, n: pk.cg(A, b, maxiter=n, **common).iterations,
            "p-CG": lambda A, b, n: pcg(A, b, maxiter=n, **common).iterations,
            "p(2)-CG": lambda A, b, n: pk.plcg(A, b, maxiter=n, **PLCG, **common).iterations}


def _problem(comm, local):
    import pipekrylov as pk
    from .timing import poisson
    A, b = poisson(comm, local * comm.size)
    # n2 below the iterations p-CG takes to reach rounding (rtol 0 would stop it there)
    reach = pk.pipelined("cg")(A, b, rtol=0.0, maxiter=400, M="jacobi").iterations
    n2 = max(8, min(100, int(0.8 * reach)))
    return A, b, max(2, n2 // 4), n2


def worker(quick=False):
    """Measure every point (``quick``: two of each panel, one round: a check that the
    demo runs, not a measurement); rank 0 prints one JSON row per point."""
    from mpi4py import MPI
    from .timing import per_iteration, petsc_solver
    comm = MPI.COMM_WORLD
    try:
        import petsc4py  # noqa: F401 - PETSc's rows only where it is installed
        with_petsc = True
    except ImportError:
        with_petsc = False

    def emit(row, measured):
        for name, value in measured.items():
            row[name] = None if value is None else value[0] * 1e6
        if comm.rank == 0:
            print("ROW " + json.dumps(row), flush=True)

    sizes, latencies, repeat = (SIZES[:2], LATENCIES[::3], 1) if quick else (SIZES, LATENCIES, 3)
    budget = 0.0 if quick else 0.5
    for local in sizes:
        A, b, n1, n2 = _problem(comm, local)
        funcs = {name: (lambda f: lambda n: f(A, b, n))(f) for name, f in _ours(0.0).items()}
        if with_petsc:
            funcs.update({name: petsc_solver(A, b, name.split()[1]) for name in PETSC})
        emit({"panel": "size", "local": local, "latency_us": 0.0},
             per_iteration(comm, funcs, n1, n2, repeat=repeat, budget=budget))
    A, b, n1, n2 = _problem(comm, SIZES[0] if quick else LATENCY_SIZE)
    for latency in latencies:
        funcs = {name: (lambda f: lambda n: f(A, b, n))(f) for name, f in _ours(latency).items()}
        emit({"panel": "latency", "local": LATENCY_SIZE, "latency_us": latency * 1e6},
             per_iteration(comm, funcs, n1, n2, repeat=max(1, repeat - 1), budget=budget))
    for local in STEP_SIZES[:2] if quick else STEP_SIZES:
        step_row(comm, local, 20 if quick else 100, 1 if quick else 3, with_petsc)


def step_row(comm, local, steps, repeat, with_petsc):
    """Time per backward Euler step (:func:`pipekrylov.timing.time_steps`) of our solvers
    through a Solver and of PETSc's cg and pipecg; rank 0 prints the row."""
    from .timing import calibrate_dt, heat, petsc_steppers, steppers, time_each
    total = local * comm.size
    c = calibrate_dt(comm, total, STEP_ITERATIONS)
    A, u0 = heat(comm, total, c)
    ours = steppers(A, u0, "jacobi")
    funcs = {"CG": ours["cg Solver"], "p-CG": ours["p-cg Solver"], "p(2)-CG": ours["p(2)-cg Solver"]}
    if with_petsc:
        funcs.update({k: f for k, f in petsc_steppers(A, u0, "jacobi").items() if k in PETSC})
    row = time_each(comm, funcs, u0, steps, repeat, {"panel": "step", "local": local, "latency_us": 0.0})
    if comm.rank == 0:
        print("ROW " + json.dumps(row), flush=True)


# ------------------------------------------------------------------ the driver
def main(output="results/demo", quick=False):
    """Run the MPI job, print the table, write the picture and the records."""
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        raise SystemExit("demo: no mpiexec on PATH (make demo sets up the environment)")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", NUMBA_NUM_THREADS="1")
    env.setdefault("HYDRA_IFACE", "lo")   # MPICH: its proxies meet over loopback (a chroot may not resolve the host)
    command = [mpiexec, "-n", str(RANKS), sys.executable, "-m", "pipekrylov.demo", "--worker"] + ["--quick"] * quick
    print(f"demo: {' '.join(command[:3])} ... (half a minute; compiling excluded from every timing)", flush=True)
    t0 = time.perf_counter()
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        print(out.stdout[-3000:], out.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"demo: {' '.join(command)} failed (exit {out.returncode})")
    rows = [json.loads(line[4:]) for line in out.stdout.splitlines() if line.startswith("ROW ")]
    print(table(rows))
    paths = [os.path.join(output, name) for name in ("demo.json", "demo.csv", "demo.png")]
    with output_errors(output):
        write_records(rows, paths)
    for path in paths:
        print("wrote", path)
    print(f"demo: {time.perf_counter() - t0:.0f} s")
    return 0


def write_records(rows, paths):
    """The rows as JSON and CSV, and the picture."""
    os.makedirs(os.path.dirname(paths[0]), exist_ok=True)
    with open(paths[0], "w") as f:
        json.dump(rows, f, indent=1)
    names = [n for n in OURS + PETSC if any(n in r for r in rows)]
    with open(paths[1], "w") as f:
        f.write(",".join(["panel", "unknowns_per_rank", "latency_us"] + [f"{n} us" for n in names]) + "\n")
        for r in rows:
            f.write(",".join([r["panel"], str(r["local"]), f"{r['latency_us']:g}"] +
                             ["" if r.get(n) is None else f"{r[n]:.3f}" for n in names]) + "\n")
    plot(rows, paths[2])


CROSSOVERS = (("CG", "p-CG"), ("p-CG", "p(2)-CG"))


def crossover(rows, slow, fast):
    """The injected latency (us) from which ``fast`` stays faster per iteration than
    ``slow`` (interpolated between the measured points): 0 if it is faster at every
    latency measured, None if it is not at the largest."""
    points = [(r["latency_us"], r.get(slow), r.get(fast)) for r in rows if r["panel"] == "latency"]
    points = [(L, s - f) for L, s, f in points if s is not None and f is not None]
    if not points or points[-1][1] <= 0:
        return None
    k = max((j for j, (_, d) in enumerate(points) if d <= 0), default=-1)
    if k < 0:
        return 0.0
    (L0, d0), (L1, d1) = points[k], points[k + 1]
    return L0 + (L1 - L0) * (-d0) / (d1 - d0)


def _crossover_text(L, slow, fast):
    if L is None:
        return f"{fast} is not faster than {slow} at the largest latency measured"
    if L == 0:
        return f"{fast} is faster than {slow} at every latency measured"
    return f"{fast} is faster than {slow} from an Allreduce latency of about {L:.0f} us"


def table(rows):
    from .compare import markdown_table
    names = [n for n in OURS + PETSC if any(n in r for r in rows)]

    def us(v):
        return "-" if v is None else f"{v:.1f}"
    lines = [f"Time per iteration (us), 2D Poisson, Jacobi, {RANKS} ranks; ours on the compiled loop"]
    size = [[f"{r['local']:,}"] + [us(r.get(n)) for n in names] for r in rows if r["panel"] == "size"]
    lines += ["", "as the machine is, against the unknowns per rank:",
              markdown_table(["unknowns per rank"] + names, size)]
    lat = [[f"{r['latency_us']:g}"] + [us(r.get(n)) for n in OURS] for r in rows if r["panel"] == "latency"]
    local = next((r["local"] for r in rows if r["panel"] == "latency"), LATENCY_SIZE)
    lines += ["", f"with an injected reduction latency, {local:,} unknowns per rank:",
              markdown_table(["latency (us)"] + list(OURS), lat)]
    lines.append("")
    lines += [_crossover_text(crossover(rows, slow, fast), slow, fast) + "." for slow, fast in CROSSOVERS]
    step = [[f"{r['local']:,}", f"{r.get('CG its', 0):.1f}"] + [us(r.get(n)) for n in names] +
            [_ratio(r.get("p-CG"), r.get("PETSc pipecg")), _ratio(r.get("CG"), r.get("PETSc cg"))]
            for r in rows if r["panel"] == "step"]
    if step:
        lines += ["", f"time per backward Euler step (us), about {STEP_ITERATIONS} iterations each, default "
                  "arguments, a Solver (ours) or a KSP (PETSc's) set up once:",
                  markdown_table(["unknowns per rank", "its/step"] + names + ["p-CG / pipecg", "CG / PETSc cg"], step)]
    return "\n".join(lines)


def _ratio(a, b):
    return "-" if a is None or not b else f"{a / b:.2f}"


def _by_size(ax, rows, style):
    """Each series of ``rows`` against unknowns per rank, log-log."""
    for name, (color, fmt) in style.items():
        points = [(r["local"], r[name]) for r in rows if r.get(name) is not None]
        if points:
            ax.loglog(*zip(*points), fmt, color=color, label=name, markersize=4)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    style = {"CG": ("C0", "o-"), "p-CG": ("C3", "o-"), "p(2)-CG": ("C2", "s:"),
             "PETSc cg": ("C0", "x--"), "PETSc pipecg": ("C3", "x--")}
    fig, (left, right, third) = plt.subplots(1, 3, figsize=(17, 4.8))
    _by_size(left, [r for r in rows if r["panel"] == "size"], style)
    left.set_xlabel("unknowns per rank")
    left.set_ylabel("time per iteration (us)")
    left.set_title(f"as the machine is ({RANKS} ranks, shared memory)")
    lat = [r for r in rows if r["panel"] == "latency"]
    for name in OURS:
        color, fmt = style[name]
        points = [(r["latency_us"], r[name]) for r in lat if r.get(name) is not None]
        if points:
            right.plot(*zip(*points), fmt, color=color, label=name, markersize=4)
    top = right.get_ylim()[1]
    for k, (slow, fast) in enumerate(CROSSOVERS):
        L = crossover(rows, slow, fast)
        if L:   # a crossover inside the range measured
            right.axvline(L, color="gray", lw=0.8)
            right.annotate(f"{fast} faster than {slow}\nfrom {L:.0f} us", (L, top * (0.92 - 0.15 * k)),
                           xytext=(5, 0), textcoords="offset points", fontsize=8, color="dimgray", va="top")
    right.set_xlabel("reduction latency injected (us)")
    right.set_ylabel("time per iteration (us)")
    local = lat[0]["local"] if lat else LATENCY_SIZE
    right.set_title(f"a large machine's reductions ({local:,} unknowns per rank)")
    _by_size(third, [r for r in rows if r["panel"] == "step"], style)
    third.set_xlabel("unknowns per rank")
    third.set_ylabel("time per solve (us)")
    third.set_title(f"whole solves: a backward Euler step, ~{STEP_ITERATIONS} iterations")
    for ax in (left, right, third):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=9)
    fig.suptitle("make demo: CG, p-CG and p(2)-CG on the compiled loop, 2D Poisson and heat with Jacobi")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    worker(quick="--quick" in sys.argv)   # the MPI job main() starts
