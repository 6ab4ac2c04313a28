"""The layout a compiled loop and its Python driver share: the named fields of the
loop's integer state ``I`` and float state ``F``, the events that end a loop call, and
the points a call resumes at.

Numba reads module-level integers as constants: ``I[ITERATION]`` costs what ``I[0]``
costs and reads as what it is.
"""

# ---------------------------------------------------------------- the integer state I
(ITERATION,      # the iteration the loop is at
 RESUME,         # where the next call starts: BEGIN, TOP, AFTER_TEST or a method's own point
 MAXITER,
 STOP_AT_TEST,   # end the call at each residual test (a monitor to call)
 STOP_EVERY,     # end the call after each iteration (a callback to call)
 REPLACE_EVERY,  # a derived method's residual replacement period (0: none)
 CHECK_EVERY,    # a derived method's drift-check period (0: none)
 HIST,           # residual norms in the history buffer
 TRACE,          # rows in the trace buffer
 CHECK,          # the breakdown check that failed (the method numbers its checks)
 MPI_ERROR,      # an MPI call's error code (0: none)
 SPMVS,          # operator applications since the driver last read the counters
 PCS,            # preconditioner applications since then
 POKE_ROWS,      # rows of an SpMV or a preconditioner between two MPI_Test pokes
 DONE,           # iterations done
 RANKS,          # the communicator's size
 REPLACEMENTS,   # a pipelined method's residual replacements and restarts from x
 RESTARTS,       # BiCGStab's shadow-space restarts, a deep pipeline's restarts
 FIRST,          # the iteration the solve's count starts from
 PRECONDITIONED, # 1 with a preconditioner (a method skips what M = I makes needless)
 WARM,           # 1: stop after the start-up (the driver puts a warm start's state over it)
 INTS) = range(22)

# ---------------------------------------------------------------- the float state F
(ATOL,           # the test's tolerance: max(atol, rtol ||b||), set at the first reduction
 ATOL_GIVEN,
 RTOL,
 BNORM,          # ||b|| (||b||_M for a natural norm), from the first reduction
 LATENCY,        # the injected reduction latency, seconds
 FLAG,           # this rank's failure flag: 1 once its user code or its input failed
 AGREE,          # this solve's arguments, hashed: every reduction checks the ranks agree
 RNORM,          # the last residual norm tested
 VALUE,          # the value a breakdown check failed on; a failed confirmation's true norm
 SPMV_TIME,      # seconds in operator applications since the driver last read the counters
 PC_TIME,        # seconds in the preconditioner since then
 DIVTOL,         # a residual norm at or above DIVTOL ||b|| diverged (PETSc's -ksp_divtol; inf: off)
 FLOATS) = range(13)

# ---------------------------------------------------------------- events
# What ends a loop call: the loop returns the event's number, its index here.
EVENTS = (
    "converged",   # the test passed (a pipelined method's: and b - A x confirmed it)
    "tested",      # a residual test to report (STOP_AT_TEST); the call resumes at AFTER_TEST
    "maxiter",
    "nanorinf",    # a residual norm that is not finite
    "breakdown",   # check I[CHECK] failed at F[VALUE]
    "iterated",    # an iteration done (STOP_EVERY, or a period of the method's)
    "failed",      # a rank's failure flag reached every rank: its error is raised everywhere
    "disagree",    # the ranks were called with different arguments
    "flush",       # the history or the trace buffer is full
    "mpi_error",   # I[MPI_ERROR] holds the code
    "zero_rhs",    # b = 0: x = 0 is the solution
    "bad_rhs",     # b has entries that are not finite
    "restart",     # a method's own: its driver starts a new cycle
    "started",     # the start-up is done (WARM): the driver sets the warm start's state
    "estimate",    # a step of a method's spectral estimate, for its driver to judge
    "diverged",    # a residual norm reached F[DIVTOL] ||b||
)
(CONVERGED, TESTED, MAX_ITERATIONS, NANORINF, BREAKDOWN, ITERATED, FAILED, DISAGREE, FLUSH, MPI_FAILED,
 ZERO_RHS, BAD_RHS, RESTART, STARTED, ESTIMATE, DIVERGED) = range(len(EVENTS))
NONE = -1          # no event: go on

# ---------------------------------------------------------------- resume points
(BEGIN,          # a solve's start: its start-up first
 TOP,            # the top of an iteration
 AFTER_TEST,     # after the residual test the driver made (a monitor's)
 FROM_X,         # a pipelined method starting again from x (its recurrences drifted)
 CONFIRM,        # a test passed: confirm it against b - A x first
 IMAGES) = range(6)   # a warm start: the start-up's vectors given, their images to make
