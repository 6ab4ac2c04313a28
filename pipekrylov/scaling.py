"""Strong-scaling studies: run a series of process counts, collect, tabulate and plot.

A study is a list of solve records, one JSON object per line (what ``python -m
pipekrylov solve --json`` prints), appended to ``records.jsonl`` as each run finishes, so
a killed study keeps what it has.  :func:`run_series` launches the runs (through
``mpiexec``, ``srun`` or ``mpirun``: the launcher is a template); :func:`collect` turns
records from any number of files into series per method, with speedup, parallel
efficiency and the time per iteration split into SpMV, preconditioner, time blocked in
reductions and the rest (vector updates); :func:`write_outputs` writes CSV, JSON and a
figure.
"""
import csv
import json
import os
import shlex
import subprocess
import sys
import time
from collections import defaultdict

__all__ = ["check_launcher", "run_series", "read_records", "collect", "write_outputs", "plot_study"]

PARTS = ("spmv", "pc", "blocked", "vector")     # the per-iteration breakdown, in plot order


LAUNCHER_FIELDS = ("ranks",)   # what a --launcher template may name


def check_launcher(launcher):
    """A launcher template names only ``{ranks}`` (``'srun -n {ranks}'``)."""
    import string
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(launcher) if field is not None]
    except ValueError as exc:   # a lone brace
        raise ValueError(f"--launcher {launcher!r}: {exc}") from None
    unknown = [f for f in fields if f not in LAUNCHER_FIELDS]
    if unknown:
        raise ValueError(f"--launcher {launcher!r}: unknown placeholder {{{unknown[0]}}}; the known one is "
                         + ", ".join(f"{{{f}}}" for f in LAUNCHER_FIELDS) + " (the process count)")


def run_series(ranks, methods, solve_args, output, launcher="mpiexec -n {ranks}",
               env=None, stream=sys.stdout, timeout=3600):
    """Run ``solve`` for every method at every process count; append to
    ``output/records.jsonl``; return the records.

    ``solve_args`` are the remaining ``solve`` options (problem, pc, tolerances,
    latency).  Each run passes ``--expect-ranks`` so that a launcher that starts N
    separate one-process jobs (an MPI/launcher mismatch) fails loudly.
    """
    os.makedirs(output, exist_ok=True)
    path = os.path.join(output, "records.jsonl")
    runs = [(n, m) for n in ranks for m in methods]
    records, start = [], time.monotonic()
    for done, (n, method) in enumerate(runs):
        command = (shlex.split(launcher.format(ranks=n)) +
                   [sys.executable, "-m", "pipekrylov", "solve", "--method", method, "--json",
                    "--expect-ranks", str(n), *solve_args])
        out = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
        lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
        if out.returncode not in (0, 1) or len(lines) != 1:
            raise RuntimeError(f"{' '.join(command)} failed (exit {out.returncode}):\n"
                               f"{out.stdout[-2000:]}{out.stderr[-2000:]}")
        record = json.loads(lines[0])
        records.append(record)
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
        elapsed = time.monotonic() - start
        left = elapsed / (done + 1) * (len(runs) - done - 1)
        print(f"[{done + 1}/{len(runs)}] {method} on {n} ranks: {record['iterations']} its, "
              f"{record['time_per_iteration'] * 1e3:.3f} ms/it ({elapsed:.0f} s, about {left:.0f} s left)",
              file=stream, flush=True)
    return records


def read_records(paths):
    """All records of the given ``records.jsonl`` files (or folders holding one)."""
    records = []
    for path in paths:
        if os.path.isdir(path):
            path = os.path.join(path, "records.jsonl")
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if line.strip():
                    records.append(_record(line, f"{path}:{number}"))
    if not records:
        raise ValueError(f"no records in {', '.join(paths)}")
    return records


RECORD_KEYS = ("method", "problem", "n", "ranks", "iterations", "time_per_iteration", "spmv", "pc",
               "reductions_blocked")


def _record(line, where):
    """One line of a records.jsonl: a solve record (``solve --json``), else an error
    naming the file and line."""
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ValueError(f"{where}: not a JSON record ({exc})") from None
    missing = [k for k in RECORD_KEYS if not isinstance(record, dict) or k not in record]
    if missing:
        raise ValueError(f"{where}: not a solve record (`pipekrylov solve --json`): no {', '.join(missing)}")
    return record


def _label(record):
    latency = record.get("latency") or 0.0
    return record["method"] + (f" (+{latency * 1e3:g} ms latency)" if latency else "")


def collect(records):
    """Rows ``{series, method, latency, problem, ranks, iterations, time_per_iteration,
    speedup, efficiency, spmv, pc, blocked, vector}`` (times per iteration, seconds),
    sorted by series and ranks.  Speedup and efficiency are relative to the series'
    smallest process count ``p0``: ``S(p) = p0 T(p0) / T(p)``, ``E = S / p``.  Repeated
    runs of one configuration keep the fastest."""
    best = {}
    for r in records:
        key = (_label(r), r["problem"], r["ranks"])
        if key not in best or r["time_per_iteration"] < best[key]["time_per_iteration"]:
            best[key] = r
    series = defaultdict(list)
    for (label, problem, _), r in best.items():
        series[label, problem].append(r)
    rows = []
    for (label, problem), runs in sorted(series.items()):
        runs.sort(key=lambda r: r["ranks"])
        p0, t0 = runs[0]["ranks"], runs[0]["time_per_iteration"]
        for r in runs:
            its = max(r["iterations"], 1)
            t = r["time_per_iteration"]
            parts = {"spmv": r["spmv"] / its, "pc": r["pc"] / its,
                     "blocked": r["reductions_blocked"] / its}
            parts["vector"] = max(t - sum(parts.values()), 0.0)
            speedup = p0 * t0 / t
            rows.append({"series": label, "method": r["method"], "latency": r.get("latency", 0.0),
                         "problem": problem, "n": r["n"], "ranks": r["ranks"],
                         "iterations": r["iterations"], "time_per_iteration": t,
                         "speedup": speedup, "efficiency": speedup / r["ranks"], **parts})
    return rows


def write_outputs(rows, output, title="strong scaling"):
    """``output/scaling.csv``, ``scaling.json`` and ``scaling.png``; returns their paths."""
    os.makedirs(output, exist_ok=True)
    paths = [os.path.join(output, f"scaling.{ext}") for ext in ("csv", "json", "png")]
    with open(paths[0], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with open(paths[1], "w") as f:
        json.dump(rows, f, indent=1)
    plot_study(rows, paths[2], title)
    return paths


def plot_study(rows, path, title):
    """Four panels: time per iteration, speedup, efficiency, and the breakdown."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = defaultdict(list)
    for row in rows:
        series[row["series"]].append(row)
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    (ax_time, ax_speedup), (ax_eff, ax_parts) = axes
    allranks = sorted({row["ranks"] for row in rows})
    # one colour per method; dashed when a reduction latency was injected
    methods = sorted({row["method"] for row in rows})
    colours = {m: plt.cm.tab10(i % 10) for i, m in enumerate(methods)}
    for label, runs in series.items():
        ranks = [r["ranks"] for r in runs]
        style = dict(color=colours[runs[0]["method"]], marker="o",
                     linestyle="--" if runs[0]["latency"] else "-", label=label)
        ax_time.plot(ranks, [r["time_per_iteration"] * 1e3 for r in runs], **style)
        ax_speedup.plot(ranks, [r["speedup"] for r in runs], **style)
        ax_eff.plot(ranks, [r["efficiency"] for r in runs], **style)
    ax_speedup.plot(allranks, allranks, "k:", label="ideal")
    for ax, ylabel in ((ax_time, "time per iteration (ms)"), (ax_speedup, "speedup"),
                       (ax_eff, "parallel efficiency")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(allranks, [str(p) for p in allranks])
        ax.set_xlabel("MPI ranks")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
    ax_time.set_ylim(bottom=0)
    ax_eff.set_ylim(0, max([1.1] + [1.05 * row["efficiency"] for row in rows]))
    handles, labels = ax_speedup.get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=8, title="series")
    names = [f"{row['series']}, {row['ranks']}" for row in rows]
    bottom = [0.0] * len(rows)
    for part, text in zip(PARTS, ("SpMV", "preconditioner", "blocked in reductions", "vector updates, rest")):
        heights = [row[part] * 1e3 for row in rows]
        ax_parts.bar(range(len(rows)), heights, bottom=bottom, label=text)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax_parts.set_xticks(range(len(rows)), names, rotation=60, ha="right", fontsize=7)
    ax_parts.set_xlabel("series, MPI ranks")
    ax_parts.set_ylabel("time per iteration (ms)")
    ax_parts.set_title("where the time goes")
    ax_parts.legend(fontsize=8)
    ax_time.set_title("time per iteration")
    ax_speedup.set_title("speedup over the smallest run")
    ax_eff.set_title("parallel efficiency")
    problem = rows[0]["problem"]
    fig.suptitle(f"{title}: {problem} (n = {rows[0]['n']})")
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
