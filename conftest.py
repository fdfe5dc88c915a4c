"""Test-session settings shared by the unit tests and the notebooks that nbval runs."""

import os

# Notebooks are checked against outputs stored in quick mode; set COURSE_QUICK=0 to run them in full.
os.environ.setdefault("COURSE_QUICK", "1")
