"""Shim so setuptools runs cffi_build.py (cffi's ``cffi_modules`` has no pyproject form)."""

from setuptools import setup

setup(cffi_modules=["cffi_build.py:ffibuilder"])
