"""The command line and the local job script, as a user runs them."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def clean_env():
    """The environment for a command a user runs: no MPI singleton's variables, and this
    Python's bin/ first on PATH, as an activated environment has it (its python3, and the
    mpiexec the mpich wheel puts there)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_MCA_orte", "OMPI_MCA_ess", "PMIX_", "OMPI_COMM"))}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def test_local_job_script_solves_on_two_ranks():
    out = subprocess.run([os.path.join(ROOT, "jobs", "local.sh"), "2", "p-bicgstab", "convection_diffusion2d:40"],
                         capture_output=True, text=True, timeout=300, env=clean_env())
    assert out.returncode == 0, out.stderr[-2000:]
    assert "p-bicgstab on convection_diffusion2d:40 (n=1600, 2 ranks): converged_rtol" in out.stdout


def test_solve_command_reports_a_breakdown_with_a_nonzero_exit(tmp_path):
    # an indefinite matrix given to CG: info < 0, exit status 1, the reason printed
    path = tmp_path / "indefinite.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 -1.0\n3 3 2.0\n")
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "solve", "--matrix", str(path), "--method", "cg"],
                         capture_output=True, text=True, timeout=120, env=clean_env())
    assert out.returncode == 1
    assert "diverged_indefinite_mat" in out.stdout


def test_solve_json_record_keeps_the_preconditioner_and_runs_a_deep_pipeline():
    import json
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "solve", "--problem", "poisson2d:30",
                          "--method", "p-cg", "--depth", "3", "--pc", "jacobi", "--json"],
                         capture_output=True, text=True, timeout=120, env=clean_env())
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert record["preconditioner"] == "jacobi" and record["reason"] == "converged_rtol"
    assert record["true_residual"] < 1e-7 and record["pc"] >= 0.0   # "pc" is the PC's time


def test_derive_code_prints_the_kernels_and_the_loop_that_runs():
    """``derive cg --code`` prints the fused kernels and the generated loop: Python source
    that compiles, and that defines the loop the solver runs."""
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "derive", "cg", "--code"],
                         capture_output=True, text=True, timeout=300, env=clean_env())
    assert out.returncode == 0, out.stderr[-2000:]
    loop = out.stdout[out.stdout.index("# ---- the compiled loop"):].split("\n", 1)[1]
    compile(loop, "<derived loop>", "exec")
    assert "def p_cg(" in loop and "start(R, 0" in loop and "wait(R, 0" in loop
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "derive", "cg", "--blocking", "--code"],
                         capture_output=True, text=True, timeout=300, env=clean_env())
    assert out.returncode == 0, out.stderr[-2000:]
    loop = out.stdout[out.stdout.index("# ---- the compiled loop"):].split("\n", 1)[1]
    compile(loop, "<derived loop>", "exec")
    assert "def b_cg(" in loop and "allreduce(R, 0" in loop and "start(R, 0" not in loop


def test_solve_command_runs_gmres_p_gmres_and_s_gmres_compiled_or_interpreted():
    import json
    for method, loop in (("gmres", "compiled"), ("p-gmres", "python"), ("s-gmres", "compiled")):
        s = ["--s", "5"] if method == "s-gmres" else []   # (refused for the others)
        out = subprocess.run([sys.executable, "-m", "pipekrylov", "solve", "--problem", "convection_diffusion2d:20",
                              "--method", method, *s, "--pc", "jacobi", "--loop", loop, "--json"],
                             capture_output=True, text=True, timeout=300, env=clean_env())
        assert out.returncode == 0, out.stderr[-2000:]
        record = json.loads(out.stdout.strip().splitlines()[-1])
        assert record["loop"] == loop and record["reason"] == "converged_rtol", record
        assert record["true_residual"] < 1e-7


def test_solve_command_runs_pipelined_flexible_cg_under_a_changing_preconditioner():
    import json
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "solve", "--problem", "poisson2d:30", "--method", "p-fcg",
                          "--pc", "bjacobi-cg(4)", "--json"], capture_output=True, text=True, timeout=300, env=clean_env())
    assert out.returncode == 0, out.stderr[-2000:]
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert record["loop"] == "compiled" and record["reason"] == "converged_rtol", record
    assert record["preconditioner"] == "bjacobi-cg(4)" and record["true_residual"] < 1e-7
