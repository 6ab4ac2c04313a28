"""Distributed CSR: construction, SpMV, halo exchange and the readers, against scipy."""
import numpy as np
import pytest
import scipy.sparse as sp

import pipekrylov as pk
from pipekrylov.matrix import generators
from pipekrylov.parallel import RowPartition
from helpers import MATRICES, load, matrix_path, reference_stencil, rel

GENERATED = ["poisson2d", "poisson3d", "anisotropic2d", "convection_diffusion2d"]


def check_spmv(D, A, seed=0):
    x = np.random.default_rng(seed).standard_normal(A.shape[0])
    y = D.gather(D.matvec(D.scatter(x)))
    assert rel(y, A @ x) < 1e-12
    # the chunked product that pokes progress gives the same result
    y2 = D.gather(D.matvec(D.scatter(x), progress=lambda: None))
    assert rel(y2, A @ x) < 1e-12


@pytest.mark.mpi
@pytest.mark.parametrize("kind", GENERATED)
@pytest.mark.parametrize("large", [False, True], ids=["small", "diagonal-runs"])
def test_generators_equal_independent_assembly(comm, kind, large):
    """Tiny grids run by CSR rows; larger ones by diagonal runs inside each rank's block."""
    n = {False: 3, True: 20}[large] if kind == "poisson3d" else {False: 5, True: 40}[large]
    D = getattr(generators, kind)(comm, n)
    A = reference_stencil(kind, n)
    assert D.shape == A.shape and D.nnz == A.nnz
    runs = D.local.runs
    assert large == (runs is not None and bool(runs.diagonal.any()))
    check_spmv(D, A)


@pytest.mark.mpi
@pytest.mark.parametrize("name", MATRICES)
def test_matrix_market_reader_and_spmv(comm, name):
    D = pk.read_matrix_market(matrix_path(name), comm)
    A = load(name)
    assert D.shape == A.shape and D.nnz == A.nnz  # explicit zeros kept, as mmread keeps them
    rows = D.to_scipy()
    p = D.partition
    assert abs(rows - A[p.start:p.end]).max() == 0
    check_spmv(D, A)


def row_run_cases():
    rng = np.random.default_rng(5)
    yield "5-point", reference_stencil("poisson2d", 37), True, True
    yield "7-point", reference_stencil("poisson3d", 20), True, True
    banded = sp.diags([rng.random(500) for _ in range(7)], list(range(-3, 4)), shape=(500, 500), format="lil")
    banded[250, 0] = 1.0       # one row off the pattern cuts a diagonal run in two
    yield "banded with a row off the pattern", banded.tocsr(), True, True
    yield "12 per row (longer than the fixed code)", sp.diags(
        [rng.random(500) for _ in range(12)], list(range(-6, 6)), shape=(500, 500), format="csr"), True, False
    yield "empty rows", sp.csr_matrix((np.ones(3), ([0, 50, 99], [1, 2, 3])), shape=(100, 100)), True, False
    yield "irregular", sp.random(300, 300, density=0.05, random_state=2, format="csr"), False, False


@pytest.mark.parametrize("case", list(row_run_cases()), ids=lambda c: c[0])
def test_spmv_by_row_runs_equals_scipy_for_any_row_range(case):
    """The run kernel (rows of equal length, straight-line code per length; rows on a few
    common diagonals by diagonal, padded with zeros) serves stencil matrices; irregular
    ones keep the CSR loop.  Row ranges that start and end inside a run (the chunks of an
    overlapped SpMV) give the same numbers as one call, and the diagonal runs the same
    numbers as runs of equal rows only (a padded zero leaves a sum from the left as is)."""
    from pipekrylov.kernels.spmv import MAX_PADDING, RowRuns
    from pipekrylov.matrix.distributed import CSRBlock
    name, A, uses_runs, uses_diagonals = case
    block = CSRBlock(A)
    assert (block.runs is not None) == uses_runs
    assert uses_diagonals == (uses_runs and bool(block.runs.diagonal.any()))
    x = np.random.default_rng(1).random(A.shape[1])
    whole, chunked = np.full(A.shape[0], np.nan), np.full(A.shape[0], np.nan)
    block.multiply_rows(0, A.shape[0], x, whole)
    n = A.shape[0]
    for c in range(7):
        block.multiply_rows(n * c // 7, n * (c + 1) // 7, x, chunked)
    assert np.array_equal(whole, chunked)
    assert rel(whole, A @ x) < 1e-14
    if uses_diagonals:
        runs = block.runs
        for g in np.flatnonzero(runs.diagonal):    # each diagonal run pads at most its share
            a, b = runs.start[g], runs.start[g + 1]
            stored = (b - a) * runs.length[g]
            assert stored - (block.indptr[b] - block.indptr[a]) <= MAX_PADDING * stored
        block.runs = RowRuns.of(block.indptr, block.indices, block.data, A.shape[1], diagonals=False)
        assert not block.runs.diagonal.any()
        by_rows = np.full(n, np.nan)
        block.multiply_rows(0, n, x, by_rows)
        assert np.array_equal(whole, by_rows)


def test_stencil_block_is_one_diagonal_run_between_its_boundary_lines():
    """A 2D Laplacian's rows at the grid's left and right edges lack a diagonal: padded,
    they stay in one diagonal run from the second grid line to the last but one."""
    from pipekrylov.matrix.distributed import CSRBlock
    nx = 24
    runs = CSRBlock(reference_stencil("poisson2d", nx)).runs
    g = [g for g in np.flatnonzero(runs.diagonal) if runs.length[g] == 5]
    assert len(g) == 1 and runs.start[g[0]] == nx and runs.start[g[0] + 1] == nx * nx - nx
    o = runs.offset_ptr[g[0]]
    assert list(runs.offsets[o:o + 5]) == [-nx, -1, 0, 1, nx]
    assert len(runs.length) <= 9   # the two boundary lines: a few runs each


@pytest.mark.mpi
@pytest.mark.parametrize("root", [None, 0])
def test_from_scipy_whole_or_on_root(comm, root):
    A = load("orsirr_1")
    D = pk.DistributedCSR.from_scipy(A if root is None or comm.rank == root else None, comm, root=root)
    check_spmv(D, A)
    # balanced by nonzeros: no rank has more than its share plus one row's worth
    counts = comm.allgather(D.nnz_local)
    assert max(counts) <= A.nnz / comm.size + np.diff(A.indptr).max()


@pytest.mark.mpi
def test_partition_with_empty_ranks_and_no_ghosts(comm):
    """All rows on rank 0: the other ranks own nothing and no rank has ghosts."""
    A = load("nos4")
    starts = [0] + [A.shape[0]] * comm.size
    D = pk.DistributedCSR.from_scipy(A, comm, partition=RowPartition(comm, starts))
    assert D.halo.nghosts == 0
    check_spmv(D, A)


@pytest.mark.mpi
def test_block_diagonal_partition_has_no_ghosts(comm):
    blocks = [load("bcsstk01")] * comm.size
    A = sp.block_diag(blocks, format="csr")
    starts = np.arange(comm.size + 1) * blocks[0].shape[0]
    D = pk.DistributedCSR.from_scipy(A, comm, partition=RowPartition(comm, starts))
    assert D.halo.nghosts == 0 and len(D.ghost_rows) == 0
    check_spmv(D, A)


@pytest.mark.mpi
def test_halo_exchange_delivers_the_ghost_values(comm):
    D = pk.poisson2d(comm, 11)
    x = np.arange(D.shape[0], dtype=float) ** 1.5
    D.halo.start(D.scatter(x))
    ghosts = D.halo.finish()
    assert np.array_equal(ghosts, x[D.ghost_columns])
    if comm.size > 1:
        assert D.halo.nghosts > 0


@pytest.mark.mpi
def test_petsc_binary_round_trip_with_petsc4py(comm, tmp_path_factory):
    PETSc = pytest.importorskip("petsc4py.PETSc")
    A = load("hor_131")
    path = None
    if comm.rank == 0:
        path = str(tmp_path_factory.mktemp("petsc") / "hor.petsc")
        M = PETSc.Mat().createAIJ(A.shape, csr=(A.indptr, A.indices, A.data), comm=PETSc.COMM_SELF)
        viewer = PETSc.Viewer().createBinary(path, "w", comm=PETSc.COMM_SELF)
        M.view(viewer)
        viewer.destroy()
    path = comm.bcast(path)
    D = pk.read_petsc_binary(path, comm)
    check_spmv(D, A)
    if comm.rank == 0:  # and our writer is read back by PETSc
        ours = path + ".ours"
        pk.write_petsc_binary(ours, A)
        viewer = PETSc.Viewer().createBinary(ours, "r", comm=PETSc.COMM_SELF)
        B = PETSc.Mat().load(viewer)
        indptr, indices, data = B.getValuesCSR()
        assert abs(sp.csr_matrix((data, indices, indptr), shape=A.shape) - A).max() == 0


# ------------------------------------------------------------------ headers the readers refuse
# (a header is read before anything is allocated: a size beyond the machine's memory, or
# no rows at all, is a ValueError naming the file on every rank)
def _shared_file(comm, tmp_path_factory, name, data):
    path = None
    if comm.rank == 0:
        path = tmp_path_factory.mktemp("headers") / name
        path.write_bytes(data)
        path = str(path)
    return comm.bcast(path)


HUGE = 10 ** 12
HEADERS = {
    "mm too large": ("huge.mtx", f"%%MatrixMarket matrix coordinate real general\n{HUGE} {HUGE} 1\n1 1 1.0\n".encode(),
                     f"huge.mtx: its header's {HUGE} x {HUGE} matrix with 1 entries needs about"),
    "mm 0x0": ("empty.mtx", b"%%MatrixMarket matrix coordinate real general\n0 0 0\n",
               "the matrix has no rows (0 x 0)"),
    # PETSc binary: the class id, rows, columns, nonzeros, then the row lengths
    "petsc 0x0": ("empty.petsc", np.array([1211216, 0, 0, 0], dtype=">i4").tobytes(), "the matrix has no rows (0 x 0)"),
}


@pytest.mark.mpi
@pytest.mark.parametrize("case", sorted(HEADERS))
def test_a_header_beyond_memory_or_without_rows_is_refused(comm, tmp_path_factory, case):
    name, data, fragment = HEADERS[case]
    path = _shared_file(comm, tmp_path_factory, name, data)
    with pytest.raises(ValueError) as error:
        pk.read_matrix(path, comm)
    assert fragment in str(error.value)


@pytest.mark.mpi
def test_a_petsc_header_beyond_memory_is_refused(comm, tmp_path_factory, monkeypatch):
    import pipekrylov.memory
    monkeypatch.setattr(pipekrylov.memory, "available_memory", lambda: 2 ** 20)
    n = 100_000   # a file that is all there, but needs 2 MB a rank
    data = (np.array([1211216, n, n, 0], dtype=">i4").tobytes() + np.zeros(n, dtype=">i4").tobytes())
    path = _shared_file(comm, tmp_path_factory, "large.petsc", data)
    with pytest.raises(ValueError, match=f"large.petsc: its header's {n} x {n} matrix with 0 entries needs about"):
        pk.read_matrix(path, comm)


@pytest.mark.mpi
def test_a_corrupt_gzip_stream_is_a_value_error(comm, tmp_path_factory):
    import gzip
    stream = gzip.compress(open(matrix_path("nos4"), "rb").read())
    path = _shared_file(comm, tmp_path_factory, "corrupt.mtx.gz", stream[:40] + b"x" * 24 + stream[64:])
    with pytest.raises(ValueError, match="corrupt.mtx.gz: corrupt gzip stream"):
        pk.read_matrix(path, comm)
