"""Helpers for the course "PyTorch on CPU and GPU, hands-on": infrastructure only, the code being taught stays
visible in the notebooks. The package's map, one sub-package per role:

- ``helpers.lesson``: what the lessons teach with (the device picker, the model, data, training,
  checkpoints, memory, timing, speed). ``from helpers.lesson.devices import pick_device``.
- ``helpers.lab``: the lab's instruments and simulated machines (sync and operator recorders, what a spawned
  worker must import, peak memory, child processes, machines a test cannot have, graphs and plots); the checks'
  instruments live here too. ``from helpers.lab.sync_recorder import
  record_syncs``.
- ``helpers.distributed``: the programs ``torchrun`` starts and how a cell starts them.
- ``helpers.clinic``: the device error clinic (``%load_ext helpers.clinic``), the table of known errors
  and the doctor.
- ``helpers.course``: the course's own machinery (its language, settings, run plans, figures recorded on a
  GPU, grading).
- ``helpers.exercises``: the automatic checks, one module per lesson.
- ``helpers.rehearse``: the rehearsal of a learner's own script on a pretend GPU, Mac or laptop, its
  static reading and its port (``python -m helpers.rehearse SCRIPT``).
- ``helpers.colab``: ``setup()``, the setup cell of every notebook.
- ``helpers/__main__.py``: ``python -m helpers COMMAND``, every command a learner types
  (``python -m helpers`` lists them).
- ``helpers/locale``: the translations of the run-time messages.

Submodules are imported on demand, so ``import helpers`` costs next to nothing.
"""

__version__ = "0.1.0"
