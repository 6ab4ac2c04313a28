"""A PETSc C application on our KSP against PETSc's own: time per iteration and the
fixed cost of a KSPSolve:

    python -m benchmarks.petsc_app                       # 1 and 2 ranks, 1,024-16,384 per rank
    python -m benchmarks.petsc_app --ranks 2 --sizes 4096 --pc bjacobi

tests/capp/poisson.c (2D Poisson, AIJ, b = 1) is built with mpicc against pkg-config's
PETSc and run with ``-ksp_type pipecg`` and with ``-python <interpreter> -ksp_type python
-ksp_python_type pipekrylov.petsc.PipeCG`` (and cg / CG), ``-solves k -rtols
1e-2,1e-4,1e-6,1e-8``: k rounds of a KSPSolve from x = 0 at each tolerance, the best of
each (the first round loads or compiles the loop).  Time per iteration and fixed cost (what a solve costs besides its
iterations): the slope and the intercept of the least-squares line of solve time against
iterations; the table's iterations are rtol 1e-8's.  The set-up (KSPSetUp, the matrix conversion) is outside the timed
calls for both; everything inside KSPSolve is timed: for ours the Python entry, the
arguments' checks, the compiled loop and the handing back.
"""
import argparse
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile

import numpy as np

from benchmarks.common import cpu_name, mpiexec_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "tests", "capp", "poisson.c")
PAIRS = [("pipecg", "PipeCG"), ("cg", "CG")]


def build(folder):
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "PETSc"], capture_output=True, text=True,
                           check=True).stdout.split()
    exe = os.path.join(folder, "poisson")
    subprocess.run([shutil.which("mpicc"), SOURCE, "-o", exe, *flags], check=True)
    return exe


def environment():
    env = mpiexec_env()
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *site.getsitepackages(), env.get("PYTHONPATH", "")])
    return env


def exports():
    """Open MPI's mpiexec passes on only the variables it is told to; MPICH's passes all.
    (Asked of mpiexec, not of mpi4py: this process only launches, it does not start MPI.)"""
    version = subprocess.run([shutil.which("mpiexec"), "--version"], capture_output=True, text=True).stdout
    return ["-x", "PYTHONPATH"] if "Open MPI" in version or "OpenRTE" in version else []


RTOLS = (1e-2, 1e-4, 1e-6, 1e-8)


def run(exe, ranks, n, options, solves):
    """(iterations at the last of RTOLS, seconds per iteration, fixed seconds per solve)."""
    command = [shutil.which("mpiexec"), "-n", str(ranks), *exports(), exe, "-n", str(n), "-solves", str(solves),
               "-rtols", ",".join(map(str, RTOLS)), *options]
    out = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise SystemExit(out.stdout[-2000:] + out.stderr[-2000:])
    points = np.array(re.findall(r"rtol \S+ iterations (\d+) best (\S+) s", out.stdout), dtype=float)
    per, fixed = np.polyfit(points[:, 0], points[:, 1], 1)
    return int(points[-1, 0]), per, fixed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 16384],
                        help="unknowns per rank (the grid is the nearest square)")
    parser.add_argument("--pc", default="jacobi")
    parser.add_argument("--solves", type=int, default=10)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        exe = build(folder)
        print(f"2D Poisson, {args.pc}; {args.solves} rounds of KSPSolve calls: time per "
              f"iteration (us) and fixed cost per solve (us): slope and intercept over rtol 1e-2 .. 1e-8; CPU: {cpu_name()}")
        print("| ranks | unknowns per rank | PETSc's KSP | iterations | PETSc us/it | PETSc fixed | ours | iterations "
              "| ours us/it | ours fixed | ours / PETSc per it | ours / PETSc fixed |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for ranks in args.ranks:
            for size in args.sizes:
                n = round((size * ranks) ** 0.5)
                for theirs, ours in PAIRS:
                    common = ["-pc_type", args.pc]
                    its_p, t_p, f_p = run(exe, ranks, n, ["-ksp_type", theirs, "-ksp_norm_type", "unpreconditioned",
                                                     *common], args.solves)
                    its, t, f = run(exe, ranks, n, ["-python", sys.executable, "-ksp_type", "python",
                                                 "-ksp_python_type", f"pipekrylov.petsc.{ours}", *common],
                                 args.solves)
                    print(f"| {ranks} | {n * n // ranks:,} | {theirs} | {its_p} | {t_p * 1e6:.1f} | {f_p * 1e6:.1f} "
                          f"| {ours} | {its} | {t * 1e6:.1f} | {f * 1e6:.1f} | {t / t_p:.2f} | {_ratio(f, f_p)} |",
                          flush=True)
    return 0


def _ratio(ours, theirs):
    return f"{ours / theirs:.2f}" if theirs > 0 and ours > 0 else "-"   # an intercept below noise: none


if __name__ == "__main__":
    sys.exit(main())
