"""A C PETSc application switches to pipekrylov's solvers with command-line options.

tests/capp/poisson.c is compiled here with mpicc against the installed PETSc, then run
serially and on 2 ranks with ``-python <interpreter> -ksp_type python -ksp_python_type
pipekrylov.petsc.<Name>`` and, for comparison, with PETSc's own KSP.
"""
import os
import re
import shutil
import site
import subprocess
import sys

import pytest

from helpers import SPD, load

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


PROBE = r"""
#include <petscsys.h>
int main(int argc, char **argv)
{
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length;
  PetscCall(PetscInitialize(&argc, &argv, NULL, NULL));
  MPI_Get_library_version(version, &length);
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "%s\n", version));
  PetscCall(PetscFinalize());
  return 0;
}
"""


def mpi_family(version):
    """'Open MPI', 'MPICH', ... from an MPI_Get_library_version string."""
    first = version.strip().splitlines()[0] if version.strip() else ""
    return "Open MPI" if first.startswith("Open MPI") else first.split(" ")[0]


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """tests/capp/poisson.c built with the mpicc on PATH against pkg-config's PETSc; skips
    unless that pair builds and runs on the MPI that mpi4py (so the embedded Python) uses."""
    pytest.importorskip("petsc4py", reason="the C application embeds Python with petsc4py")
    from mpi4py import MPI
    mpicc, pkgconfig = shutil.which("mpicc"), shutil.which("pkg-config")
    if not mpicc or not pkgconfig or subprocess.run([pkgconfig, "--exists", "PETSc"]).returncode:
        pytest.skip("needs mpicc and PETSc's pkg-config file")
    flags = subprocess.run([pkgconfig, "--cflags", "--libs", "PETSc"], capture_output=True,
                           text=True, check=True).stdout.split()
    folder = tmp_path_factory.mktemp("capp")
    probe = folder / "probe.c"
    probe.write_text(PROBE)
    built = subprocess.run([mpicc, str(probe), "-o", str(folder / "probe"), *flags], capture_output=True, text=True)
    if built.returncode:
        pytest.skip(f"PETSc ({pkgconfig} PETSc) does not build with {mpicc}: {built.stderr.strip()[-300:]}")
    ran = subprocess.run([str(folder / "probe")], capture_output=True, text=True, timeout=60, env=app_environment())
    theirs, ours = mpi_family(ran.stdout), mpi_family(MPI.Get_library_version())
    if ran.returncode or theirs != ours:
        pytest.skip(f"PETSc's C build runs on {theirs or 'no MPI it could start'}, mpi4py on {ours}: "
                    "the C application and the Python it embeds must share one MPI")
    exe = str(folder / "poisson")
    subprocess.run([mpicc, os.path.join(HERE, "capp", "poisson.c"), "-o", exe, *flags], check=True)
    return exe


def app_environment():
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    # the Python PETSc embeds does not see the venv: put it and the package on PYTHONPATH
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *site.getsitepackages(), env.get("PYTHONPATH", "")])
    for key in [k for k in env if k.startswith(("OMPI_MCA_orte", "OMPI_MCA_ess", "PMIX_", "OMPI_COMM"))]:
        del env[key]  # this test may itself run inside an MPI singleton
    return env


def run(app, ranks, options):
    env = app_environment()
    from mpi4py import MPI
    # Open MPI's mpiexec passes on only the variables it is told to; MPICH's passes all
    export = ["-x", "PYTHONPATH"] if mpi_family(MPI.Get_library_version()) == "Open MPI" else []
    command = [shutil.which("mpiexec"), "-n", str(ranks), *export, app, "-n", "40",
               "-ksp_rtol", "1e-8", "-ksp_converged_reason", *options]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    found = re.search(r"iterations (\d+) reason (-?\d+) relative residual (\S+)", out.stdout)
    return int(found.group(1)), int(found.group(2)), float(found.group(3)), out.stdout


PYTHON = ["-python", sys.executable]
CASES = [("PipeCG", "pipecg"), ("CG", "cg"), ("PipeBiCGStab", "pipebcgs")]


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("ours,theirs", CASES, ids=[c[0] for c in CASES])
def test_c_application_runs_our_ksp(app, ranks, ours, theirs):
    side = ["-ksp_pc_side", "right"] if "bcgs" in theirs else []
    its_p, reason_p, res_p, _ = run(app, ranks, ["-ksp_type", theirs, "-pc_type", "jacobi",
                                                 "-ksp_norm_type", "unpreconditioned", *side])
    its, reason, res, out = run(app, ranks, [*PYTHON, "-ksp_type", "python", "-ksp_python_type",
                                             f"pipekrylov.petsc.{ours}", "-pc_type", "jacobi", "-ksp_monitor",
                                             "-ksp_view"])
    assert reason == 2 and reason_p == 2
    assert "preconditioner applied: jacobi" in out
    assert "last solve's loop: compiled" in out   # CG and the derived methods, on PETSc's AIJ
    assert abs(its - its_p) <= max(3, 0.05 * its_p), (its, its_p)
    assert res < 1e-8 and res_p < 1e-8
    monitor = [line for line in out.splitlines() if "KSP Residual norm" in line]
    assert len(monitor) == its + 1 and monitor[0].strip().startswith("0 KSP Residual norm")
    assert "CONVERGED_RTOL" in out and "Traceback" not in out


# The SPD matrices of tests/data through the C program (MatLoad of a PETSc binary file);
# bcsstk15 with bjacobi is left out: PETSc's ILU(0) blocks are indefinite there and both
# PETSc's CG and ours stop with DIVERGED_INDEFINITE_PC (tests/test_petsc_ksp.py).
MATRIX_CASES = [(name, "jacobi") for name in SPD] + [("494_bus", "bjacobi"), ("1138_bus", "bjacobi")]


@pytest.fixture(scope="module")
def binaries(tmp_path_factory):
    from pipekrylov.matrix import write_petsc_binary
    folder = tmp_path_factory.mktemp("matrices")
    paths = {}
    for name in SPD:
        paths[name] = str(folder / f"{name}.petsc")
        write_petsc_binary(paths[name], load(name))
    return paths


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("name,pc", MATRIX_CASES)
def test_c_application_on_real_matrices(app, binaries, ranks, name, pc):
    common = ["-f", binaries[name], "-pc_type", pc, "-ksp_max_it", "20000"]
    its_p, reason_p, res_p, _ = run(app, ranks, ["-ksp_type", "pipecg", "-ksp_norm_type",
                                                 "unpreconditioned", *common])
    its, reason, res, out = run(app, ranks, [*PYTHON, "-ksp_type", "python", "-ksp_python_type",
                                             "pipekrylov.petsc.PipeCG", *common])
    assert reason == 2 and reason_p == 2, out[-500:]
    assert abs(its - its_p) <= max(3, 0.05 * its_p), (its, its_p)
    assert res < 1e-8 * 1.01 and res_p < 1e-8 * 1.01
