"""Compiling Numba kernels once per machine, safely under MPI.

Kernels are compiled with explicit signatures and ``cache=True``, so a run loads them
from Numba's on-disk cache instead of compiling.  Many ranks compiling into one cache at
once is a known failure (torn index files), so compilation holds an exclusive file lock:
the first rank compiles and writes, the others wait and then only read.
"""
import fcntl
import hashlib
import importlib.util
import os
import sys
import threading
from contextlib import contextmanager

import numba

from ..atomic import atomic_write

__all__ = ["cache_dir", "cache_lock", "compiling_notice", "jit", "compile_source", "compile_for"]

FASTMATH = {"reassoc", "contract", "nsz", "arcp"}   # vectorized reductions; NaN still propagates


def _register_noalias():
    """Numba can mark a kernel's array arguments ``noalias`` (C's ``restrict``): it has
    the compiler flag but no public option for it.  Registered here where Numba has the
    flag.  Without it, LLVM 14 (numba < 0.61) does not vectorize a loop that stores to
    more than a few arrays (it cannot prove they do not overlap): the fused updates ran
    scalar.  Only kernels whose arrays never overlap ask for it, and their callers pass
    separately allocated arrays (Numba marks every pointer of an array noalias, its
    reference count too, so views of one buffer would not do)."""
    try:
        from numba.core import cpu, options
        from numba.core.compiler import Flags
        if not hasattr(Flags, "noalias"):
            return False
        if not hasattr(cpu.CPUTargetOptions, "noalias"):
            cpu.CPUTargetOptions.noalias = options._mapping("noalias")
        return True
    except (ImportError, AttributeError):
        return False


NOALIAS = _register_noalias()
_COMPILED = {}  # kernels compiled from source in this process, by source digest, name and options


def cache_dir():
    """Folder for generated kernel sources and the compile lock."""
    path = os.environ.get("PIPEKRYLOV_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pipekrylov")
    os.makedirs(path, exist_ok=True)
    return path


_NOTICE = threading.local()   # whether this thread is inside a compiling_notice block


@contextmanager
def compiling_notice(speak=True, after=1.0):
    """Say once that kernels are being compiled, if the block takes longer than ``after``
    seconds (a first run on a machine compiles them into the caches; later runs load
    them).  ``speak``: whether this process says it (rank 0 of a parallel run).  A block
    inside another says nothing of its own."""
    notice = threading.Timer(after, lambda: print(
        f"compiling the kernels (the first run only: cached in {cache_dir()} and next to the "
        "packages' sources) ...", file=sys.stderr, flush=True))
    outer = not getattr(_NOTICE, "active", False)
    if speak and outer:
        notice.start()
    _NOTICE.active = True
    try:
        yield
    finally:
        notice.cancel()
        if outer:
            _NOTICE.active = False


@contextmanager
def cache_lock():
    """Exclusive lock across the processes of one machine (flock on a file in cache_dir)."""
    with open(os.path.join(cache_dir(), "compile.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def jit(signatures, noalias=False, **options):
    """``numba.njit(signatures, cache=True, nogil=True)``, compiled eagerly under the lock.
    ``noalias``: the kernel's arrays never overlap (see :data:`NOALIAS`)."""
    options.setdefault("fastmath", FASTMATH)
    if noalias and NOALIAS:
        options["noalias"] = True

    def decorate(func):
        with cache_lock():
            return numba.njit(signatures, cache=True, nogil=True, **options)(func)
    return decorate


def compile_source(source, name, signatures, fastmath=FASTMATH, noalias=False, **options):
    """Compile generated Python ``source`` defining ``name`` into a cached Numba kernel.

    ``fastmath=False`` keeps IEEE semantics (no FMA contraction), for kernels that must
    reproduce a reference bit for bit.  ``signatures=None`` compiles at the first call
    instead, for the types given then (:func:`compile_for`); ``noalias``: the kernel's
    arrays never overlap (see :data:`NOALIAS`); ``options`` go to Numba.

    The source is written to a file named by its hash (Numba caches only functions that
    live in a file), then imported and compiled under the lock; a process compiles each
    (source, signatures, fastmath) once and returns the same kernel afterwards.
    """
    if noalias and NOALIAS:
        options["noalias"] = True
    if options:   # Numba's cache key holds no compile options: the source must differ
        source = f"# compiled with {sorted(options.items())}\n" + source
    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    key = (digest, name, repr(signatures),
           repr(sorted(fastmath) if isinstance(fastmath, (set, frozenset)) else fastmath))
    if key in _COMPILED:
        return _COMPILED[key]
    path = os.path.join(cache_dir(), f"kernel_{digest}.py")
    with cache_lock():      # also serializes this process's threads (flock per open file)
        if key in _COMPILED:
            return _COMPILED[key]
        if not os.path.exists(path):
            atomic_write(path, lambda f: f.write(source), mode="w")
        name_in_modules = f"pipekrylov_kernel_{digest}"
        module = sys.modules.get(name_in_modules)
        if module is None:
            # Registered before it runs: Numba's cache records the module by name and
            # looks it up in sys.modules when it reloads the kernel.
            spec = importlib.util.spec_from_file_location(name_in_modules, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name_in_modules] = module
            spec.loader.exec_module(module)
        eager = [] if signatures is None else [signatures]
        kernel = numba.njit(*eager, cache=True, nogil=True, fastmath=fastmath, **options)(getattr(module, name))
        _COMPILED[key] = kernel
        # generated code that imports this module then calls the kernel, not the source
        setattr(module, name, kernel)
        return kernel


def compile_for(kernel, args):
    """Compile (or load from the cache) a lazily compiled kernel for the types of
    ``args``, under the lock: the first call of a generated loop on a machine.

    Returns the compiled function for those types, to be called with arguments of the
    same types: it skips the dispatcher's typing of the arguments, which for tuples of
    many arrays costs tens of microseconds a call (Numba types a tuple by a
    fingerprint; past a few dozen bytes the fingerprint is not reproducible in Numba
    0.60, so its cache misses and every call is typed in Python)."""
    signature = tuple(numba.typeof(a) for a in args)
    if signature not in kernel.overloads:
        with cache_lock():
            kernel.compile(signature)
    return kernel.overloads[signature].entry_point
