"""SpMV against the memory bandwidth, scipy and PETSc, on a 2D Poisson matrix.

    mpiexec -n 1 python -m benchmarks.spmv [--n 1000]
    mpiexec -n 2 python -m benchmarks.spmv [--n 1000]

Prints, from one run: the STREAM-triad bandwidth measured with the same tools (a Numba
loop, timed in the same rounds as the SpMVs); our SpMV's effective bandwidth and its
ratio to the triad; scipy's ``A @ x`` and PETSc's MatMult on the same rows and their
times relative to ours; and (serially) the CSR loop variants that decided the kernel.
Everything is timed from memory: the triad's arrays are three times the last-level
cache, and the cache is flushed before each call (this machine's 300 MB L3 would
otherwise hold the matrix of whichever kernel ran last, and a triad on small arrays
would measure the cache).

Bytes counted per SpMV: 8 + 4 per nonzero (value, uint32 column), 4 per row pointer
(uint32, as PETSc's 32-bit PetscInt), 8 to read x and 8 to write y per row (no
write-allocate, as for the triad's 24 B).  Our kernel's figure counts what it reads:
no row pointers in runs of equal rows, and no column indices in diagonal runs (8 per
nonzero there).  The "CSR GB/s" column divides the CSR bytes by each kernel's time.
"""
import argparse

import numpy as np
from mpi4py import MPI

import pipekrylov as pk
from benchmarks.common import CacheFlush, best_times, last_level_cache_bytes, print_table
from benchmarks.common import triad as triad_kernel


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000, help="grid side: n^2 unknowns")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    A = pk.poisson2d(comm, args.n)
    p = A.partition
    x = np.random.default_rng(comm.rank).random(p.nlocal)
    y = np.empty(p.nlocal)
    nnz = comm.allreduce(A.nnz_local)
    csr_bytes = 12.0 * nnz + 20.0 * A.shape[0]
    our_bytes = comm.allreduce(bytes_read(A.local)) + 16.0 * A.shape[0]

    # this machine's last-level cache (300 MB here) holds a 10^6-row matrix: the triad runs
    # on arrays three times the cache, and every SpMV starts from a flushed cache.  The
    # triad takes its turn in the same rounds: the machine's bandwidth drifts over minutes.
    n_triad = max(p.nlocal, last_level_cache_bytes() // 8 // comm.size)
    ta, tb, tc = np.zeros(n_triad), np.ones(n_triad), np.ones(n_triad)
    flush = CacheFlush(comm.size)
    rows = A.to_scipy()  # scipy's own kernel on the same local rows (plus ghost columns)
    x_full = np.zeros(A.shape[0])
    x_full[p.start:p.end] = x

    from petsc4py import PETSc
    B = PETSc.Mat().createAIJ(((p.nlocal, A.shape[0]), (p.nlocal, A.shape[0])),
                              csr=(rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType),
                                   rows.data), comm=comm)
    xv, yv = B.createVecs()
    xv.array[:] = x
    times = best_times(comm, {"triad": lambda: triad_kernel(ta, tb, tc, 3.0), "ours": lambda: A.matvec(x, y),
                              "scipy": lambda: rows @ x_full, "petsc": lambda: B.mult(xv, yv)},
                       repeat=30, before=flush)
    triad = 24.0 * n_triad * comm.size / times["triad"]
    t_ours, t_scipy, t_petsc = times["ours"], times["scipy"], times["petsc"]
    assert np.allclose(yv.array, A.matvec(x, y))

    gbs = lambda t, nbytes=csr_bytes: nbytes / t / 1e9  # noqa: E731
    table = [["STREAM triad (Numba)", "-", f"{triad / 1e9:.1f}", "1.00", "-", "-"]] + [
        [name, f"{t * 1e3:.2f}", f"{gbs(t, nbytes):.1f}", f"{gbs(t, nbytes) / (triad / 1e9):.2f}",
         f"{gbs(t):.1f}", f"{t / t_ours:.2f}"]
        for name, t, nbytes in (("pipekrylov SpMV", t_ours, our_bytes), ("scipy A @ x", t_scipy, csr_bytes),
                                ("PETSc MatMult", t_petsc, csr_bytes))]
    if comm.rank == 0:
        print(f"2D Poisson {args.n}x{args.n} ({A.shape[0]} unknowns, {nnz} nonzeros), {comm.size} rank(s), "
              "best of 30 interleaved rounds, caches flushed before each call")
    print_table(comm, ["kernel", "ms", "GB/s", "of triad", "CSR GB/s", "time / ours"], table)
    if comm.size == 1:
        index_variants(rows)


def bytes_read(block):
    """Matrix bytes our kernel reads for this block (see the module docstring)."""
    lengths = np.diff(block.indptr.astype(np.int64))
    if block.runs is None:
        return 12.0 * len(block.data) + 4.0 * len(lengths)
    on_diagonals = np.repeat(block.runs.diagonal.astype(bool), np.diff(block.runs.start))
    return 12.0 * len(block.data) - 4.0 * lengths[on_diagonals].sum()


def index_variants(A):
    """The textbook loop with other index types, beside the kernel we use."""
    import numba
    from pipekrylov.kernels import csr_matvec
    from pipekrylov.kernels.spmv import RowRuns
    from pipekrylov.matrix.distributed import CSRBlock

    @numba.njit(fastmath=False)
    def textbook(indptr, indices, data, x, y):
        for i in range(y.shape[0]):
            s = 0.0
            for k in range(indptr[i], indptr[i + 1]):
                s += data[k] * x[indices[k]]
            y[i] = s
    x = np.random.default_rng(0).random(A.shape[1])
    y = np.empty(A.shape[0])
    variants = {}
    for pointer, index in [(np.int64, np.int32), (np.int64, np.int64), (np.int64, np.uint32)]:
        args = (A.indptr.astype(pointer), A.indices.astype(index), A.data, x, y)
        variants[f"textbook, {pointer.__name__} pointers, {index.__name__} columns"] = \
            (lambda args=args: textbook(*args))
    ours = (A.indptr.astype(np.uint32), A.indices.astype(np.uint32), A.data, x, y)
    variants["uint32 pointers, uint32 columns, unrolled by 2"] = lambda: csr_matvec(*ours)
    block = CSRBlock(A)
    if block.runs is not None:
        by_rows = CSRBlock(A)
        by_rows.runs = RowRuns.of(by_rows.indptr, by_rows.indices, by_rows.data, A.shape[1], diagonals=False)
        variants["runs of equal rows, straight-line per row length"] = \
            lambda: by_rows.multiply_rows(0, A.shape[0], x, y)
        variants["ours: and diagonal runs by diagonal"] = lambda: block.multiply_rows(0, A.shape[0], x, y)
    times = best_times(MPI.COMM_SELF, variants, repeat=20, before=CacheFlush())
    print("\nCSR loop variants (serial, same rows, interleaved best of 20, caches flushed):")
    print_table(MPI.COMM_SELF, ["variant", "ms"], [[k, f"{v * 1e3:.2f}"] for k, v in times.items()])


if __name__ == "__main__":
    main()
