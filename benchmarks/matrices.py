"""The SuiteSparse matrices of tests/data and the helpers the tests check with, for the
benchmarks that run the same cases: tests/helpers.py, loaded by its path (the tests are
not a package)."""
import importlib.util
import os

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "helpers.py")
_spec = importlib.util.spec_from_file_location("pipekrylov_test_helpers", _PATH)
helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(helpers)

SPD, NONSYMMETRIC = helpers.SPD, helpers.NONSYMMETRIC
load, problem, scipy_solve = helpers.load, helpers.problem, helpers.scipy_solve

__all__ = ["SPD", "NONSYMMETRIC", "load", "problem", "scipy_solve", "helpers"]
