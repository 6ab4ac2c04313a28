"""The stencil benchmarks run end to end on a small grid and print every row
docs/performance.md quotes (their figures are measurements, not asserted here)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_benchmark(script, *args):
    out = subprocess.run([sys.executable, "-m", f"benchmarks.{script}", *args],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


def rate(line):
    """A table row's rate: the first number set off by two spaces (the names have none)."""
    return float(re.search(r"\s{2,}(\d+(?:\.\d+)?)", line).group(1))


def test_roofline_benchmark_prints_every_kernel_and_both_speedups():
    out = run_benchmark("stencil_roofline", "--n", "40", "--rounds", "2", "--steps", "4")
    lines = out.splitlines()
    for name in ("numpy reference", "non-blocked sweep (2 threads)", "non-blocked sweep, streaming stores",
                 "pipelined temporal blocking (PipelinedBlocking", "wavefront tiles (WavefrontTiles",
                 "in-core ceiling"):
        row = [line for line in lines if line.startswith(name)]
        assert len(row) == 1, (name, out)
        assert rate(row[0]) > 0, row[0]
    # the speedups from the best rounds and round by round, over each sweep
    assert sum(line.startswith("temporal blocking / non-blocked sweep") for line in lines) == 2
    by_round = [line for line in lines if line.startswith("  round by round (median, range of 2)")]
    assert len(by_round) == 2 and all("wavefront tiles" in line for line in by_round), out


def test_tiles_benchmark_prints_each_stage_from_in_core_to_the_team():
    out = run_benchmark("stencil_tiles", "--n", "40", "--rounds", "2", "--tile", "8", "--steps", "4")
    # the table starts at its title (an MPI library may print a line of its own before it)
    lines = out.splitlines()
    lines = lines[next((i for i, line in enumerate(lines) if line.startswith("grid ")), 0):]
    assert lines[0].startswith("grid 40^3, WavefrontTiles(team=2, tile=8, steps_per_pass=4"), out
    stages = ["in core, one thread", "in core, 2 threads", "one tile of the grid, one thread alone",
              "one tile per thread at once", "team pass of 2 threads"]
    for stage, line in zip(stages, lines[1:]):
        assert line.startswith(stage), (stage, line)
        assert rate(line) > 0, line
    assert re.search(r"each thread \d+% of the pass in the kernel", lines[-1]), out
