"""Test-session settings shared by the unit tests and the notebooks that nbval runs."""

import os

# Notebooks are checked against outputs stored in quick mode; set COURSE_QUICK=0 to run them in full.
os.environ.setdefault("COURSE_QUICK", "1")

# Some CUDA setups print a harmless one-time UserWarning at a process's first backward() (notebook 04
# explains it); the notebooks' kernels inherit this filter, so a stored output does not depend on it.
CUBLAS_CONTEXT_WARNING = "ignore:Attempting to run cuBLAS:UserWarning"  # no comma: it separates filters
os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), CUBLAS_CONTEXT_WARNING]))

# The tests read the course's messages in English whatever this machine's locale; tests of the Chinese edition
# set COURSE_LANG=zh-CN themselves (helpers/course/i18n.py).
os.environ["COURSE_LANG"] = "en"
