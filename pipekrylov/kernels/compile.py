"""Compiling Numba kernels once per machine, safely under MPI.

Kernels are compiled with explicit signatures and ``cache=True``, so a run loads them
from Numba's on-disk cache instead of compiling.  Many ranks compiling into one cache at
once is a known failure (torn index files), so compilation holds an exclusive file lock:
the first rank compiles and writes, the others wait and then only read.

Numba stamps a cached function with its own file's time and size only, and reloads it
after a function it calls (and compiled into it) changed in another file.  The package's
compiled functions call across modules (a loop inlines the runtime, the runtime the
kernels), so their caches are stamped instead with a digest of their module and every
module of the package it imports, and kept in :func:`cache_dir`
(:class:`PackageCacheLocator`).
"""
import ast
import fcntl
import functools
import hashlib
import importlib.util
import os
import pickle
import sys
import threading
from contextlib import contextmanager

import numba
import numba.core.event
from numba.core import caching

from ..files import atomic_write

__all__ = ["cache_dir", "cache_lock", "compiling_notice", "jit", "hot", "compile_source", "compile_for"]

FASTMATH = {"reassoc", "contract", "nsz", "arcp"}   # vectorized reductions; NaN still propagates


def _register_noalias():
    """Numba can mark a kernel's array arguments ``noalias`` (C's ``restrict``): it has
    the compiler flag but no public option for it.  Registered here where Numba has the
    flag.  Without it, LLVM 14 (numba < 0.61) does not vectorize a loop that stores to
    more than a few arrays (it cannot prove they do not overlap): the fused updates ran
    scalar.  Only kernels whose arrays never overlap ask for it.  Numba marks every
    pointer of an array noalias, its reference count's too: disjoint views of one buffer
    (:func:`pipekrylov.kernels.workspace.vectors`) do, as the loops run them without
    reference counts (a null count pointer) and a call from Python gives each argument a
    count of its own; overlapping arrays would not."""
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
    """Folder for generated kernel sources, Numba's cache of the package and the compile lock."""
    path = os.environ.get("PIPEKRYLOV_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pipekrylov")
    os.makedirs(path, exist_ok=True)
    return path


_NOTICE = threading.local()   # whether this thread is inside a compiling_notice block


class _FirstCompile(numba.core.event.Listener):
    """Says, when Numba starts the first compilation, that the run is compiling.  Numba
    fires "numba:compile" on a cache miss only: a run that loads every kernel says
    nothing, however long its set-up takes (a large file, a FIFO waiting for a writer)."""

    def __init__(self):
        self.said = False

    def on_start(self, event):
        if not self.said:
            self.said = True
            print(f"compiling the kernels (the first run only: cached in {cache_dir()}) ...",
                  file=sys.stderr, flush=True)

    def on_end(self, event):
        pass


@contextmanager
def compiling_notice(speak=True):
    """Say once that kernels are being compiled, if one is compiled in the block (a first
    run on a machine compiles them into the caches; later runs load them).  ``speak``:
    whether this process says it (rank 0 of a parallel run).  A block inside another
    says nothing of its own."""
    outer = not getattr(_NOTICE, "active", False)
    listener = _FirstCompile() if speak and outer else None
    if listener is not None:
        numba.core.event.register("numba:compile", listener)
    _NOTICE.active = True
    try:
        yield
    finally:
        if listener is not None:
            numba.core.event.unregister("numba:compile", listener)
        if outer:
            _NOTICE.active = False


@contextmanager
def cache_lock():
    """Exclusive lock across the processes of one machine (flock on a file in cache_dir),
    re-entrant within a process: compiling a module may import one that compiles its own
    kernels (a second flock on a new descriptor of the file would wait for the first)."""
    with _PROCESS_LOCK:
        if _HELD[0]:
            _HELD[0] += 1
            try:
                yield
            finally:
                _HELD[0] -= 1
            return
        with open(os.path.join(cache_dir(), "compile.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _HELD[0] = 1
            try:
                yield
            finally:
                _HELD[0] = 0
                fcntl.flock(lock, fcntl.LOCK_UN)


_PROCESS_LOCK = threading.RLock()   # this process's threads one at a time; its holder may re-enter
_HELD = [0]                         # how deep the holder is in (guarded by the RLock)

# The code a solver loop runs allocates nothing, so it is compiled without Numba's
# reference counting (``_nrt=False``): every array a function takes from a tuple or
# slices is otherwise counted with atomic increments, which cost an SpMV on 256 unknowns
# 0.7 us where its kernel takes 0.3 (measured with the CSR operands' namedtuple).
NO_REFCOUNT = {"_nrt": False}


def hot(function):
    """``numba.njit`` for the runtime and the loops (docs/design.md): cached, without the
    GIL, IEEE arithmetic whose division by zero gives inf or nan (the breakdown checks
    catch them), no reference counting (:data:`NO_REFCOUNT`: it must not allocate)."""
    return numba.njit(function, cache=True, nogil=True, error_model="numpy", **NO_REFCOUNT)


def jit(signatures, noalias=False, refcount=True, **options):
    """``numba.njit(signatures, cache=True, nogil=True)``, compiled eagerly under the lock.
    ``noalias``: the kernel's arrays never overlap (see :data:`NOALIAS`); ``refcount=False``:
    a kernel that allocates nothing, compiled without reference counting (:data:`NO_REFCOUNT`)."""
    options.setdefault("fastmath", FASTMATH)
    if noalias and NOALIAS:
        options["noalias"] = True
    if not refcount:
        options.update(NO_REFCOUNT)

    def decorate(func):
        with cache_lock():
            return numba.njit(signatures, cache=True, nogil=True, **options)(func)
    return decorate


# Modules whose compiled functions others call without importing them: the operators'
# and preconditioners' applies a generic function picks by type (the runtime's registry
# adds their files).  A function that imports such a generic function depends on them.
REGISTERED = {}   # the generic function's module file -> the files of the implementations


# The package's own implementations of the generic functions, by file: a digest that
# depends on the generic functions always takes them, registered yet or not.  (Taken from
# the registry alone, a digest made before one of them was imported differed from the same
# function's in a process that imported it first, and the two processes overwrote each
# other's cache entries: make demo's and python -m pipekrylov warm's did, recompiling
# 15 s of loops at each turn.)  Implementations registered from outside the package join
# through the registry.
GENERIC = os.path.join("runtime", "operators.py")
IMPLEMENTATIONS = ("precond.py", os.path.join("runtime", "csr.py"))


def sources_digest(path):
    """A digest of the module at ``path`` and of every module of the package it imports,
    directly or not (and of the modules :func:`compile_source` generated that it imports,
    and the implementations registered with a generic function it calls): what a
    function compiled from it may have compiled into itself."""
    return _digest(os.path.abspath(path), tuple(sorted((k, tuple(sorted(v))) for k, v in REGISTERED.items())))


@functools.lru_cache(maxsize=None)
def _digest(path, registered):
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = _dependencies(path, package, set())
    if os.path.join(package, GENERIC) in files:
        for implementation in IMPLEMENTATIONS:
            files |= _dependencies(os.path.join(package, implementation), package, set())
    for generic, implementations in registered:
        if generic in files:
            for implementation in implementations:
                files |= _dependencies(implementation, package, set())
    digest = hashlib.sha256()
    for dependency in sorted(files):
        with open(dependency, "rb") as f:
            digest.update(os.path.basename(dependency).encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


def _dependencies(path, package, seen):
    """``path`` and the package's modules it imports, transitively (static imports)."""
    if path in seen or not os.path.exists(path):
        return seen
    seen.add(path)
    with open(path, "rb") as f:
        tree = ast.parse(f.read())
    here = os.path.dirname(path)
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [(alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "", node.level)] + \
                [(f"{node.module}.{alias.name}" if node.module else alias.name, node.level) for alias in node.names]
        for name, level in names:
            if level:
                base = here
                for _ in range(level - 1):
                    base = os.path.dirname(base)
                parts = name.split(".") if name else []
            elif name.split(".")[0] == "pipekrylov":
                base, parts = os.path.dirname(package), name.split(".")
            elif name.startswith("pipekrylov_kernel_"):
                base, parts = cache_dir(), ["kernel_" + name[len("pipekrylov_kernel_"):].split(".")[0]]
            else:
                continue
            target = os.path.join(base, *parts)
            for candidate in (target + ".py", os.path.join(target, "__init__.py")):
                _dependencies(candidate, package, seen)
    return seen


class PackageCacheLocator(caching._CacheLocator):
    """Numba's cache of the package's compiled functions (its modules', and the modules it
    generates): in :func:`cache_dir`, stamped with :func:`sources_digest`, so that a
    function is compiled again when its module or any module it imports has changed
    (Numba stamps it with its own file only, and would load a function that compiled an
    old version of a kernel it calls)."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(cache_dir(), "numba", self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self):
        return self._cache_path

    def get_source_stamp(self):
        return sources_digest(self._py_file)

    def get_disambiguator(self):
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        module = getattr(py_func, "__module__", "") or ""
        if not (module == "pipekrylov" or module.startswith(("pipekrylov.", "pipekrylov_kernel_"))):
            return None
        if not os.path.exists(py_file):
            return None
        self = cls(py_func, py_file)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        return self


if PackageCacheLocator not in caching.CacheImpl._locator_classes:
    caching.CacheImpl._locator_classes.insert(0, PackageCacheLocator)


def _tolerant(load_index):
    """Numba unpickles a cache index before it compares the index's stamp with the source's,
    so an index that another version of the package wrote (the generated kernels' cache is
    shared by the versions that generate the same source; an upgrade finds its old one)
    fails to load where it names a class this version lacks: an ``AttributeError`` from
    deep in the compile, not a recompile.  Read such an index as stale (empty); the next
    save replaces it."""
    @functools.wraps(load_index)
    def load(self):
        try:
            return load_index(self)
        except (AttributeError, ImportError, pickle.UnpicklingError, EOFError, ValueError):
            return {}
    load.tolerant = True
    return load


if not getattr(caching.IndexDataCacheFile._load_index, "tolerant", False):
    caching.IndexDataCacheFile._load_index = _tolerant(caching.IndexDataCacheFile._load_index)


def compile_source(source, name, signatures, fastmath=FASTMATH, noalias=False, refcount=True, **options):
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
    if not refcount:
        options.update(NO_REFCOUNT)
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
