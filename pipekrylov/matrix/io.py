"""Parallel readers: Matrix Market and PETSc binary.

Each rank reads its own share of the file; entries then travel to the rank owning their
row (row blocks balanced by nonzeros).  No rank ever holds the whole matrix: the largest
global object is one integer per row (the row counts that decide the partition).
"""
import os
import stat

import numpy as np
import scipy.sparse as sp

from ..memory import check_memory
from ..parallel import collective_check
from ..parallel.partition import RowPartition
from .distributed import DistributedCSR

__all__ = ["read_matrix", "read_matrix_market", "read_petsc_binary", "write_petsc_binary"]

PETSC_MAT_CLASSID = 1211216
GZIP_MAGIC = b"\x1f\x8b"


def read_matrix(path, comm):
    """Read a Matrix Market file (``.gz`` too) or a PETSc binary matrix, whichever the
    file holds: the format is read from its first bytes, not from its name.  Collective.

    A gzipped file is decompressed and parsed by rank 0 and distributed from there (it
    cannot be read in parallel byte ranges), and so is a pipe or a FIFO (``--matrix
    <(zcat a.mtx.gz)``), which can be read once only; the others are read in parallel.
    """
    kind = None
    what = f"read_matrix({os.path.basename(str(path))})"
    with collective_check(comm, what):
        if comm.Get_rank() == 0:
            kind = _sniff(path) if stat.S_ISREG(os.stat(path).st_mode) else "stream"
    kind = comm.bcast(kind, root=0)
    if kind == "petsc":
        return read_petsc_binary(path, comm)
    if kind == "mm":
        return read_matrix_market(path, comm)
    A = None
    with collective_check(comm, what):
        if comm.Get_rank() == 0:
            A = _read_on_one_rank(path, kind)
    return DistributedCSR.from_scipy(A, comm, root=0)


def _sniff(path):
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.lower().startswith(b"%%matrixmarket"):
        return "mm"
    if len(head) >= 4 and int.from_bytes(head[:4], "big") == PETSC_MAT_CLASSID:
        return "petsc"
    raise ValueError(f"{path}: neither a Matrix Market file (no %%MatrixMarket banner) nor a "
                     f"PETSc binary matrix (no MAT_FILE_CLASSID), gzipped or not")


def _read_on_one_rank(path, kind):
    """Rank 0: the whole matrix of a gzipped file or a stream, through the parallel
    readers' own checks (on one rank, from a temporary copy)."""
    import tempfile
    from mpi4py import MPI
    with tempfile.NamedTemporaryFile(suffix=".matrix") as tmp:
        if kind == "stream":
            _copy_stream(path, tmp)
            kind = _sniff(tmp.name)
            if kind != "gzip":
                return read_matrix(tmp.name, MPI.COMM_SELF).to_scipy()
            source = tmp.name
        else:
            source = path
        return _read_gzipped_matrix_market(path, source)


def _read_gzipped_matrix_market(path, source):
    """The matrix of the gzipped Matrix Market file ``source`` (``path``: its name for
    the messages), decompressed into a temporary file."""
    import gzip
    import tempfile
    import zlib
    from mpi4py import MPI
    with gzip.open(source, "rb") as f, tempfile.NamedTemporaryFile(suffix=".mtx") as tmp:
        try:
            while chunk := f.read(1 << 24):
                tmp.write(chunk)
        except (zlib.error, EOFError, gzip.BadGzipFile) as exc:
            raise ValueError(f"{path}: corrupt gzip stream ({exc})") from None
        tmp.flush()
        if not _sniff(tmp.name) == "mm":
            raise ValueError(f"{path}: a gzipped file that is not a Matrix Market file")
        return read_matrix_market(tmp.name, MPI.COMM_SELF).to_scipy()


FIFO_WAIT = 10.0   # seconds a FIFO may stay without a writer before the reader gives up


def _copy_stream(path, out):
    """Copy a pipe's or a FIFO's bytes into the file ``out``.  A FIFO is opened without
    waiting for a writer (a plain open would block, silently, until one comes) and
    refused when none has written after FIFO_WAIT seconds."""
    import time
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        os.set_blocking(fd, True)   # reads now wait for data while a writer is connected
        deadline = time.monotonic() + FIFO_WAIT
        received = False
        while True:
            chunk = os.read(fd, 1 << 24)
            if chunk:
                out.write(chunk)
                received = True
            elif received:
                break
            elif time.monotonic() > deadline:   # no writer yet (EOF without data)
                raise ValueError(f"{path}: a pipe or FIFO that nothing wrote to in {FIFO_WAIT:.0f} s")
            else:
                time.sleep(0.05)
        out.flush()
    finally:
        os.close(fd)


# ------------------------------------------------------------------ Matrix Market
def read_matrix_market(path, comm):
    """Read a square sparse Matrix Market file into a :class:`DistributedCSR`.  Collective.

    Supports ``coordinate`` files with ``real``, ``integer`` or ``pattern`` fields and
    ``general``, ``symmetric`` or ``skew-symmetric`` storage; explicit zeros are kept as
    stored entries (as scipy.io.mmread does).  A malformed file raises ``ValueError`` on
    every rank, complex data ``TypeError``.
    """
    header = None
    with collective_check(comm, f"read_matrix_market({os.path.basename(str(path))})"):
        if comm.Get_rank() == 0:
            header = _mm_header(path)
    field, symmetry, n_rows, n_cols, nnz, data_start = comm.bcast(header, root=0)
    with collective_check(comm, "read_matrix_market"):
        if n_rows != n_cols:
            raise ValueError(f"matrix must be square, got {n_rows} x {n_cols}")
        if n_rows < 1:
            raise ValueError(f"{path}: the matrix has no rows ({n_rows} x {n_cols})")
        if nnz < 0:
            raise ValueError(f"{path}: the header announces {nnz} entries")
        data_bytes = max(os.path.getsize(path) - data_start, 0)   # each rank's file (one node's may be missing)
    stored = nnz * (1 if symmetry == "general" else 2)
    check_memory(f"{path}: its header's {n_rows} x {n_cols} matrix with {nnz} entries",
                 _mm_memory(n_rows, nnz, stored, data_bytes, comm.Get_size()), comm)
    with collective_check(comm, "read_matrix_market"):
        rows, cols, vals = _mm_entries(path, comm, field, data_start)
        bad = (rows < 1) | (rows > n_rows) | (cols < 1) | (cols > n_cols)
        if bad.any():
            k = np.flatnonzero(bad)[0]
            raise ValueError(f"entry ({rows[k]}, {cols[k]}) outside the {n_rows} x {n_cols} matrix")
        if symmetry != "general" and np.any(rows < cols):
            raise ValueError(f"{symmetry} file stores an entry above the diagonal")
        if not np.all(np.isfinite(vals)):
            raise ValueError("non-finite value in the file")
    with collective_check(comm, "read_matrix_market"):
        total = comm.allreduce(len(rows))
        if total != nnz:
            raise ValueError(f"header announces {nnz} entries, file holds {total}")
    rows, cols = rows - 1, cols - 1
    if symmetry != "general":
        off = rows != cols
        sign = -1.0 if symmetry == "skew-symmetric" else 1.0
        rows, cols, vals = (np.concatenate([rows, cols[off]]), np.concatenate([cols, rows[off]]),
                            np.concatenate([vals, sign * vals[off]]))
    return _distribute_entries(comm, n_rows, np.bincount(rows, minlength=n_rows).astype(np.int64, copy=False),
                               rows, cols, vals)


def _mm_memory(n_rows, nnz, stored, data_bytes, ranks):
    """Bytes a rank needs to read a Matrix Market file: two integers per row of the whole
    matrix (the row counts that decide the partition), its share of the text, and per
    entry the parser's Python objects (about 250 bytes for a line's three tokens), then
    per stored entry the triplets, their sorted and received copies and the CSR
    (about 100 bytes)."""
    return 16 * n_rows + (data_bytes + 250 * nnz + 100 * stored) / ranks


def _mm_header(path):
    with open(path, "rb") as f:
        banner = f.readline().decode("ascii", "replace").split()
        if len(banner) != 5 or banner[0].lower() != "%%matrixmarket" or banner[1].lower() != "matrix":
            raise ValueError(f"{path}: not a Matrix Market file (bad banner {' '.join(banner)!r})")
        layout, field, symmetry = (b.lower() for b in banner[2:])
        if layout != "coordinate":
            raise ValueError(f"{path}: only the sparse 'coordinate' layout is supported, not {layout!r}")
        if field in ("complex", "hermitian") or symmetry == "hermitian":
            raise TypeError(f"{path}: unsupported dtype: complex matrices are not supported")
        if field not in ("real", "integer", "pattern", "double"):
            raise ValueError(f"{path}: unknown field {field!r}")
        if symmetry not in ("general", "symmetric", "skew-symmetric"):
            raise ValueError(f"{path}: unknown symmetry {symmetry!r}")
        line = f.readline()
        while line and (line.startswith(b"%") or not line.strip()):
            line = f.readline()
        try:
            n_rows, n_cols, nnz = (int(t) for t in line.split())
        except ValueError:
            raise ValueError(f"{path}: bad size line {line!r}") from None
        return field, symmetry, n_rows, n_cols, nnz, f.tell()


def _mm_entries(path, comm, field, data_start):
    """This rank's entries: the lines starting in its share of the bytes."""
    size, rank = comm.Get_size(), comm.Get_rank()
    end_of_file = os.path.getsize(path)
    span = end_of_file - data_start
    lo = data_start + span * rank // size
    hi = data_start + span * (rank + 1) // size
    with open(path, "rb") as f:
        lo = _line_start(f, lo, data_start)
        hi = _line_start(f, hi, data_start)
        f.seek(lo)
        chunk = f.read(hi - lo)
    width = 2 if field == "pattern" else 3
    try:
        tokens = np.array(chunk.split(), dtype=np.float64)
    except ValueError:
        raise ValueError(f"{path}: non-numeric entry in the data lines") from None
    lines = [line for line in chunk.splitlines() if line.strip()]
    if len(tokens) != width * len(lines):
        raise ValueError(f"{path}: data lines must have {width} fields")
    tokens = tokens.reshape(-1, width)
    if np.any(tokens[:, :2] != np.round(tokens[:, :2])):
        raise ValueError(f"{path}: non-integer row or column index")
    vals = np.ones(len(tokens)) if field == "pattern" else tokens[:, 2].copy()
    return tokens[:, 0].astype(np.int64), tokens[:, 1].astype(np.int64), vals


def _line_start(f, offset, data_start):
    """The first line start at or after ``offset`` (a line cut by ``offset`` goes to the left)."""
    if offset <= data_start:
        return data_start
    f.seek(offset - 1)
    if f.read(1) == b"\n":
        return offset
    f.readline()
    return f.tell()


# ------------------------------------------------------------------ PETSc binary
def read_petsc_binary(path, comm):
    """Read a matrix written by PETSc's ``MatView`` to a binary viewer.  Collective.

    Each rank reads the row lengths, then only its rows' column indices and values.
    (32-bit-index PETSc builds, as Debian's; the file is big-endian.)
    """
    header = None
    with collective_check(comm, f"read_petsc_binary({os.path.basename(str(path))})"):
        header = np.fromfile(path, dtype=">i4", count=4)
        if len(header) < 4 or header[0] != PETSC_MAT_CLASSID:
            raise ValueError(f"{path}: not a PETSc binary matrix file")
        n_rows, n_cols, nnz = (int(v) for v in header[1:])
        if n_rows != n_cols:
            raise ValueError(f"matrix must be square, got {n_rows} x {n_cols}")
        if n_rows < 1:
            raise ValueError(f"{path}: the matrix has no rows ({n_rows} x {n_cols})")
        expected = 16 + 4 * n_rows + 12 * nnz
        if os.path.getsize(path) < expected:
            raise ValueError(f"{path}: truncated ({os.path.getsize(path)} bytes, need {expected})")
    # the row lengths (read as 4 bytes, kept as 8, summed), this rank's share of the
    # columns and values (read, converted) and its CSR
    check_memory(f"{path}: its header's {n_rows} x {n_cols} matrix with {nnz} entries",
                 20 * n_rows + 40 * nnz / comm.Get_size(), comm)
    with collective_check(comm, f"read_petsc_binary({os.path.basename(str(path))})"):
        lengths = np.fromfile(path, dtype=">i4", count=n_rows, offset=16).astype(np.int64)
        if lengths.sum() != nnz or np.any(lengths < 0):
            raise ValueError(f"{path}: row lengths do not add up to {nnz}")
    cumulative = np.concatenate([[0], np.cumsum(lengths)])
    partition = RowPartition.balanced(comm, cumulative)
    first, last = cumulative[partition.start], cumulative[partition.end]
    with collective_check(comm, "read_petsc_binary"):
        cols = np.fromfile(path, dtype=">i4", count=last - first, offset=16 + 4 * n_rows + 4 * first)
        vals = np.fromfile(path, dtype=">f8", count=last - first,
                           offset=16 + 4 * n_rows + 4 * nnz + 8 * first)
        indptr = cumulative[partition.start:partition.end + 1] - first
        matrix = DistributedCSR.from_local_rows(partition, indptr, cols.astype(np.int64),
                                                vals.astype(np.float64), n_cols)
    return matrix


def write_petsc_binary(path, A):
    """Write a scipy.sparse matrix in PETSc's binary format (serial, any one rank)."""
    A = sp.csr_matrix(A)
    A.sort_indices()
    with open(path, "wb") as f:
        np.array([PETSC_MAT_CLASSID, *A.shape, A.nnz], dtype=">i4").tofile(f)
        np.diff(A.indptr).astype(">i4").tofile(f)
        A.indices.astype(">i4").tofile(f)
        A.data.astype(">f8").tofile(f)


# ------------------------------------------------------------------ shared
def _distribute_entries(comm, n, counts, rows, cols, vals):
    """Send (row, col, value) triplets to the owners of their rows; build the matrix."""
    from mpi4py import MPI
    # in place: with many rows, these two are the largest arrays of every rank
    comm.Allreduce(MPI.IN_PLACE, counts)
    cumulative = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=cumulative[1:])
    del counts
    partition = RowPartition.balanced(comm, cumulative)
    del cumulative
    owner = partition.owner(rows)
    order = np.argsort(owner, kind="stable")
    send_counts = np.bincount(owner, minlength=comm.Get_size()).astype(np.int64)
    recv_counts = np.empty_like(send_counts)
    comm.Alltoall(send_counts, recv_counts)
    received = []
    for array in (rows, cols, vals):
        out = np.empty(recv_counts.sum(), dtype=array.dtype)
        comm.Alltoallv([np.ascontiguousarray(array[order]), send_counts], [out, recv_counts])
        received.append(out)
    rows, cols, vals = received
    local = sp.coo_matrix((vals, (rows - partition.start, cols)), shape=(partition.nlocal, n)).tocsr()
    return DistributedCSR.from_local_rows(partition, local.indptr, local.indices, local.data, n)
