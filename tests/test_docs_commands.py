"""Every command the README and docs/ quote exists and parses ``--help``: the docs cannot
name a subcommand or a script that is gone."""
import glob
import importlib
import os
import re
import runpy
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
COMMAND = re.compile(r"python3? (?:-m (pipekrylov|parareal|stencil)(?: ([a-z][a-z-]*))?|-m (benchmarks\.\w+)|(tools/[\w-]+\.py))")


def quoted_commands():
    """(module, subcommand) and script paths, each once, as the docs quote them."""
    found = set()
    for path in DOCS:
        with open(path) as f:
            for module, sub, benchmark, script in COMMAND.findall(f.read()):
                found.add(("module", module, sub) if module else ("benchmark", benchmark, "") if benchmark
                          else ("script", script, ""))
    return sorted(found)


def test_the_docs_quote_commands():
    kinds = {kind for kind, _, _ in quoted_commands()}
    assert kinds == {"module", "benchmark", "script"}


@pytest.mark.parametrize("kind, target, sub", quoted_commands())
def test_quoted_command_parses_help(kind, target, sub, capsys, monkeypatch):
    if kind == "module":
        argv = ([sub] if sub else []) + ["--help"]
        main = importlib.import_module(f"{target}.cli").main
        with pytest.raises(SystemExit) as stop:
            main(argv)
    elif kind == "benchmark":   # python -m benchmarks.NAME, from the repository root
        path = os.path.join(ROOT, *target.split(".")) + ".py"
        assert os.path.exists(path), f"{target} is quoted in the docs but does not exist"
        monkeypatch.setattr(sys, "argv", [path, "--help"])
        monkeypatch.syspath_prepend(ROOT)
        monkeypatch.delitem(sys.modules, target, raising=False)   # imported by another benchmark: run it anew
        with pytest.raises(SystemExit) as stop:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        path = os.path.join(ROOT, target)
        assert os.path.exists(path), f"{target} is quoted in the docs but does not exist"
        monkeypatch.setattr(sys, "argv", [path, "--help"])
        with pytest.raises(SystemExit) as stop:
            runpy.run_path(path, run_name="__main__")
    assert stop.value.code in (0, None), capsys.readouterr().err
    assert "usage:" in capsys.readouterr().out


def _module_files(package):
    folder = os.path.join(ROOT, "pipekrylov", package)
    return {f for f in os.listdir(folder) if f.endswith(".py") and f != "__init__.py"}


def test_deep_module_table_matches_the_code():
    with open(os.path.join(ROOT, "docs", "deep.md")) as f:
        listed = set(re.findall(r"^\| `deep/(\w+\.py)` \|", f.read(), re.M))
    assert listed == _module_files("deep")


@pytest.mark.parametrize("package", ["derive", "deep", "petsc", "loops", "runtime", "solvers", "kernels"])
def test_design_names_every_module(package):
    with open(os.path.join(ROOT, "docs", "design.md")) as f:
        text = f.read()
    missing = sorted(m for m in _module_files(package) if m not in text)
    assert not missing, f"docs/design.md does not name {missing} of pipekrylov/{package}/"
