"""stencil: every kernel and scheduler against the numpy reference, bad input, the
distributed slab at 1 to 4 ranks, checkpoint/resume, and the Parareal heat propagator."""
import itertools

import numpy as np
import pytest

from stencil import (Checkpoint, PipelinedBlocking, Stencil, Sweep, WavefrontTiles, advance,
                     autotune, gather_layers, kernel_source, layer_partition, reference_run,
                     reference_step, scatter_layers)

# grid sizes that are no multiple of any block size below
SHAPES = {2: (29, 23), 3: (19, 13, 11)}
SCHEDULERS = [Sweep(1), Sweep(2, rows_per_block=4), Sweep(2, steps_per_pass=3),
              Sweep(1, streaming_stores=True), Sweep(2, rows_per_block=3, streaming_stores=True),
              PipelinedBlocking(1, 1, 1), PipelinedBlocking(1, 3, 4), PipelinedBlocking(2, 1, 2),
              PipelinedBlocking(2, 4, 4, rows_per_block=3), PipelinedBlocking(2, 3, 7),
              PipelinedBlocking(3, 2, 5),
              WavefrontTiles(1, 1, 1), WavefrontTiles(1, 3, 4), WavefrontTiles(2, 1, 2),
              WavefrontTiles(2, 4, 4, fronts_per_sync=1), WavefrontTiles(2, 3, 7, fronts_per_sync=3),
              WavefrontTiles(3, 2, 5), WavefrontTiles(2, 64, 4),   # one tile wider than the grid
              WavefrontTiles(2, steps_per_pass=3),                # the default sizes
              None]                                               # advance's default
STEPS = 9   # not a multiple of any steps_per_pass above: a short last pass


def make_stencil(ndim, boundary, variable, shape, seed=0):
    if variable:
        field = 0.05 + 0.1 * np.random.default_rng(seed).random(shape)   # a <= 1/(2 ndim)
        return Stencil(ndim, boundary, coefficient=field)
    return Stencil.heat(ndim, 0.12, boundary)


CASES = [(ndim, boundary, variable) for ndim in (2, 3) for boundary in ("dirichlet", "periodic")
         for variable in (False, True)]


def case_id(case):
    ndim, boundary, variable = case
    return f"{ndim}d-{boundary}-{'variable' if variable else 'constant'}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("scheduler", SCHEDULERS, ids=repr)
def test_every_scheduler_equals_the_numpy_reference_bit_for_bit(case, scheduler):
    ndim, boundary, variable = case
    shape = SHAPES[ndim]
    u = np.random.default_rng(1).random(shape)
    stencil = make_stencil(ndim, boundary, variable, shape)
    expected = reference_run(u, stencil, STEPS)
    result = advance(u, stencil, STEPS, scheduler=scheduler)
    assert np.array_equal(result, expected)
    assert not np.array_equal(result, u)


def test_wavefront_tiles_cover_axis_1_once_per_step_skewed_by_the_step():
    tiles = WavefrontTiles().tiles(length=15, steps=6, periodic=False, tile=4)
    assert len(tiles) == 4                           # edges 1, 5, 9, 13, 14
    for s in range(6):
        ranges = [(int(first[s]), int(last[s])) for first, last in tiles]
        assert ranges[0][0] == 1 and ranges[-1][1] == 14
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
        assert ranges[1][0] == max(1, 5 - s)          # shifted back one point per step
    assert len(WavefrontTiles().tiles(15, 6, periodic=True, tile=4)) == 1
    assert WavefrontTiles().sizes(3) == (16, 8) and WavefrontTiles(tile=5).sizes(2) == (5, 256)


def test_reference_is_the_heat_equation_forward_euler_step():
    """Independent check of the reference: the 5-point Laplacian as a sparse matrix."""
    import scipy.sparse as sp
    n, c = 12, 0.2
    u = np.random.default_rng(2).random((n, n))
    d1 = sp.diags([1.0, -2.0, 1.0], [-1, 0, 1], shape=(n - 2, n - 2))
    lap = sp.kron(d1, sp.identity(n - 2)) + sp.kron(sp.identity(n - 2), d1)
    boundary = np.zeros((n, n))
    boundary[[0, -1], :], boundary[:, [0, -1]] = u[[0, -1], :], u[:, [0, -1]]
    # Dirichlet data enter through the neighbours of the first interior points
    coupling = (boundary[:-2, 1:-1] + boundary[2:, 1:-1] + boundary[1:-1, :-2] + boundary[1:-1, 2:])
    interior = u[1:-1, 1:-1].ravel()
    expected = interior + c * (lap @ interior + coupling.ravel())
    got = reference_step(u, Stencil.heat(2, c))
    assert np.allclose(got[1:-1, 1:-1].ravel(), expected, rtol=1e-14, atol=1e-15)
    assert np.array_equal(got[0], u[0]) and np.array_equal(got[:, -1], u[:, -1])


def test_periodic_reference_conserves_the_sum_and_uses_wrapped_neighbours():
    u = np.zeros((7, 6, 5))
    u[0, 0, 0] = 1.0
    v = reference_step(u, Stencil.heat(3, 0.1, "periodic"))
    assert v[-1, 0, 0] == v[1, 0, 0] == v[0, -1, 0] == v[0, 0, -1] == pytest.approx(0.1)
    assert v.sum() == pytest.approx(1.0, rel=1e-14)


def test_generated_kernel_source_is_readable():
    source = kernel_source(3, periodic=False, variable=False)
    assert "def layers(src, dst, a, c0, c1, k0, k1, rows_per_block):" in source
    assert ("#     for i in range(1, nx - 1): w[i] = c0*c[i] + c1*(((((c[i - 1] + c[i + 1]) + s[i]) + n[i])"
            " + b[i]) + t[i])") in source
    assert "c = (src[k - 1, j], src[k, j], src[k + 1, j], src[k + 2, j], src[k + 3, j], src[k + 4, j])" in source
    assert "row4(w, c, w, sides, c0, c1)" in source and "row1(w, c, w, sides, c0, c1)" in source
    assert "wrapped" not in source and "store_fence()" not in source   # Dirichlet: the ends stay fixed
    assert "periodic=True" in kernel_source(2, periodic=True, variable=True)
    streaming = kernel_source(3, periodic=False, variable=False, streaming=True)
    assert "layers=4, nontemporal=True)" in streaming and "store_fence()" in streaming


@pytest.fixture(scope="module")
def vector_rows():
    """The vector row of each stencil form, periodic or not, of one and of four layers, with
    plain and with streaming stores, called from compiled code as the kernels call it."""
    import numba

    from stencil.vector_row import store_fence, vector_row

    def compiled(row):
        @numba.njit
        def call(w, c, a, sides, c0, c1):
            row(w, c, a, sides, c0, c1)
            store_fence()
        return call
    return {form: compiled(vector_row(*form))
            for form in itertools.product((2, 3), (False, True), (False, True), (1, 4), (False, True))}


def expected_row(ndim, variable, periodic, w, c, a, sides, c0, c1):
    """Numpy's version of the vector row: the updated output rows."""
    out = [x.copy() for x in w]
    nx = len(w[0])
    index = np.arange(nx) if periodic else np.arange(1, nx - 1)
    left, right = (index - 1) % nx, (index + 1) % nx
    for r, x in enumerate(out):
        centre = c[r + 1]
        total = centre[left] + centre[right]
        for side in sides[2 * r:2 * r + 2]:
            total = total + side[index]
        total = total + c[r][index] + c[r + 2][index]
        x[index] = (centre[index] + a[r][index] * (total - 2 * ndim * centre[index]) if variable
                    else c0 * centre[index] + c1 * total)
    return out


def test_vector_row_equals_the_stencil_at_every_length_and_alignment(vector_rows):
    """Rows of 0 to 100 points starting at every offset within a cache line (the masked
    peel, both vector loops and the tail), the layers' rows at different offsets (streaming
    stores only where a row shares the first one's alignment), and rows not even 8-byte
    aligned."""
    rng = np.random.default_rng(3)
    c0, c1 = 0.4, 0.1
    nrows = 4 + 6 + 4 + 8
    for length in list(range(41)) + [47, 48, 49, 55, 56, 57, 63, 64, 65, 80, 100]:
        for offset in list(range(9)) + ["bytes"]:
            if offset == "bytes":       # float64 rows at an odd byte address
                raw = np.frombuffer(bytearray(8 * nrows * length + 8), dtype=np.uint8)[3:3 + 8 * nrows * length]
                buf = raw.view(np.float64).reshape(nrows, length)
                buf[...] = rng.random((nrows, length))
                views = list(buf)
            else:
                buf = rng.random((nrows, length + 16))
                views = [buf[q, (offset + 3 * q) % 9:(offset + 3 * q) % 9 + length] for q in range(nrows)]
            for (ndim, variable, periodic, layers, nontemporal), call in vector_rows.items():
                if periodic and length < 3:
                    continue
                w, c = tuple(views[:layers]), tuple(views[4:4 + layers + 2])
                a, sides = tuple(views[10:10 + layers]), tuple(views[14:14 + 2 * layers]) if ndim == 3 else ()
                before = [x.copy() for x in w]
                expected = expected_row(ndim, variable, periodic, w, c, a, sides, c0, c1)
                call(w, c, a, sides, c0, c1)
                form = (length, offset, ndim, variable, periodic, layers, nontemporal)
                assert all(np.array_equal(x, y) for x, y in zip(w, expected)), form
                for x, y in zip(w, before):
                    x[...] = y


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_sweeps_with_long_rows_equal_the_reference(case):
    """Rows long enough for both vector loops, four layers at a time and the rest one by one,
    plain and streaming stores."""
    ndim, boundary, variable = case
    shape = {2: (12, 141), 3: (11, 7, 75)}[ndim]
    u = np.random.default_rng(4).random(shape)
    stencil = make_stencil(ndim, boundary, variable, shape)
    for streaming in (False, True):
        for scheduler in (Sweep(1, streaming_stores=streaming), Sweep(2, 2, streaming_stores=streaming)):
            assert np.array_equal(advance(u, stencil, 5, scheduler=scheduler), reference_run(u, stencil, 5))


def test_command_line_streaming_sweep_equals_the_reference(tmp_path, capsys):
    from stencil.cli import initial_layers, main
    steps = 6
    outputs = []
    for flags in ([], ["--streaming-stores"]):
        outputs.append(tmp_path / f"u{len(flags)}.npy")
        argv = ["run", "--ndim", "3", "--n", "70", "--steps", str(steps), "--scheduler", "sweep",
                "--steps-per-pass", "1", "--output", str(outputs[-1])]
        assert main(argv + flags) == 0
    assert "streaming_stores=True" in capsys.readouterr().out
    u = initial_layers((70,) * 3, 0, 70, 0)
    expected = reference_run(u, Stencil.heat(3, 0.1), steps)
    assert all(np.array_equal(np.load(path), expected) for path in outputs)


def test_roofline_traffic_bound_and_timers():
    from concurrent.futures import ThreadPoolExecutor

    from stencil.roofline import _timer, bytes_per_update, copy_timer, memory_bound, stream
    heat, variable = Stencil.heat(3, 0.1), make_stencil(3, "dirichlet", True, (4, 4, 4))
    assert bytes_per_update(heat, Sweep()) == 24 and bytes_per_update(variable, Sweep()) == 32
    assert bytes_per_update(heat, Sweep(streaming_stores=True)) == 16
    assert bytes_per_update(variable, Sweep(streaming_stores=True)) == 24
    assert bytes_per_update(heat, WavefrontTiles(steps_per_pass=16)) == 1.5
    assert bytes_per_update(heat, PipelinedBlocking(steps_per_pass=4)) == 6
    # STREAM reports 16 B per copied element; the sweep's bound is the copy's element rate
    assert memory_bound(16e9, 24) == pytest.approx(1e9) and memory_bound(16e9, 16) == pytest.approx(1.5e9)
    counts = np.zeros(1001)
    with ThreadPoolExecutor(3) as pool:
        run = _timer(lambda x: x.__iadd__(1.0), (counts,), pool, 3)     # runs once when made
        assert run() > 0 and np.all(counts == 2.0)                      # three parts cover it once each
    bandwidth = stream(threads=2, nbytes=2 ** 22, repeat=2)
    assert set(bandwidth) == {"copy", "triad"} and all(np.isfinite(v) and v > 0 for v in bandwidth.values())
    assert copy_timer(2, 10_000)() > 0


@pytest.mark.parametrize("make, message", [
    (lambda: Stencil(4), "ndim"),
    (lambda: Stencil(2, "neumann"), "boundary"),
    (lambda: Stencil(2, c0=np.nan, c1=1.0), "finite"),
    (lambda: Stencil.heat(3, 0.2), "unstable"),
    (lambda: Stencil(2, coefficient=np.ones((3, 3, 3))), "dimensions"),
    (lambda: Stencil(2, coefficient=np.full((4, 4), np.inf)), "non-finite"),
    (lambda: PipelinedBlocking(block=0), "positive"),
    (lambda: Sweep(threads=1.5), "positive"),
    (lambda: Sweep(streaming_stores="yes"), "True or False"),
])
def test_bad_parameters_raise_clear_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("grid, stencil, steps, message", [
    (np.ones((5, 5)), Stencil.heat(3, 0.1), 1, "dimensions"),
    (np.ones((5, 2)), Stencil.heat(2, 0.1), 1, "too small"),
    (np.full((5, 5), np.nan), Stencil.heat(2, 0.1), 1, "non-finite"),
    (np.ones((5, 5)), Stencil(2, coefficient=np.ones((6, 5))), 1, "coefficient"),
    (np.ones((5, 5)), Stencil.heat(2, 0.1), -1, "steps"),
    (np.ones((5, 5)), Stencil.heat(2, 0.1), 2.5, "steps"),
])
def test_bad_input_raises_and_leaves_the_grid_alone(grid, stencil, steps, message):
    before = grid.copy()
    with pytest.raises(ValueError, match=message):
        advance(grid, stencil, steps)
    assert np.array_equal(grid, before, equal_nan=True)


def test_input_grid_is_not_modified_and_zero_steps_copy():
    u = np.random.default_rng(3).random((9, 9))
    before = u.copy()
    advance(u, Stencil.heat(2, 0.1), 5)
    assert np.array_equal(u, before)
    same = advance(u, Stencil.heat(2, 0.1), 0)
    assert np.array_equal(same, u) and same is not u


@pytest.mark.parametrize("scheduler, method", [
    (PipelinedBlocking(team=2, block=2, steps_per_pass=8), "update"),
    (WavefrontTiles(team=2, tile=2, steps_per_pass=8, fronts_per_sync=2), "update_tile")], ids=repr)
def test_a_failing_kernel_stops_the_whole_team(monkeypatch, scheduler, method):
    """An exception in one thread of the team must not leave the others waiting."""
    from stencil.slab import Slab
    calls = []
    original = getattr(Slab, method)

    def failing(self, *args):
        calls.append(args)
        if len(calls) == 3:
            raise RuntimeError("kernel failed")
        return original(self, *args)
    monkeypatch.setattr(Slab, method, failing)
    with pytest.raises(RuntimeError, match="kernel failed"):
        advance(np.ones((40, 12)), Stencil.heat(2, 0.1), 8, scheduler=scheduler)
    assert len(calls) >= 3


def test_autotune_returns_the_fastest_candidate_and_it_is_correct():
    stencil = Stencil.heat(3, 0.1)
    options = [PipelinedBlocking(2, b, t) for b in (1, 4) for t in (2, 4)]
    best, table = autotune((24, 20, 20), stencil, options)
    assert best in options and [row[0] for row in table].count(best) == 1
    assert table[0][0] is best and all(t > 0 for _, t in table)
    assert [t for _, t in table] == sorted(t for _, t in table)
    u = np.random.default_rng(4).random((24, 20, 20))
    assert np.array_equal(advance(u, stencil, 6, scheduler=best), reference_run(u, stencil, 6))


def test_checkpoint_resume_equals_an_uninterrupted_run(tmp_path):
    u = np.random.default_rng(5).random((30, 17))
    stencil = Stencil.heat(2, 0.2, "periodic")
    scheduler = PipelinedBlocking(2, 3, 4)
    expected = reference_run(u, stencil, 23)
    # a run that stops after 12 steps (as if killed) leaves its checkpoint behind
    part = advance(u, stencil, 12, scheduler=scheduler, checkpoint=Checkpoint(str(tmp_path), 4))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["run.json", "step000000012.rank0.npz"]
    seen = []
    resumed = advance(u, stencil, 23, scheduler=scheduler, checkpoint=Checkpoint(str(tmp_path), 4),
                      callback=lambda step, owned: seen.append(step))
    assert seen[0] == 16                    # it started from step 12, not from 0
    assert np.array_equal(resumed, expected)
    assert np.array_equal(part, reference_run(u, stencil, 12))


def test_checkpoint_of_another_run_is_refused(tmp_path):
    u = np.random.default_rng(6).random((12, 12))
    advance(u, Stencil.heat(2, 0.1), 4, checkpoint=Checkpoint(str(tmp_path), 2))
    with pytest.raises(ValueError, match="another run"):
        advance(u, Stencil.heat(2, 0.2), 4, checkpoint=Checkpoint(str(tmp_path), 2))


def test_parareal_heat_fine_propagator_runs_on_the_stencil_kernels():
    """StencilEuler equals forward Euler through the sparse Laplacian (an independent
    implementation) and serves as Parareal's fine propagator."""
    from parareal import PararealConfig, run_serial
    from parareal.problems import Heat
    from parareal.propagators import RungeKutta, StencilEuler
    from parareal.setups import make_setup
    for dim in (2, 3):
        problem = Heat(n=10, dim=dim, nu=0.1)
        u0 = problem.initial_value()
        got = StencilEuler(problem, 1 / 1000, PipelinedBlocking(2, 2, 4))(u0, 0.0, 0.05)
        expected = RungeKutta(problem, "forward-euler", 1 / 1000)(u0, 0.0, 0.05)
        assert np.allclose(got, expected, rtol=1e-12, atol=1e-14 * np.abs(expected).max())
    setup = make_setup("heat", n=12, t_end=0.2, fine="stencil")
    with pytest.warns(RuntimeWarning, match="cannot be faster"):
        result = run_serial(setup.u0, setup.coarse, setup.fine, PararealConfig(4, setup.t_end, 4))
    fine = setup.u0
    for k in range(4):
        fine = setup.fine(fine, 0.05 * k, 0.05 * (k + 1))
    assert np.array_equal(result.u_end, fine)          # K = P: the serial fine run exactly


# ---- the distributed slab: the same test body at 1, 2 and 4 ranks -------------------

@pytest.mark.mpi
@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("scheduler", [Sweep(2), Sweep(2, steps_per_pass=3, streaming_stores=True),
                                       PipelinedBlocking(2, 2, 3), PipelinedBlocking(1, 3, 1),
                                       WavefrontTiles(2, 2, 3, fronts_per_sync=2)], ids=repr)
def test_hybrid_mpi_equals_the_reference(comm, case, scheduler):
    ndim, boundary, variable = case
    shape = (4 * 5 + 3,) + SHAPES[ndim][1:]     # >= halo depth 3 on 4 ranks, not divisible
    u = np.random.default_rng(7).random(shape)
    stencil = make_stencil(ndim, boundary, variable, shape)
    part = layer_partition(comm, shape[0])
    local = u[part.start:part.end].copy()
    if variable:
        stencil = Stencil(ndim, boundary, coefficient=stencil.coefficient[part.start:part.end])
    result = advance(local, stencil, STEPS, scheduler=scheduler, comm=comm)
    full = make_stencil(ndim, boundary, variable, shape)
    assert np.array_equal(result, reference_run(u, full, STEPS)[part.start:part.end])


@pytest.mark.mpi
def test_scatter_and_gather_round_trip(comm):
    grid = np.arange(7 * 5 * 3, dtype=float).reshape(7, 5, 3) if comm.rank == 0 else None
    local = scatter_layers(comm, grid)
    part = layer_partition(comm, 7)
    assert local.shape == (part.nlocal, 5, 3)
    back = gather_layers(comm, local)
    if comm.rank == 0:
        assert np.array_equal(back, grid)
    else:
        assert back is None


@pytest.mark.mpi(min_size=2)
def test_too_many_ranks_for_the_halo_depth_is_an_error_on_every_rank(comm):
    part = layer_partition(comm, 2 * comm.size + 1)   # 2 or 3 layers per rank
    u = np.ones((part.nlocal, 6))
    with pytest.raises(ValueError, match="halo depth"):
        advance(u, Stencil.heat(2, 0.1), 4, scheduler=PipelinedBlocking(2, 1, 4), comm=comm)


@pytest.mark.mpi(min_size=2)
def test_bad_input_on_one_rank_is_an_error_on_every_rank(comm):
    u = np.ones((6, 6))
    if comm.rank == comm.size - 1:
        u[2, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        advance(u, Stencil.heat(2, 0.1), 2, comm=comm)


@pytest.mark.mpi
def test_distributed_checkpoint_resumes_bit_for_bit(comm, tmp_path_factory):
    directory = comm.bcast(str(tmp_path_factory.mktemp("ckpt")) if comm.rank == 0 else None)
    shape = (4 * comm.size + 5, 9, 8)
    u = np.random.default_rng(8).random(shape)
    stencil = Stencil.heat(3, 0.1, "periodic")
    part = layer_partition(comm, shape[0])
    local = u[part.start:part.end].copy()
    scheduler = PipelinedBlocking(2, 2, 2)
    advance(local, stencil, 6, scheduler=scheduler, comm=comm, checkpoint=Checkpoint(directory, 3))
    result = advance(local, stencil, 10, scheduler=scheduler, comm=comm,
                     checkpoint=Checkpoint(directory, 3))
    assert np.array_equal(result, reference_run(u, stencil, 10)[part.start:part.end])
