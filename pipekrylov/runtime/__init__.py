"""The compiled runtime every Krylov loop is written on (ordinary modules Numba compiles).

* :mod:`.layout`: the loop's named state fields, its events and resume points;
* :mod:`.reduce`: the fused reductions (start, poke, wait, blocking), with the trace,
  the injected latency, the failure flag and the ranks' agreement on the arguments;
* :mod:`.operators`: ``apply_operator`` and ``precondition``, generic over the operand
  types that matrix formats and preconditioners register (:mod:`.csr` is the CSR
  format's, with its halo exchange);
* :mod:`.steps`: the residual test and the end of an iteration.

No Krylov method lives here, and no MPI call is made below: the calls go through
:mod:`pipekrylov.parallel.native`.  The loops (:mod:`pipekrylov.loops`) import what they use.
"""
