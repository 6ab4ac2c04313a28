"""pipekrylov's solvers as PETSc KSP types (petsc4py Python contexts).

Tested from petsc4py (tests/test_petsc_ksp.py: the generators and every matrix of
tests/data but west0479 (which nothing solves), PETSc's jacobi and bjacobi PCs, 1, 2
and 4 ranks) and from a C application
(tests/test_petsc_c_app.py: Poisson and the SPD matrices loaded with MatLoad, 1 and 2
ranks).  ``python -m pipekrylov compare`` puts PETSc's KSPs and these side by side.

From any PETSc application, C or Python::

    -ksp_type python -ksp_python_type pipekrylov.petsc.PipeCG

(a C program also needs ``-python <interpreter>`` and PYTHONPATH covering this package).
The contexts, one per method:

========================  ==========================================================
``pipekrylov.petsc.CG``          classic CG          ``PipeCG``        derived p-CG
``pipekrylov.petsc.CR``          classic CR          ``PipeCR``        derived p-CR
``pipekrylov.petsc.BiCGStab``    classic BiCGStab    ``PipeBiCGStab``  derived p-BiCGStab
``pipekrylov.petsc.GMRES``       classic GMRES(m)    ``PipeCGS``       derived p-CGS
``pipekrylov.petsc.PipeLCG``     p(l)-CG (deep)      ``PipeLGMRES``    p(l)-GMRES (deep)
``pipekrylov.petsc.GroppCG``     Gropp's CG          ``PipePRCG``      predict-and-recompute p-CG
``pipekrylov.petsc.SStepCG``     s-step CG           ``SStepGMRES``    s-step GMRES(m)
``pipekrylov.petsc.PipeFCG``     flexible p-CG       ``PipeGCR``       flexible p-GCR (pipefcg, pipegcr)
``pipekrylov.petsc.PipeFGMRES``  flexible p-GMRES    ``PipeCG2``       p-CG, one reduction per two iterations
                                 (pipefgmres)                          (pipecg2)
========================  ==========================================================

Options under the KSP's prefix: ``-ksp_pipekrylov_replacement`` (automatic residual
replacement), ``-ksp_pipekrylov_replace_every k``, ``-ksp_pipekrylov_loop auto|compiled|python``
(the loop of CG, CR and the derived methods), ``-ksp_pipekrylov_latency seconds``, ``-ksp_pipekrylov_restart m``
(GMRES), ``-ksp_pipekrylov_depth l`` and ``-ksp_pipekrylov_lmin/lmax`` (the deep variants'
depth and shift interval; by default the solver estimates it), ``-ksp_pipekrylov_drift_tol t``
(p(l)-CG's hand-over to p-CG, default 1e-11; 0: off), ``-ksp_pipekrylov_fallback_depth l``
(its depth after a breakdown, default 1; 0 keeps the depth), ``-ksp_pipekrylov_s s`` (s-step
CG's and GMRES's iterations per reduction, default 4), PETSc's ``-ksp_pipefcg_mmax`` and
``-ksp_pipefcg_truncation_type notay|standard`` (PipeFCG; ``-ksp_pipegcr_...`` for PipeGCR),
``-ksp_pipefgmres_shift`` (PipeFGMRES) and
``-ksp_pipekrylov_live_monitor``; PETSc's ``-ksp_cg_single_reduction`` on ``CG`` (the
derived blocking Chronopoulos-Gear loop, ``"b-cg"``); ``-ksp_view`` shows them.

The context implements ``solve`` itself (PETSc's generic loop would add a blocking norm per
iteration) and reports through PETSc: ``-ksp_monitor``, ``-ksp_converged_reason``,
``-ksp_rtol/atol/divtol/max_it``, breakdowns as negative KSPConvergedReason values.  Every
type tests ``||b - A x||_2`` with M on the right: KSPSetUp sets the KSP's norm type and PC
side to (UNPRECONDITIONED, RIGHT) and refuses others asked for; ``-ksp_gmres_restart``,
``-ksp_initial_guess_nonzero`` and a matrix's null space (removed after each
preconditioner application, PETSc having removed the transpose null space from b) are
honoured.  docs/contracts.md lists every option and how it is held.

**The compiled loop.**  At KSPSetUp the context builds the runtime's distributed matrix
from an AIJ operator (:class:`Binding`: its local rows, split into the diagonal block and
the halo part, with its own halo exchange) and maps the KSP's PC: ``none``, ``jacobi``,
and ``bjacobi`` with ILU(0) or ICC(0) blocks (one per rank; ``ilu``/``icc`` on one rank)
become the runtime's own Jacobi and block-Jacobi factors, computed by pipekrylov from the
matrix and accepted only if they give PETSc's PCApply to 1e-10 on a test vector.  Every
method then runs on its compiled loop (:mod:`pipekrylov.loops`, the derived ones generated
by :mod:`pipekrylov.derive.loopgen`), on arrays, with no call into PETSc per iteration.
Any other PC (gamg, sor, ILU(k), ...) is applied through PCApply, and any other Mat type
through MatMult, by the same loop interpreted (``result.loop == "python"``).  A solve
checks the matrices' object states: new values (the same or a new pattern) or another
PC type rebuild the binding, as KSPSetUp would not.

Monitors: with the compiled loop, the residual history is handed to PETSc's monitors
and convergence history after the solve (same lines as live, printed at the end).  A
petsc4py monitor (``ksp.setMonitor``), a monitor option that reads the iterate
(``-ksp_monitor_true_residual``, ...), or ``-ksp_pipekrylov_live_monitor``, is called at
each iteration instead, the solution vector holding the iterate (a call into Python per
iteration: measured in docs/compiled-loop.md).
"""
from .binding import Binding, PETScOperator, PETScPC, aij
from .contexts import (CG, CR, GMRES, BiCGStab, Classic, Context, Deep, Derived, GroppCG, PipeBiCGStab, PipeCG,
                       PipeCG2, PipeCGS, PipeCR, PipeFCG, PipeFGMRES, PipeGCR, PipeLCG, PipeLGMRES, PipePRCG, SStep, SStepCG, SStepGMRES,
                       Flexible)
from .ksp import make_ksp, run_ksp

__all__ = ["CG", "CR", "BiCGStab", "GMRES", "PipeCG", "PipeCR", "PipeBiCGStab", "PipeCGS", "GroppCG", "PipePRCG", "PipeCG2", "PipeLCG",
           "PipeLGMRES", "SStepCG", "SStepGMRES", "PipeFCG", "PipeGCR", "PipeFGMRES", "Context", "Classic", "Derived", "Deep", "SStep", "Flexible", "Binding", "PETScOperator", "PETScPC",
           "aij", "make_ksp", "run_ksp"]
