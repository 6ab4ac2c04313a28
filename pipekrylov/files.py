"""Files a run writes and reads back: never half-written, checked before they are trusted.

Checkpoints live on shared file systems, where another user, a full disk or a killed job
can leave anything under a checkpoint's name.  So a file is written to a temporary name,
synced and renamed (a kill leaves ``<path>.<pid>.tmp``, never a partial ``path``), and it is
read back only through numpy's ``allow_pickle=False`` and JSON (nothing read can run code),
with a CRC32 of its arrays and metadata and the identity of the run that wrote it: a flipped
bit, a truncated copy or another run's file is rejected, naming the file, not resumed.
"""
import io
import json
import os
import shutil
import warnings
import zipfile
import zlib

import numpy as np

__all__ = ["CheckpointError", "CheckpointWarning", "atomic_write", "bind_run", "checkpoint_directory", "load_checked",
           "reject", "run_digest", "save_checked"]

FORMAT = "pipekrylov checkpoint 1"
META = "__meta__"     # the npz entry holding the metadata; no array may take the name


class CheckpointError(ValueError):
    """A checkpoint file that cannot be trusted: unreadable, corrupt, or another run's."""


class CheckpointWarning(UserWarning):
    """A checkpoint file was rejected; the run resumes from an older one or starts over."""


def reject(error):
    """Say that the file of ``error`` (a CheckpointError) is passed over."""
    warnings.warn(f"{error}: not resumed", CheckpointWarning, stacklevel=3)


def atomic_write(path, write, mode="wb"):
    """Call ``write(file)`` on a temporary file, then rename it to ``path`` (atomic on POSIX).

    A failed write (a full disk, a quota, an unwritable directory) removes the temporary
    and raises OSError naming ``path`` and the space left where it was going.
    """
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise OSError(exc.errno, f"could not write {path}: {_reason(exc, path)}") from None


def _reason(exc, path):
    # numpy's tofile reports a short write as "N requested and M written", without errno
    reason = exc.strerror or str(exc)
    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    except OSError:
        return reason
    return f"{reason} ({free / 2**20:.1f} MiB free on its file system)"


def run_digest(identity):
    """A short fingerprint of a run's identity (a JSON-able dict), stored in its files."""
    return f"{zlib.crc32(json.dumps(identity, sort_keys=True).encode()):08x}"


def _checksum(header, arrays):
    crc = zlib.crc32(header.encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        crc = zlib.crc32(f"{name} {a.dtype.str} {a.shape}".encode(), crc)
        crc = zlib.crc32(a.reshape(-1).view(np.uint8), crc)
    return crc


def save_checked(path, arrays, meta, run):
    """Write ``arrays`` (name -> ndarray) and ``meta`` (JSON-able) to ``path`` (an .npz),
    atomically, with their checksum and the run digest ``run``."""
    if META in arrays:
        raise ValueError(f"{META!r} is reserved for the metadata")
    header = json.dumps({"format": FORMAT, "run": run, "meta": meta}, sort_keys=True,
                        default=lambda v: v.item())      # numpy scalars as Python's
    text = json.dumps({"header": header, "crc32": _checksum(header, arrays)})
    # built in memory, then written in one call: a zip writer that fails midway on the
    # file itself leaves a broken ZipFile whose finalizer prints a second traceback
    whole = io.BytesIO()
    np.savez(whole, **{META: np.array(text)}, **arrays)
    atomic_write(path, lambda f: f.write(whole.getbuffer()))


def load_checked(path, run):
    """``(arrays, meta)`` saved by :func:`save_checked` for run digest ``run``.

    Raises CheckpointError, naming ``path``, for anything else: not an npz, a pickle, a
    truncated or empty file, a checksum that does not match, or another run's file.
    """
    try:
        with np.load(path, allow_pickle=False) as saved:
            arrays = {k: saved[k] for k in saved.files if k != META}
            outer = json.loads(str(saved[META]))
        header = outer["header"]
        fields = json.loads(header)
        ok = outer["crc32"] == _checksum(header, arrays)
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
        raise CheckpointError(f"{path}: not a checkpoint this package wrote ({exc})") from None
    if not ok or fields.get("format") != FORMAT:
        raise CheckpointError(f"{path}: corrupt (its contents do not match their checksum)")
    if fields["run"] != run:
        raise CheckpointError(f"{path}: written by another run (run {fields['run']}, this one {run})")
    return arrays, fields["meta"]


def bind_run(directory, identity):
    """Tie ``directory`` to the run ``identity`` through its ``run.json``; return the digest.

    The first run writes ``run.json``; a run with another identity is refused with what
    differs (resuming would return the other run's values), an unreadable one with its
    path."""
    path = os.path.join(directory, "run.json")
    if os.path.exists(path):
        try:
            with open(path) as f:
                saved = json.load(f)
            if not isinstance(saved, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{path} is not a run description this package wrote ({exc}): "
                                  "remove the directory's checkpoints or choose another directory") from None
        if saved != identity:
            differ = "; ".join(f"{k}: {saved.get(k)!r} there, {identity.get(k)!r} here"
                               for k in sorted(set(saved) | set(identity)) if saved.get(k) != identity.get(k))
            raise CheckpointError(f"{directory} holds checkpoints of another run ({differ}): "
                                  "remove them or choose another directory")
    else:
        atomic_write(path, lambda f: json.dump(identity, f), mode="w")
    return run_digest(identity)


def checkpoint_directory(directory):
    """Create ``directory`` (with its parents) or say clearly why it cannot be one."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(f"checkpoint directory {directory} is a file: give a directory "
                                 "(it is created if missing)")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create the checkpoint directory {directory}: {exc.strerror}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(f"checkpoint directory {directory} is not writable")
