"""p(l)-CG's iterations as one compiled function (the compiled loop of a deep pipeline).

The start of each cycle (the ``2l`` Lanczos steps, the exact first columns of ``G``,
the shifts) stays in Python: it is ``O(l)`` blocking steps per cycle.  From iteration
``l`` on, :func:`loop_source` writes the iteration of :func:`pipekrylov.deep.plcg` as a
Numba function on the runtime (:mod:`pipekrylov.parallel.runtime`): the operator
application poking the oldest reduction in flight, the wait for column ``c`` of ``G``
(``l`` iterations after its start), its completion by symmetry and one Cholesky step,
the drift check, the Lanczos column, the intermediate bases, the next column's fused
kernel and its ``MPI_Iallreduce``, and the CG iterate by D-Lanczos.  Up to ``l``
reductions are in flight, each in its own slot of send and receive buffers and request
handles.  The kernels it calls are the Python loop's (:func:`pipekrylov.kernels.fused_kernel`)
and its small dense algebra sums in the same order, so the two loops' residual norms
agree bit for bit.

What ends a call (an *event*, as in the derived methods' compiled loop): a convergence
to confirm against ``b - A x``, a breakdown (the indefinite matrix, an LDL^T pivot, a
square root, the drift check), the iteration limit, a callback or a monitor line, full
buffers.  Reductions still in flight when a cycle ends are completed by ``drain``.
"""
import functools

import numpy as np
from mpi4py import MPI

from ..kernels import fused_kernel
from ..parallel import native
from ..parallel.runtime import EVENTS, FloatSlot, IntSlot, runtime_source
from ..solvers.compiled import BUFFERED, LoopFunctions, collect, fused_call, fused_import, loop_state, operands
from ..solvers.result import Breakdown
from .basis import BasisBreakdown, BasisDrift, SqrtBreakdown

__all__ = ["loop_source", "CompiledCycle", "compiled_cycle", "breakdown", "next_column", "level_update",
           "solution_update", "INDEFINITE", "PIVOT"]

# resume points of the loop, set by the driver before each call
TOP, TEST, AFTER_TEST = 0, 1, 2
# what a breakdown event stands for (the loop's I[CHECK])
INDEFINITE, PIVOT, SQUARE_ROOT, DRIFT = range(4)
# the loop's own scalars, kept in S between calls
ETA, ZETA, FLOOR, BETA, DRIFT_TOL, IT0 = range(6)
# the buffers of reductions left in flight by an MPI error (never freed under MPI)
_ABANDONED = []


def next_column(l):
    """The fused kernel: u, z three-term updates and the l + 1 dots of the next column,
    and the drift check's."""
    return fused_kernel(["u = d*u - g*ui - e*um", "z = d*z - g*zi - e*zm"],
                        dots=["u.v"] + [f"u.y{j}" for j in range(1, l)] + ["u.z", "u.vp"],
                        scalars=["d", "g", "e"])


def level_update():
    """The fused kernel of one intermediate basis: q^(m)_(k+1) from q^(m)_k, q^(m)_(k-1) and
    the level above."""
    return fused_kernel(["q = a*qk + d*top - e*qm"], scalars=["a", "d", "e"])


def solution_update():
    """The fused kernel of D-Lanczos: the search direction p and the iterate x."""
    return fused_kernel(["p = a*p + t*v", "x = x + zeta*p"], scalars=["a", "t", "zeta"])


def loop_source(l):
    """The module of p(l)-CG's compiled loop at depth ``l`` (source text)."""
    I, F = IntSlot, FloatSlot
    nc, lu, su = next_column(l), level_update(), solution_update()
    ndots = l + 2
    column = fused_call(nc, "next_column", {
        "u": "U[s1]", "ui": "U[s0]", "um": "U[sp]", "z": "Z[s1]", "zi": "Z[s0]", "zm": "Z[sp]",
        "v": "Q[0, c % 3]", "vp": "Q[0, k % 3]", **{f"y{j}": f"Z[(c + {j}) % L]" for j in range(1, l)}},
        "coef", "send[(it + 1) % NS]")
    level = fused_call(lu, "level_update", {"q": "Q[m, (k + 1) % 3]", "qk": "Q[m, k % 3]", "top": "above",
                                       "qm": "qm"}, "coef", "out")
    solution = fused_call(su, "solution_update", {"p": "p", "v": "Q[0, k % 3]", "x": "x"}, "coef", "out")
    imports = [fused_import(k, name) for name, k in (("next_column", nc), ("level_update", lu), ("solution_update", su))]
    return f'''# the compiled loop of: p({l})-CG (pipekrylov.deep.plcg)
{runtime_source()}
{chr(10).join(imports)}

l = {l}
L = {l + 3}      # the ring of z and u: z_(it-l+2) .. z_(it+1)
NS = {l + 1}     # reductions in flight: one slot each
RG = {l + 2}     # the ring of gamma and delta
WIDTH = {2 * l + 1}
KEEP = {2 * l + 2}
NDOTS = {ndots}


@numba.njit(nogil=True, cache=True)
def gget(Gd, r, c):
    """G[r, c] of pipekrylov.deep.basis.BandedColumns' data (zero outside the band)."""
    if r < 0 or r > c or r <= c - WIDTH:
        return 0.0
    return Gd[c % KEEP, r - c + WIDTH - 1]


@numba.njit(nogil=True, cache=True)
def gset(Gd, r, c, value):
    Gd[c % KEEP, r - c + WIDTH - 1] = value


@numba.njit(nogil=True, cache=True)
def pymax(a, b):
    """Python's max(a, b)."""
    return b if b > a else a


@numba.njit(nogil=True, cache=True)
def slot_of(R, RQ, slot):
    return (R[0], RQ[slot:slot + 1], R[2], R[3])


@numba.njit(nogil=True, cache=True)
def start_column(slot, send, recv, R, RQ, t0s, active, column, I, F):
    """The Iallreduce of send[slot] (the dots and the failure flag) into recv[slot]."""
    send[slot, NDOTS] = F[{F.FLAG}]
    t0s[slot] = MPI_Wtime()
    active[slot] = column
    if I[{I.RANKS}] == 1:
        recv[slot, :] = send[slot, :]
        return
    handles = R[0]
    e = MPI_Iallreduce(send[slot].ctypes.data, recv[slot].ctypes.data, NDOTS + 1, handles[0], handles[1],
                       handles[2], RQ[slot:slot + 1].ctypes.data)
    if e != 0:
        I[{I.MPI_ERROR}] = e


@numba.njit(nogil=True, cache=True)
def wait_column(slot, R, RQ, t0s, active, I, F, trace):
    """Complete slot's reduction, not before its start + the injected latency; traced."""
    Rs = slot_of(R, RQ, slot)
    t0 = MPI_Wtime()
    ready = t0s[slot] + F[{F.LATENCY}]
    while MPI_Wtime() < ready:
        poke(Rs)
    if I[{I.RANKS}] > 1:
        e = MPI_Wait(RQ[slot:slot + 1].ctypes.data, R[3].ctypes.data)
        if e != 0:
            I[{I.MPI_ERROR}] = e
    t = I[{I.TRACE}]
    trace[t, 0] = t0s[slot]
    trace[t, 1] = t0s[slot]
    trace[t, 2] = t0
    trace[t, 3] = t0
    trace[t, 4] = MPI_Wtime()
    trace[t, 5] = active[slot]
    I[{I.TRACE}] = t + 1
    active[slot] = -1


def drain(R, RQ, t0s, active, I, F, trace):
    """Complete every reduction still in flight, oldest first."""
    while True:
        slot = -1
        for s in range(NS):
            if active[s] >= 0 and (slot < 0 or active[s] < active[slot]):
                slot = s
        if slot < 0:
            return 0
        wait_column(slot, R, RQ, t0s, active, I, F, trace)


def loop(x, p, Z, U, Q, EXZ, EXU, EXL, Gd, gamma, delta, sigma, S, send, recv, t0s, active, RQ,
         I, F, hist, trace, A, P, R):
    it = I[{I.ITERATION}]
    resume = I[{I.RESUME}]
    it0 = int(S[{IT0}])                # the solve's iterations before this cycle
    columns = EXZ.shape[0] + l        # the start's exact columns of G (2l): z_j of l < j <= columns
    exact_levels = EXL.shape[1] - 1   # the intermediate bases known exactly: 1 .. this
    last_start = I[{I.MAXITER}] - it0
    eta, zeta, floor, beta, drift_tol = S[{ETA}], S[{ZETA}], S[{FLOOR}], S[{BETA}], S[{DRIFT_TOL}]
    coef = np.zeros(3)
    out = np.zeros(1)
    event = -1
    while True:
        if resume == {TOP}:
            if I[{I.HIST}] >= hist.shape[0] or I[{I.TRACE}] + 1 > trace.shape[0]:
                event = {EVENTS.index("flush")}  # flush
                break
            c = it - l + 1
            k = it - l
            s0, s1 = it % L, (it + 1) % L
            if it + 1 > columns:   # w = B z_it, overlapping the reductions in flight
                Rc = slot_of(R, RQ, c % NS)
                spmv(Z[s0], U[s1], A, Rc, I, F, True)
                precondition(U[s1], Z[s1], P, Rc, I, F, False)
            if c > columns:        # column c of G: its Gram entries, started l iterations ago
                slot = c % NS
                wait_column(slot, R, RQ, t0s, active, I, F, trace)
                if I[{I.MPI_ERROR}] != 0:
                    event = {EVENTS.index("mpi_error")}  # mpi_error
                    break
                gram = recv[slot]
                if gram[NDOTS] > 0.0:
                    event = {EVENTS.index("failed")}  # failed
                    break
                Gd[c % KEEP, :] = 0.0
                for r in range(max(0, c - 2 * l), c - l):
                    gset(Gd, r, c, gget(Gd, c - l, r + l))
                drift = abs(gram[NDOTS - 1] - gget(Gd, c - l - 1, c)) / np.sqrt(pymax(gram[NDOTS - 2], 1e-300))
                if c <= columns + l + 3:
                    floor = pymax(floor, drift)
                if drift_tol > 0.0 and not drift <= pymax(drift_tol, 100.0 * floor):
                    I[{I.CHECK}] = {DRIFT}
                    F[{F.VALUE}] = drift
                    event = {EVENTS.index("breakdown")}  # breakdown
                    break
                gset(Gd, c - l, c, gram[0])
                # complete_column(G, c, c - l + 1, gram[1:-1]), summed in index order
                lo = max(0, c - WIDTH + 1)
                for i in range(l - 1):
                    r = c - l + 1 + i
                    s = 0.0
                    for q in range(lo, r):
                        s += gget(Gd, q, r) * gget(Gd, q, c)
                    gset(Gd, r, c, (gram[1 + i] - s) / gget(Gd, r, r))
                s = 0.0
                for q in range(lo, c):
                    s += gget(Gd, q, c) * gget(Gd, q, c)
                square = gram[l] - s
                if not square > 0:
                    I[{I.CHECK}] = {SQUARE_ROOT}
                    F[{F.VALUE}] = square
                    event = {EVENTS.index("breakdown")}  # breakdown
                    break
                gset(Gd, c, c, np.sqrt(square))
            # gamma_k and delta_k, column k of the Lanczos matrix
            g_prev = gget(Gd, k - 1, k) * delta[(k - 1) % RG] if k > 0 else 0.0
            if c <= l:
                delta[k % RG] = gget(Gd, c, c) / gget(Gd, k, k)
                gamma[k % RG] = (gget(Gd, k, c) + sigma[k] * gget(Gd, k, k) - g_prev) / gget(Gd, k, k)
            else:
                delta[k % RG] = gget(Gd, c, c) * delta[(k - l) % RG] / gget(Gd, k, k)
                gamma[k % RG] = (gget(Gd, k, c) * delta[(k - l) % RG] - g_prev) / gget(Gd, k, k) + gamma[(k - l) % RG]
            gamma_k, delta_k = gamma[k % RG], delta[k % RG]
            d_prev = delta[(k - 1) % RG] if k > 0 else 0.0
            # the intermediate bases q^(m)_(k+1), m = 0 .. l-1 (m = 0 is v)
            for m in range(l):
                above = Q[m + 1, k % 3] if m + 1 < l else Z[s0]
                qm = Q[m, (k - 1) % 3] if k > 0 else above
                coef[0] = (sigma[m] - gamma_k) / delta_k
                coef[1] = 1.0 / delta_k
                coef[2] = d_prev / delta_k
                {level}
            if k + 1 <= exact_levels:
                for m in range(l):
                    Q[m, (k + 1) % 3, :] = EXL[m, k + 1]
            if it + 1 <= columns:
                U[s1, :] = EXU[it - l]
                Z[s1, :] = EXZ[it - l]
            else:
                # z_(it+1), u_(it+1) by the three-term recurrence, the next column's dots
                sp = (it - 1) % L if it > l or l > 1 else s0
                coef[0] = 1.0 / delta_k
                coef[1] = gamma_k / delta_k
                coef[2] = d_prev / delta_k
                {column}
                if it + 1 <= last_start:
                    start_column((it + 1) % NS, send, recv, R, RQ, t0s, active, it + 1, I, F)
            # D-Lanczos: the CG iterate x_(k+1) from the LDL^T factorization of T
            if k == 0:
                eta, zeta = gamma[0], beta
            else:
                lam = delta[(k - 1) % RG] / eta
                eta = gamma_k - lam * delta[(k - 1) % RG]
                zeta = -lam * zeta
            if not eta > 0:
                I[{I.CHECK}] = {INDEFINITE} if k == 0 else {PIVOT}
                F[{F.VALUE}] = eta
                event = {EVENTS.index("breakdown")}  # breakdown
                break
            coef[0] = -d_prev / eta
            coef[1] = 1.0 / eta
            coef[2] = zeta
            {solution}
            I[{I.DONE}] = it0 + k + 1
            if I[{I.STOP_EVERY}] != 0:
                resume = {TEST}
                event = {EVENTS.index("iterated")}  # iterated
                break
            resume = {TEST}
        k = it - l
        if resume == {TEST}:
            rnorm = abs(zeta) * delta[k % RG] / eta
            F[{F.RNORM}] = rnorm
            if I[{I.STOP_AT_TEST}] != 0:
                resume = {AFTER_TEST}
                event = {EVENTS.index("tested")}  # tested
                break
            hist[I[{I.HIST}]] = rnorm
            I[{I.HIST}] += 1
            if not np.isfinite(rnorm):
                event = {EVENTS.index("nanorinf")}  # nanorinf
                break
            if rnorm <= F[{F.ATOL}]:
                event = {EVENTS.index("converged")}  # converged
                break
        if it0 + k + 1 >= I[{I.MAXITER}]:
            event = {EVENTS.index("maxiter")}  # maxiter
            break
        it += 1
        resume = {TOP}
    I[{I.ITERATION}] = it
    I[{I.RESUME}] = resume
    S[{ETA}], S[{ZETA}], S[{FLOOR}] = eta, zeta, floor
    return event
'''


class ColumnLabels:
    """The trace's label of each reduction, by its column (as the Python loop names them)."""

    def __getitem__(self, column):
        return f"G[:,{column}]"


class CompiledCycle:
    """The compiled iterations of one p(l)-CG cycle at depth ``l``; called by
    :func:`pipekrylov.deep.plcg` after the cycle's start, with its state."""

    def __init__(self, l):
        self.l = l
        self.source = loop_source(l)
        self.functions = LoopFunctions(self.source, ["loop", "drain"])

    def ready(self, run):
        """Compile (or load) the loop for this solve's operands; raises LoopCompileError
        where Numba cannot type it.  Before any collective, on every rank alike."""
        l = self.l   # arrays of one row: what decides the types is their kind, not their size
        exact = np.zeros((l, 1))
        self._functions(run, *self._arguments(run, np.zeros(1), exact, exact, np.zeros((l, 1, 1)),
                                              np.zeros((2 * l + 2, 2 * l + 1)), np.zeros(l), 0.0, None))
        return self

    def _functions(self, run, args, drain_args):
        return self.functions.get(operands(run)[3], run.comm.Get_rank() == 0,
                                  [("loop", args), ("drain", drain_args)])

    def _arguments(self, run, x, EXZ, EXU, exact_levels, Gdata, sigma, beta, drift_tol):
        """The loop's and drain's arguments: ``EXZ``, ``EXU`` the start's z_j and u_j for
        l < j <= its columns, ``exact_levels`` its intermediate bases."""
        l, n = self.l, len(x)
        Z, U, Q = np.zeros((l + 3, n)), np.zeros((l + 3, n)), np.zeros((l, 3, n))
        S = np.array([0.0, 0.0, 0.0, beta, -1.0 if drift_tol is None else drift_tol, run.iterations])
        send, recv = np.zeros((l + 1, l + 3)), np.zeros((l + 1, l + 3))
        t0s, active = np.zeros(l + 1), np.full(l + 1, -1, dtype=np.int64)
        RQ = native.handles([MPI.REQUEST_NULL] * (l + 1))
        ints, floats = loop_state(run)
        hist, trace = np.empty(BUFFERED), np.empty((BUFFERED, 6))
        A, P, R, _ = operands(run)
        gamma, delta = np.zeros(l + 2), np.zeros(l + 2)
        args = (x, np.zeros(n), Z, U, Q, EXZ, EXU, exact_levels, Gdata, gamma, delta,
                np.asarray(sigma, dtype=float), S, send, recv, t0s, active, RQ, ints, floats, hist, trace, A, P, R)
        return args, (R, RQ, t0s, active, ints, floats, trace)

    def __call__(self, run, x, sigma, G, beta, u, z, levels, exact, drift_tol):
        """Iterate from iteration ``l`` of the cycle (its start done in Python): True when
        converged (confirmed by ``b - A x``), False at the iteration limit or when
        ``b - A x`` does not confirm it; raises as the Python loop does.  Completes every
        reduction it started before it returns or raises."""
        l, n, columns = self.l, len(x), exact.columns
        EXZ, EXU = np.empty((max(0, columns - l), n)), np.empty((max(0, columns - l), n))   # z_j, u_j, l < j <= columns
        for j in range(l + 1, columns + 1):
            EXU[j - l - 1], EXZ[j - l - 1] = exact.z(j)
        jmax = max(0, columns - l + 1)             # q^(m)_j known exactly for j <= jmax
        EXL = np.zeros((l, jmax + 1, n))
        for m in range(l):
            for j in range(1, jmax + 1):
                EXL[m, j] = exact.level(m, j)
        exact.release()   # the start's basis: what the loop reads of it is copied above
        args, drain_args = self._arguments(run, x, EXZ, EXU, EXL, G.data.copy(), sigma, beta, drift_tol)
        p, Z, U, Q = args[1:5]
        ints, floats, hist, trace = args[18:22]
        for j in range(1, l + 1):
            Z[j % (l + 3)], U[j % (l + 3)] = z[j], u[j]
        for m in range(l):
            Q[m, 0] = levels[m][0]
        loop, drain = self._functions(run, args, drain_args)
        I, F = IntSlot, FloatSlot
        ints[I.ITERATION], ints[I.RESUME] = l, TOP
        labels = ColumnLabels()
        mpi_failed = False
        try:
            while True:
                floats[F.FLAG] = float(run.reduction.failure is not None)
                event = EVENTS[loop(*args)]
                collect(run, ints, floats, hist, trace, labels)
                if event in ("flush", "iterated", "tested"):
                    if event == "iterated":
                        run.iterated(x)
                    elif event == "tested" and run.converged(run.iterations, float(floats[F.RNORM])):
                        return run.true_residual_passes(x, natural=True)
                    continue
                if event == "converged":
                    return run.true_residual_passes(x, natural=True)
                if event == "maxiter":
                    return False
                if event == "nanorinf":
                    raise Breakdown("diverged_nanorinf", "residual norm is not finite")
                if event == "failed":
                    run.reduction.raise_failure()
                if event == "breakdown":
                    raise breakdown(int(ints[I.CHECK]), float(floats[F.VALUE]), int(ints[I.ITERATION]) - l, p)
                mpi_failed = True
                raise MPI.Exception(int(ints[I.MPI_ERROR]))
        finally:
            if mpi_failed:   # MPI may still write into what is in flight: keep it alive
                _ABANDONED.append(args)
            else:            # the reductions still in flight, on every rank alike
                drain(*drain_args)
                collect(run, ints, floats, hist, trace, labels)



def breakdown(check, value, k, direction):
    """What ends iteration ``k`` of a cycle at check ``check`` (INDEFINITE, PIVOT,
    SQUARE_ROOT, DRIFT) with ``value``; both loops raise it."""
    c = k + 1
    if check == INDEFINITE:
        return Breakdown("diverged_indefinite_mat", f"matrix is not positive definite: (A v, v) = {value:.3e} <= 0")
    if check == PIVOT:
        return BasisBreakdown(f"LDL^T pivot {value:.3e} <= 0 in iteration {k}")
    if check == SQUARE_ROOT:
        return SqrtBreakdown(c, value)
    return BasisDrift(c, value, direction.copy())


@functools.lru_cache(maxsize=None)
def compiled_cycle(l):
    """The compiled cycle of depth ``l`` (its module generated once per process)."""
    return CompiledCycle(l)
