"""make demo: the crossover it reports, and a quick run end to end (its figures are
measurements, not asserted here)."""
import json
import os
import subprocess
import sys

import pytest

from pipekrylov import demo
from test_cli import clean_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def latency_rows(points):
    return [{"panel": "latency", "local": 4096, "latency_us": L, "CG": cg, "p-CG": pcg, "p(2)-CG": None}
            for L, cg, pcg in points]


def test_the_crossover_is_interpolated_where_the_faster_method_stays_faster():
    # p-CG slower at 0 and 20 us, faster from between 20 and 50 us on: the line through
    # the differences (-10 at 20 us, +20 at 50 us) crosses zero at 30 us
    rows = latency_rows([(0, 10, 15), (20, 30, 40), (50, 100, 80), (100, 200, 120)])
    assert demo.crossover(rows, "CG", "p-CG") == pytest.approx(30.0)
    assert demo.crossover(latency_rows([(0, 20, 10), (50, 90, 60)]), "CG", "p-CG") == 0.0
    assert demo.crossover(latency_rows([(0, 10, 20), (50, 60, 90)]), "CG", "p-CG") is None
    # faster once, slower again at the end: not a crossover
    assert demo.crossover(latency_rows([(0, 10, 20), (20, 40, 30), (50, 60, 90)]), "CG", "p-CG") is None


def test_a_quick_demo_runs_end_to_end(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "demo", "--quick", "--output", str(tmp_path)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT, env=clean_env())
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = json.loads((tmp_path / "demo.json").read_text())
    panels = [r["panel"] for r in rows]
    assert panels == ["size", "size", "latency", "latency", "step", "step"]
    series = {"CG", "p-CG", "p(2)-CG"} | ({"PETSc cg", "PETSc pipecg"} if _has_petsc() else set())
    assert series <= set(rows[0]) and series <= set(rows[-1])
    assert all(r["CG its"] >= 1 for r in rows if r["panel"] == "step")
    assert (tmp_path / "demo.png").stat().st_size > 10_000
    assert "| unknowns per rank |" in out.stdout and "latency (us)" in out.stdout
    assert "time per backward Euler step" in out.stdout


def _has_petsc():
    try:
        import petsc4py  # noqa: F401
        return True
    except ImportError:
        return False
