"""The rehearsal: run a learner's own script on a CPU-only machine as on a GPU, several GPUs, a Mac or a laptop
without a GPU, with the device's rules and the CPU's real numbers; read it for what ties it to one machine; port
it to the device-agnostic form. ``python -m helpers.rehearse SCRIPT`` (``--help``).

- ``pretend_gpu``: the pretend device (tags on CPU tensors) and the machine it belongs to;
- ``script_run``: a script run under it, with step limits and offline datasets, and what it met;
- ``static_check``: the script read without running it (libcst);
- ``port``: the device-agnostic rewrite (``--fix``, libcst);
- ``findings``: the kinds of problem, their fixes and lessons, and the report in text and JSON;
- ``magic``: ``%load_ext helpers.rehearse`` and the ``%%rehearse`` cell magic.
"""


def load_ipython_extension(ipython) -> None:
    """``%load_ext helpers.rehearse``: the ``%%rehearse`` cell magic (``magic``)."""
    from helpers.rehearse.magic import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    from helpers.rehearse.magic import unload_ipython_extension as unload

    unload(ipython)
