"""Helpers for the course "PyTorch on CPU and GPU, hands-on".

Infrastructure only (device picking, data, checks, plots, timing, the doctor): the code being
taught stays visible in the notebooks. Submodules are imported on demand so that
``import helpers`` costs next to nothing.
"""

__version__ = "0.1.0"
