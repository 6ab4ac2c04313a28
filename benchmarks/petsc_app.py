"""A PETSc C application on our KSP against PETSc's own, time per iteration:

    python -m benchmarks.petsc_app                       # 1 and 2 ranks, 1,024-16,384 per rank
    python -m benchmarks.petsc_app --ranks 2 --sizes 4096 --pc bjacobi

tests/capp/poisson.c (2D Poisson, AIJ, b = 1) is built with mpicc against pkg-config's
PETSc and run with ``-ksp_type pipecg`` and with ``-python <interpreter> -ksp_type python
-ksp_python_type pipekrylov.petsc.PipeCG`` (and cg / CG), rtol 1e-8, ``-solves k``: the
best of k KSPSolve calls from x = 0 (the first one loads or compiles the loop) over the
iterations of one solve.  The set-up (KSPSetUp, the matrix conversion) is outside the
timed calls for both; everything inside KSPSolve is timed: for ours the Python entry,
the arguments' checks, the compiled loop and the handing back.
"""
import argparse
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile

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


def run(exe, ranks, n, options, solves):
    command = [shutil.which("mpiexec"), "-n", str(ranks), *exports(), exe, "-n", str(n),
               "-ksp_rtol", "1e-8", "-solves", str(solves), *options]
    out = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=600)
    if out.returncode:
        raise SystemExit(out.stdout[-2000:] + out.stderr[-2000:])
    its = int(re.search(r"iterations (\d+)", out.stdout).group(1))
    best = float(re.search(r"best solve (\S+) s", out.stdout).group(1))
    return its, best / its


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
        print(f"2D Poisson, {args.pc}, rtol 1e-8; time per iteration = best of {args.solves} KSPSolve "
              f"calls / iterations; CPU: {cpu_name()}")
        print("| ranks | unknowns per rank | PETSc's KSP | iterations | PETSc us/it | ours | iterations "
              "| ours us/it | ours / PETSc |")
        print("|---|---|---|---|---|---|---|---|---|")
        for ranks in args.ranks:
            for size in args.sizes:
                n = round((size * ranks) ** 0.5)
                for theirs, ours in PAIRS:
                    common = ["-pc_type", args.pc]
                    its_p, t_p = run(exe, ranks, n, ["-ksp_type", theirs, "-ksp_norm_type", "unpreconditioned",
                                                     *common], args.solves)
                    its, t = run(exe, ranks, n, ["-python", sys.executable, "-ksp_type", "python",
                                                 "-ksp_python_type", f"pipekrylov.petsc.{ours}", *common],
                                 args.solves)
                    print(f"| {ranks} | {n * n // ranks:,} | {theirs} | {its_p} | {t_p * 1e6:.1f} | {ours} | {its} "
                          f"| {t * 1e6:.1f} | {t / t_p:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
