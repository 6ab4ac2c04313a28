"""The benchmarks, run from the repository root as modules: ``python -m benchmarks.spmv``.

Each prints its figures against a baseline measured in the same run; docs/ quotes the
command beside each table it made.
"""
