"""Files a killed run never leaves half-written: write to a temporary name, fsync, rename."""
import os

__all__ = ["atomic_write"]


def atomic_write(path, write, mode="wb"):
    """Call ``write(file)`` on a temporary file, then rename it to ``path`` (atomic on POSIX).

    A kill inside the write leaves ``<path>.<pid>.tmp`` behind, never a partial ``path``.
    """
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, mode) as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
