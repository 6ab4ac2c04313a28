# Metadata lives in pyproject.toml; this file keeps `python setup.py develop` working.
from setuptools import setup

setup()
