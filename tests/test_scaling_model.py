"""Strong-scaling collection and the performance model: arithmetic checked against
independent computations, outputs written and readable (no timings asserted)."""
import json
import math
import os
import subprocess
import sys

import pytest

from pipekrylov import model
from pipekrylov.scaling import collect, read_records, write_outputs

MACHINE = model.Machine("test", spmv_per_nnz=2e-9, vector_per_entry=1e-9,
                        reduction_latency=4e-6, reduction_per_level=2e-6, halo=1e-6)


def record(method, ranks, total, iterations=100, latency=0.0):
    """A solve record whose SpMV, PC and blocked times are 40%, 10% and 20% of the total."""
    return {"problem": "poisson2d:100", "n": 10000, "ranks": ranks, "method": method,
            "latency": latency, "iterations": iterations, "info": 0, "total": total,
            "spmv": 0.4 * total, "pc": 0.1 * total, "reductions_blocked": 0.2 * total,
            "time_per_iteration": total / iterations}


def test_collect_computes_speedup_efficiency_and_the_breakdown():
    records = [record("cg", 1, 1.0), record("cg", 2, 0.6), record("cg", 2, 0.5),   # fastest kept
               record("cg", 4, 0.4), record("p-cg", 2, 0.8), record("p-cg", 4, 0.5)]
    rows = collect(records)
    cg = [r for r in rows if r["series"] == "cg"]
    assert [r["ranks"] for r in cg] == [1, 2, 4]
    assert [r["speedup"] for r in cg] == pytest.approx([1.0, 2.0, 2.5])
    assert [r["efficiency"] for r in cg] == pytest.approx([1.0, 1.0, 0.625])
    pcg = [r for r in rows if r["series"] == "p-cg"]
    assert [r["speedup"] for r in pcg] == pytest.approx([2.0, 2 * 0.8 / 0.5])   # relative to 2 ranks
    for r in rows:
        parts = r["spmv"] + r["pc"] + r["blocked"] + r["vector"]
        assert parts == pytest.approx(r["time_per_iteration"])
    assert cg[0]["spmv"] == pytest.approx(0.4 / 100) and cg[0]["vector"] == pytest.approx(0.3 / 100)


def test_latency_runs_are_their_own_series(tmp_path):
    rows = collect([record("cg", 1, 1.0), record("cg", 1, 2.0, latency=5e-4)])
    assert sorted(r["series"] for r in rows) == ["cg", "cg (+0.5 ms latency)"]
    csv_path, json_path, png_path = write_outputs(rows, str(tmp_path), "test")
    assert open(csv_path).readline().startswith("series,method,latency")
    assert json.load(open(json_path)) == rows
    assert open(png_path, "rb").read(4) == b"\x89PNG"


def test_read_records_accepts_files_and_folders(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "records.jsonl").write_text(json.dumps(record("cg", 1, 1.0)) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps(record("cg", 2, 0.6)) + "\n\n")
    assert [r["ranks"] for r in read_records([str(tmp_path / "a"), str(tmp_path / "b.jsonl")])] == [1, 2]


def test_model_terms_match_a_hand_computation():
    n, nnz, P = 10 ** 6, 5 * 10 ** 6, 64
    S = 2e-9 * nnz / P + 1e-6
    M = 3 * 1e-9 * n / P
    G = 4e-6 + 2e-6 * (math.log2(P) - 1)
    V = lambda accesses: accesses * 1e-9 * n / P
    assert model.time_per_iteration("cg", MACHINE, n, nnz, P) == pytest.approx(2 * G + S + M + V(13))
    assert model.time_per_iteration("p-cg", MACHINE, n, nnz, P) == pytest.approx(max(G, S + M) + V(18))
    assert model.time_per_iteration("p(l)-cg", MACHINE, n, nnz, P, depth=3) == \
        pytest.approx(max(G / 3, S + M) + V(12 + 18))
    assert model.time_per_iteration("bicgstab", MACHINE, n, nnz, P) == \
        pytest.approx(3 * G + 2 * (S + M) + V(30))
    # one rank: no reduction, no halo
    assert model.time_per_iteration("cg", MACHINE, n, nnz, 1) == \
        pytest.approx(2e-9 * nnz + 3e-9 * n + 13e-9 * n)


def test_model_limits_and_best_depth():
    n, nnz = 10 ** 6, 5 * 10 ** 6
    rows = model.predict(MACHINE, n, nnz, [2 ** k for k in range(18)])
    depths = [r["best_depth"] for r in rows]
    assert depths == sorted(depths) and depths[0] == 1 and depths[-1] > 3
    # where the reduction dominates, p-cg beats cg and p(l)-cg beats p-cg
    last = rows[-1]
    assert last["p(l)-cg"] < last["p-cg"] < last["cg"]
    assert last["speedup_plcg_over_cg"] == pytest.approx(last["cg"] / last["p(l)-cg"])
    with pytest.raises(ValueError, match="unknown method"):
        model.time_per_iteration("qmr", MACHINE, n, nnz, 4)


def test_machine_round_trip_and_model_command(tmp_path):
    path = tmp_path / "machine.json"
    MACHINE.save(str(path))
    assert model.Machine.load(str(path)) == MACHINE
    png = tmp_path / "model.png"
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "model", "--machine", str(path),
                          "--problem", "poisson3d:100", "--max-ranks", "1000", "--plot", str(png)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [l.split() for l in out.stdout.splitlines() if l.strip() and l.split()[0].isdigit()]
    assert [int(l[0]) for l in lines] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000]
    n, nnz = 10 ** 6, 7 * 10 ** 6 - 6 * 10 ** 4
    expected = model.time_per_iteration("cg", MACHINE, n, nnz, 1000) * 1e6
    assert float(lines[-1][1]) == pytest.approx(expected, abs=0.01)
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("name", ["poisson2d", "poisson3d", "anisotropic2d", "convection_diffusion2d"])
def test_model_problem_sizes_are_those_of_the_generators(name):
    from mpi4py import MPI
    from pipekrylov import matrix
    from pipekrylov.problems import problem_size
    A = getattr(matrix, name)(MPI.COMM_SELF, 9)
    assert problem_size(f"{name}:9") == (A.shape[0], A.nnz)


def test_this_package_is_the_ideal_code_plus_its_fixed_cost_per_iteration():
    fixed = {"cg compiled": 2e-6, "p-cg compiled": 1e-6, "p(l)-cg compiled": 1.5e-6, "p-cg python": 40e-6,
             "p(l)-cg python": 90e-6}
    machine = model.Machine(**{**MACHINE.__dict__, "fixed": fixed})
    n, nnz, P = 10 ** 6, 5 * 10 ** 6, 64
    for method, loop in model.PACKAGE:
        ideal = model.time_per_iteration(method, machine, n, nnz, P, depth=2)
        assert model.time_per_iteration(method, machine, n, nnz, P, depth=2, loop=loop) == \
            pytest.approx(ideal + fixed[f"{method} {loop}"])
    with pytest.raises(ValueError, match="no fixed cost for 'cg python'"):
        model.time_per_iteration("cg", machine, n, nnz, P, loop="python")
    rows = model.predict(machine, n, nnz, [2 ** k for k in range(18)])
    assert rows[-1]["p-cg python"] == pytest.approx(rows[-1]["p-cg"] + 40e-6)
    # where the work per rank is small, the fixed cost decides: the Python loop never wins
    crossing = model.crossovers(rows)
    assert crossing[("cg compiled", "p-cg compiled")] is not None
    assert crossing[("cg", "p-cg")] <= crossing[("cg compiled", "p-cg compiled")]


def test_costs_are_interpolated_between_the_measured_local_sizes():
    machine = model.Machine(**{**MACHINE.__dict__, "rates": ((100, 1e-9, 2e-9), (10000, 3e-9, 4e-9))})
    assert machine.costs(1000) == pytest.approx((2e-9, 3e-9))      # halfway in log(local)
    assert machine.costs(10) == pytest.approx((1e-9, 2e-9))        # the nearest outside
    assert machine.costs(10 ** 6) == pytest.approx((3e-9, 4e-9))
    assert MACHINE.costs(10 ** 6) == (2e-9, 1e-9)                    # no rates: the two given


def test_crossovers_are_where_the_faster_method_stays_faster():
    rows = [{"ranks": p, "cg": c, "p-cg": f} for p, c, f in [(1, 1, 2), (2, 2, 1), (4, 1, 2), (8, 3, 1), (16, 4, 1)]]
    assert model.crossovers(rows, [("cg", "p-cg")]) == {("cg", "p-cg"): 8}
    assert model.crossovers(rows[:3], [("cg", "p-cg")]) == {("cg", "p-cg"): None}


def test_the_reduction_overhead_is_not_hidden():
    """LogP's o: the processor's part of a reduction adds to a pipelined iteration, the
    rest hides behind the SpMV and PC; a blocking method pays the whole G either way."""
    n, nnz, P = 10 ** 5, 5 * 10 ** 5, 4
    G = 4e-6 + 2e-6
    S, M = 2e-9 * nnz / P + 1e-6, 3e-9 * n / P
    for o in (0.0, 1e-6, 5e-6, 9e-6):
        machine = model.Machine(**{**MACHINE.__dict__, "reduction_overhead": o})
        hidden_part = min(o, G)
        assert model.time_per_iteration("p-cg", machine, n, nnz, P) == \
            pytest.approx(hidden_part + max(G - hidden_part, S + M) + 18e-9 * n / P)
        assert model.time_per_iteration("p(l)-cg", machine, n, nnz, P, depth=2) == \
            pytest.approx(hidden_part + max((G - hidden_part) / 2, S + M) + 24e-9 * n / P)
        assert model.time_per_iteration("cg", machine, n, nnz, P) == \
            pytest.approx(model.time_per_iteration("cg", MACHINE, n, nnz, P))


def test_classic_methods_pay_the_blocking_reduction_and_pipelined_ones_the_nonblocking():
    """Open MPI completes a nonblocking Allreduce in more rounds than a blocking one: cg's
    two blocking reductions cost 2 x the blocking G, p-CG's hidden one the nonblocking G."""
    n, nnz, P = 10 ** 4, 5 * 10 ** 4, 2
    machine = model.Machine(**{**MACHINE.__dict__, "reduction_latency": 8e-6, "blocking_latency": 5e-6})
    assert model.time_per_iteration("cg", machine, n, nnz, P) - model.time_per_iteration("cg", MACHINE, n, nnz, P) \
        == pytest.approx(2 * (5e-6 - MACHINE.reduction(P)))
    assert machine.reduction(P) == pytest.approx(8e-6) and machine.reduction(P, blocking=True) == pytest.approx(5e-6)
    assert model.Machine(**{**MACHINE.__dict__, "blocking_latency": 0.0}).reduction(P, blocking=True) == \
        MACHINE.reduction(P)


def test_this_package_uses_each_loops_own_costs_where_they_were_measured():
    kernels = {"p-cg compiled": ((256, 10e-9), (4096, 30e-9))}
    machine = model.Machine(**{**MACHINE.__dict__, "kernels": kernels,
                               "fixed": {"p-cg compiled": 0.0, "p-cg python": 0.0, "cg compiled": 0.0}})
    n, nnz = 1024, 5 * 1024
    ideal = model.time_per_iteration("p-cg", machine, n, nnz, 1)
    ours = model.time_per_iteration("p-cg", machine, n, nnz, 1, loop="compiled")
    assert machine.kernel_cost("p-cg compiled", 1024) == pytest.approx(20e-9)   # halfway in log(local)
    assert ours - ideal == pytest.approx((20e-9 - 18e-9) * n)         # its kernels for the accesses
    assert machine.kernel_cost("p-cg python", 1024) is None           # each loop its own
    assert model.time_per_iteration("p-cg", machine, n, nnz, 1, loop="python") == pytest.approx(ideal)
    assert model.time_per_iteration("cg", machine, n, nnz, 1, loop="compiled") == \
        pytest.approx(model.time_per_iteration("cg", machine, n, nnz, 1))


def test_deeper_pipelines_pay_their_level_passes():
    """p(l)-CG's own costs: its base, and l level passes, each with its fixed cost."""
    kernels = {"p(l)-cg compiled": ((256, 10e-9), (4096, 10e-9)),
               "p(l)-cg compiled level": ((256, 2e-9), (4096, 2e-9))}
    fixed = {"p(l)-cg compiled": 1e-6, "p(l)-cg compiled level": 0.25e-6}
    machine = model.Machine(**{**MACHINE.__dict__, "kernels": kernels, "fixed": fixed})
    n, nnz = 1024, 5 * 1024
    times = [model.time_per_iteration("p(l)-cg", machine, n, nnz, 1, depth=l, loop="compiled") for l in (1, 2, 5)]
    work = 2e-9 * nnz + 3e-9 * n      # SpMV + Jacobi, one rank
    assert times == pytest.approx([work + 1e-6 + l * 0.25e-6 + (10e-9 + l * 2e-9) * n for l in (1, 2, 5)])


def test_loop_costs_split_each_loops_own_time_into_fixed_and_per_unknown(monkeypatch):
    """loop_costs on made-up times per iteration (no solve is timed): F the intercept
    through the two smallest sizes, the rest per unknown at every size; a size a loop
    has no figure for left out; p(l)-CG's level pass clipped at 0 where depth 2 came out
    faster than depth 1, and the model then still gives back depth 1's times."""
    from mpi4py import MPI
    from pipekrylov import timing
    sizes, machine = [], model.Machine(**{**MACHINE.__dict__, "rates": ((256, 2e-9, 1e-9), (4096, 3e-9, 2e-9))})
    A = {m: timing.poisson(MPI.COMM_SELF, m)[0] for m in (256, 1024, 4096)}

    def own(key, m):
        """A loop's own time at m unknowns: linear up to 1,024, more at 4,096 (out of cache)."""
        F, v = {"cg compiled": (0.5e-6, 4e-9), "p-cg compiled": (0.7e-6, 3e-9), "p-cg python": (24e-6, 3e-9),
                "p(1)-cg compiled": (0.9e-6, 6e-9), "p(1)-cg python": (40e-6, 6e-9),
                "p(2)-cg python": (50e-6, 8e-9)}[key]
        return F + v * m + (2e-6 if m == 4096 else 0.0)
    p2 = {256: own("p(1)-cg compiled", 256) - 0.1e-6, 1024: own("p(1)-cg compiled", 1024) + 0.3e-6,
          4096: own("p(1)-cg compiled", 4096) + 1.3e-6}     # the level pass: -0.1, 0.3, 1.3 us

    def made_up(comm, funcs, n1, n2, **options):
        m = sizes[-1]
        work = model.local_work(machine, m, A[m].nnz)
        times = {key: None if (key == "p-cg python" and m == 256) else
                 (p2[m] if key == "p(2)-cg compiled" else own(key, m)) for key in funcs}
        return {key: None if t is None else (t + work, 0.0) for key, t in times.items()}
    monkeypatch.setattr(timing, "poisson", lambda comm, total: (sizes.append(total), (A[total], None))[1])
    monkeypatch.setattr(timing, "per_iteration", made_up)
    fixed, kernels = model.loop_costs(machine, [256, 1024, 4096])
    assert set(fixed) == set(kernels) == {f"{m} {loop}" for m, loop in model.PACKAGE} | \
        {"p(l)-cg compiled level", "p(l)-cg python level"}
    assert fixed["cg compiled"] == pytest.approx(0.5e-6)
    assert [m for m, _ in kernels["cg compiled"]] == [256, 1024, 4096]
    assert [c for _, c in kernels["cg compiled"]] == pytest.approx([4e-9, 4e-9, 4e-9 + 2e-6 / 4096])
    assert fixed["p-cg python"] == pytest.approx(24e-6 - 1024 * 2e-6 / 3072)   # through 1,024 and 4,096
    assert [m for m, _ in kernels["p-cg python"]] == [1024, 4096]
    assert fixed["p(l)-cg python level"] == pytest.approx(10e-6)
    assert fixed["p(l)-cg python"] == pytest.approx(30e-6)
    assert fixed["p(l)-cg compiled level"] == 0.0     # the line through -0.1 and 0.3 us starts below 0
    m = model.Machine(**{**machine.__dict__, "fixed": fixed, "kernels": kernels})
    for size in (256, 1024, 4096):
        work = model.local_work(machine, size, A[size].nnz)
        for method, loop in model.PACKAGE:
            depth1 = own(f"p(1)-cg {loop}" if method == "p(l)-cg" else f"{method} {loop}", size)
            if (method, loop, size) != ("p-cg", "python", 256):
                assert model.time_per_iteration(method, m, size, A[size].nnz, 1, depth=1, loop=loop) == \
                    pytest.approx(depth1 + work), (method, loop, size)
        if size > 256:   # where depth 2 was the slower, it is given back too
            assert model.time_per_iteration("p(l)-cg", m, size, A[size].nnz, 1, depth=2, loop="compiled") == \
                pytest.approx(p2[size] + work)


def test_a_machine_of_an_older_calibration_is_refused(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({**MACHINE.__dict__, "fixed": {"cg compiled": 1e-6},
                                "kernels": {"cg": [[256, 1e-9], [4096, 2e-9]]}}))
    with pytest.raises(ValueError, match="'cg' are not this version's.*calibrate again"):
        model.Machine.load(str(path))


def test_a_machine_with_rates_and_fixed_costs_round_trips(tmp_path):
    machine = model.Machine(**{**MACHINE.__dict__, "fixed": {"cg compiled": 1e-6},
                               "rates": ((256, 1e-9, 2e-9), (4096, 3e-9, 4e-9)), "reduction_overhead": 1e-6,
                               "kernels": {"cg compiled": ((256, 1e-9), (4096, 2e-9))}})
    path = tmp_path / "machine.json"
    machine.save(str(path))
    assert model.Machine.load(str(path)) == machine
    out = subprocess.run([sys.executable, "-m", "pipekrylov", "model", "--machine", str(path),
                          "--problem", "poisson2d:100", "--max-ranks", "64"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "cg compiled" in out.stdout.splitlines()[2]


@pytest.mark.mpi
def test_communication_costs_are_measured_on_every_rank_alike(comm):
    """From compiled code, on the caller's communicator: positive times, equal on all
    ranks; the overhead o not counting the 3 ms the reduction is left to itself."""
    if comm.size == 1:
        pytest.skip("a reduction needs two ranks")
    costs = model.communication_costs(comm, halo=32, repeat=20, hold=3e-3)
    assert all(0.0 < value < 0.1 for value in (costs.reduction, costs.overhead, costs.halo, costs.blocking))
    if comm.size <= (os.cpu_count() or 1):   # oversubscribed ranks wait on each other for ms
        assert costs.overhead < 3e-3
    assert comm.allgather(costs) == [costs] * comm.size


@pytest.mark.mpi
def test_communication_costs_refuse_arguments_that_differ_between_ranks(comm):
    """A halo of another length on one rank would truncate there only and leave the
    others waiting: refused on every rank, before any exchange."""
    if comm.size == 1:
        pytest.skip("needs two ranks")
    with pytest.raises(ValueError, match="differ between the ranks"):
        model.communication_costs(comm, halo=32 + comm.rank, repeat=5)


def test_the_model_check_models_each_run_with_the_calibrations_around_it():
    """benchmarks.model_check: a machine that slows down run by run, its calibrations in
    two processes before and after each run, and two-rank runs that took what the mean of
    the two either side models: every ratio 1, where the first calibration alone gives
    0.5.  The one-rank rows are modelled with the one-process calibrations (a steady
    machine, the runs 25% slower than it: 0.8)."""
    from benchmarks import model_check
    fixed = {" ".join(key): 1e-6 for key in model.PACKAGE} | {"p(l)-cg compiled level": 0.2e-6,
                                                               "p(l)-cg python level": 5e-6}
    base = {**MACHINE.__dict__, "fixed": fixed, "rates": ((256, 2e-9, 1e-9), (65536, 4e-9, 2e-9))}

    def slowed(factor, without=()):
        return model.Machine(**{**base, "fixed": {k: v * factor for k, v in fixed.items() if k not in without},
                                "rates": tuple((m, s * factor, v * factor) for m, s, v in base["rates"])})
    one, two = [slowed(1.0)] * 4, [slowed(f) for f in (1.0, 1.5, 2.0, 2.5)]
    configurations = [{"transport": "shm", "ranks": 1, "local": 1024, "total": 1024, "halo_us": 0.0,
                       "iallreduce_us": 0.0, "blocking_us": 0.0, "allreduce_overhead_us": 0.0},
                      {"transport": "tcp", "ranks": 2, "local": 1024, "total": 2048, "halo_us": 5.0,
                       "iallreduce_us": 8.0, "blocking_us": 5.0, "allreduce_overhead_us": 6.0}]
    runs = []
    for i in range(3):
        rows = [dict(c) for c in configurations]
        for name in model_check.SERIES:
            rows[0][name] = 1.25 * model_check.modelled_us(one[i], rows[0], name)
            rows[1][name] = (model_check.modelled_us(two[i], rows[1], name)
                             + model_check.modelled_us(two[i + 1], rows[1], name)) / 2
        runs.append(rows)
    runs[0][0]["p-cg python"] = runs[1][0]["p-cg python"] = None   # 1 of 3 runs has it: left out
    runs[2][1]["p(2)-cg python"] = None                            # 2 of 3: kept
    compared = {(row["ranks"], name): rest for row, name, *rest in model_check.compare(runs, {1: one, 2: two})}
    assert sorted(compared) == sorted({(1, n) for n in model_check.SERIES if n != "p-cg python"}
                                      | {(2, n) for n in model_check.SERIES})
    for (ranks, name), (measured, modelled, ratios) in compared.items():
        assert ratios == pytest.approx([0.8 if ranks == 1 else 1.0] * (2 if (ranks, name) == (2, "p(2)-cg python") else 3))
    measured, modelled, _ = compared[2, "cg"]
    assert measured == pytest.approx(modelled) and measured == pytest.approx(runs[1][1]["cg"])   # the medians
    assert model_check.modelled_us(two[0], runs[2][1], "cg") / runs[2][1]["cg"] == pytest.approx(0.5, abs=0.05)
    # a loop one calibration has no cost for (it could not run there): its series left out
    compared = model_check.compare(runs, {1: one, 2: two[:3] + [slowed(2.5, without={"p-cg python"})]})
    assert [name for row, name, *_ in compared if row["ranks"] == 2] == [
        n for n in model_check.SERIES if n != "p-cg python"]
    with pytest.raises(ValueError, match="3 runs need 4 calibrations around them, not 3 \\(in 1 processes"):
        model_check.compare(runs, {1: one[:3], 2: two})
    runs[1][1]["local"] = 4096
    with pytest.raises(SystemExit, match="different configurations"):
        model_check.compare(runs, {1: one, 2: two})
