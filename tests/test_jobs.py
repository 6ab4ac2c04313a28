"""The batch scripts in jobs/ run for real: a strong-scaling study submitted to a
single-node Slurm started for the test, and the collected results checked."""
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from test_parareal_restart import environment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_launcher_with_the_wrong_rank_count_fails_loudly():
    out = subprocess.run(["mpiexec", "-n", "2", sys.executable, "-m", "pipekrylov", "solve",
                          "--problem", "poisson2d:20", "--expect-ranks", "3"], env=environment(),
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "2 rank(s), 3 were requested" in out.stderr


def test_scaling_script_refuses_more_ranks_than_allocated(tmp_path):
    out = subprocess.run(["bash", "jobs/scaling.sh"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(environment(), TASKS="2", RANKS="1 4", RESULTS=str(tmp_path)),
                         timeout=60)
    assert out.returncode == 2 and "only 2 tasks" in out.stderr


@pytest.fixture
def slurm(tmp_path):
    """A single-node Slurm for this test (tools/slurm_local.sh); stopped afterwards."""
    if shutil.which("sbatch") is None or shutil.which("slurmctld") is None:
        pytest.skip("Slurm is not installed (make test installs it on Debian as root)")
    if os.geteuid() != 0:
        pytest.skip("the test Slurm runs its daemons as root")
    state = tmp_path / "slurm"
    ports = dict(zip(("SLURMCTLD_PORT", "SLURMD_PORT"), map(str, _free_ports(2))))
    start = subprocess.run(["bash", "tools/slurm_local.sh", "start", str(state)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, **ports))
    try:
        assert start.returncode == 0, start.stdout + start.stderr + _logs(state)
        env = dict(environment(), SLURM_CONF=str(state / "slurm.conf"))
        yield env, state
    finally:
        subprocess.run(["bash", "tools/slurm_local.sh", "stop", str(state)], cwd=ROOT, timeout=60)


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _logs(state):
    return "".join(f"\n--- {p}\n{p.read_text()[-2000:]}" for p in sorted(state.glob("*.log")))


def test_slurm_batch_script_runs_a_scaling_study(slurm, tmp_path):
    env, state = slurm
    results = tmp_path / "results"
    log = tmp_path / "job.out"
    env.update(RANKS="1 2", METHODS="cg p-cg", PROBLEM="poisson2d:60", RESULTS=str(results))
    out = subprocess.run(["sbatch", "--wait", "--ntasks=2", f"--output={log}",
                          "jobs/slurm_scaling.sbatch"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    text = log.read_text() if log.exists() else ""
    assert out.returncode == 0, out.stdout + out.stderr + text + _logs(state)
    assert "2 tasks on 1 node(s)" in text and "[4/4]" in text
    check_study(results)


def test_pbs_batch_script_runs_a_scaling_study(tmp_path):
    """No PBS server here: the script runs as a PBS MoM starts it, a copy in its spool
    run from the home directory, in the environment it sets (PBS_O_WORKDIR, PBS_NODEFILE
    with one line per MPI rank, PBS_JOBID), with its default launcher (mpirun on the
    node file)."""
    results = tmp_path / "results"
    spool = tmp_path / "spool"
    spool.mkdir()
    script = shutil.copy(os.path.join(ROOT, "jobs", "pbs_scaling.pbs"), spool / "4711.pbs-server.SC")
    nodefile = tmp_path / "nodes"
    nodefile.write_text("localhost\nlocalhost\n")
    env = dict(environment(), PBS_O_WORKDIR=ROOT, PBS_NODEFILE=str(nodefile), PBS_JOBID="4711.pbs-server",
               METHODS="cg p-cg", PROBLEM="poisson2d:60", RESULTS=str(results))
    out = subprocess.run(["bash", str(script)], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    check_study(results)
    outside = subprocess.run(["bash", str(script)], cwd=ROOT, capture_output=True, text=True,
                             env=dict(environment(), PBS_O_WORKDIR=ROOT), timeout=60)
    assert outside.returncode != 0 and "not inside a PBS job" in outside.stderr


def check_study(results):
    """A study at 1 and 2 ranks of CG and p-CG: records, table, plot."""
    records = [json.loads(line) for line in (results / "records.jsonl").read_text().splitlines()]
    assert sorted((r["method"], r["ranks"]) for r in records) == [
        ("cg", 1), ("cg", 2), ("p-cg", 1), ("p-cg", 2)]
    assert all(r["info"] == 0 and r["true_residual"] < 1e-7 for r in records)
    iterations = {r["method"]: set() for r in records}
    for r in records:
        iterations[r["method"]].add(r["iterations"])
    assert all(max(its) - min(its) <= 1 for its in iterations.values())   # same solve at 1 and 2 ranks
    rows = json.loads((results / "scaling.json").read_text())
    assert len(rows) == 4 and all(row["speedup"] > 0 for row in rows)
    assert [row["efficiency"] for row in rows if row["ranks"] == 1] == [1.0, 1.0]
    png = (results / "scaling.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20000
    assert (results / "scaling.csv").read_text().startswith("series,")
