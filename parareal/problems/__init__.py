"""Problems: a right-hand side, an initial value and a state shape; nothing about time
stepping.  A problem has ``shape``, ``initial_value()`` and ``rhs(t, u, out)``; a linear
one also ``operator()`` (the sparse ``L`` of ``u' = L u``) for implicit propagators.
"""
from .burgers import Burgers3D
from .heat import Heat
from .odes import Brusselator, Lorenz

__all__ = ["Burgers3D", "Heat", "Lorenz", "Brusselator"]
