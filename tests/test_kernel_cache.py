"""Compiled kernels: fused loops against numpy, and the on-disk cache under MPI."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pipekrylov.kernels import fused_kernel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_fused_kernel_equals_separate_numpy_updates():
    rng = np.random.default_rng(0)
    v = {name: rng.standard_normal(1001) for name in ("x", "p", "r", "q", "dinv", "z")}
    ref = {k: a.copy() for k, a in v.items()}
    kernel = fused_kernel(["x = x + alpha*p", "r = r - alpha*q", "z = dinv*r", "p = z + 2*beta*p"],
                          dots=["r.r", "r.z", "p.q"], scalars=["alpha", "beta"])
    dots = kernel(v, {"alpha": 0.7, "beta": -0.2})
    ref["x"] += 0.7 * ref["p"]
    ref["r"] -= 0.7 * ref["q"]
    ref["z"] = ref["dinv"] * ref["r"]
    ref["p"] = ref["z"] + 2 * -0.2 * ref["p"]
    for name in v:
        assert np.allclose(v[name], ref[name], rtol=1e-14, atol=1e-15)  # FMA contraction: an ulp
    expected = [ref["r"] @ ref["r"], ref["r"] @ ref["z"], ref["p"] @ ref["q"]]
    assert np.allclose(dots, expected, rtol=1e-13)
    assert "for i in range" in kernel.source


@pytest.mark.parametrize("bad", ["x + 1", "x = ", "x = y ** 2", "x = (y)"])
def test_fused_kernel_rejects_what_it_cannot_parse(bad):
    with pytest.raises(ValueError):
        fused_kernel([bad])


SCRIPT = """
import numpy as np, numba
from mpi4py import MPI
from pipekrylov.kernels import fused_kernel
k = fused_kernel(["y = y + {tag}*a*x"], dots=["y.y"], scalars=["a"])
x, y = np.ones(10), np.zeros(10)
assert k({{"x": x, "y": y}}, {{"a": 2.0}})[0] == 10 * (2 * {tag}) ** 2
stats = k._compiled.stats
# One writer: lines printed by four ranks at once can interleave in mpiexec's stdout.
rows = MPI.COMM_WORLD.gather((MPI.COMM_WORLD.rank, sum(stats.cache_hits.values()),
                              sum(stats.cache_misses.values())))
if rows is not None:
    for row in rows:
        print("HITS", *row)
"""


def test_four_ranks_compile_into_one_fresh_cache_then_load_it(tmp_path):
    """Four ranks compile the same new kernel into an empty cache at once (under the
    lock), then a second run loads it on every rank without compiling."""
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec")
    # (Numba's cache of the package's functions in the cache folder, which this test looks for)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_MCA_orte", "OMPI_MCA_ess", "PMIX_", "OMPI_COMM", "NUMBA_CACHE_DIR"))}
    env.update(PIPEKRYLOV_CACHE_DIR=str(tmp_path), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
               PYTHONPATH=ROOT)
    script = SCRIPT.format(tag=np.random.default_rng().integers(1, 10 ** 6))
    runs = []
    for _ in range(2):
        out = subprocess.run([mpiexec, "-n", "4", sys.executable, "-c", script], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append(sorted(line.split()[1:] for line in out.stdout.splitlines() if line.startswith("HITS")))
    assert len(runs[0]) == len(runs[1]) == 4
    assert any(f.endswith(".nbi") for _, _, files in os.walk(tmp_path / "numba") for f in files)
    for rank, hits, misses in runs[1]:
        assert int(hits) >= 1 and int(misses) == 0, runs[1]


def test_a_loops_cache_stamp_does_not_depend_on_what_was_imported_first(tmp_path):
    """The stamp of a loop's cache entries (its sources' digest, with the operators'
    implementations it calls) is the same whichever modules a process imported before
    it: otherwise two kinds of run (python -m pipekrylov warm, make demo) overwrite each
    other's entries and recompile at each turn."""
    script = ("import sys\n"
              "for name in sys.argv[1:]: __import__(name)\n"
              "import pipekrylov.loops.cg as m\n"
              "from pipekrylov.kernels.compile import sources_digest\n"
              "print(sources_digest(m.__file__))\n")
    env = dict(os.environ, PIPEKRYLOV_CACHE_DIR=str(tmp_path))
    stamps = {subprocess.run([sys.executable, "-c", script, *first], capture_output=True, text=True, env=env,
                             timeout=300, check=True).stdout.strip()
              for first in ([], ["pipekrylov.precond"], ["pipekrylov.runtime.csr", "pipekrylov.solvers"])}
    assert len(stamps) == 1 and len(stamps.pop()) == 16


def test_a_cache_index_naming_a_class_that_is_gone_is_stale_not_an_error(tmp_path, monkeypatch):
    """An index another version wrote (the generated kernels' cache is shared by versions
    that generate the same source) names its operands' classes; where one is gone here,
    the index reads as stale and the next save replaces it."""
    import pickle
    import numba
    from numba.core import caching

    (tmp_path / "gone_module.py").write_text("class Operands:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import gone_module
    index = caching.IndexDataCacheFile(cache_path=str(tmp_path), filename_base="kernel", source_stamp="new")
    with open(tmp_path / "kernel.nbi", "wb") as f:
        pickle.dump(numba.__version__, f)
        f.write(pickle.dumps(("old", {(gone_module.Operands(), "target"): "kernel.1.nbc"})))
    del sys.modules["gone_module"]
    (tmp_path / "gone_module.py").unlink()
    assert getattr(caching.IndexDataCacheFile._load_index, "tolerant", False)   # pipekrylov imported
    assert index._load_index() == {}
    index.save(("signature", "target"), b"compiled")
    assert index.load(("signature", "target")) == b"compiled"
