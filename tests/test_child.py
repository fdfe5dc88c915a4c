"""helpers.lab.child: children whose output a lesson stores write plain text (no colour Jupyter's kernel forces)."""

import os

from helpers.lab.child import capture_child_stderr, plain_children, plain_env, run_python

SHOW = "import os; print(os.environ.get('FORCE_COLOR'), os.environ.get('PYTHON_COLORS'))"


def test_plain_env_drops_forced_colour_and_turns_python_colours_off():
    env = plain_env({"FORCE_COLOR": "1", "CLICOLOR_FORCE": "1", "PATH": "/bin", "PYTHON_COLORS": "1"})
    assert env == {"PATH": "/bin", "PYTHON_COLORS": "0"}


def test_children_see_no_forced_colour_and_the_environment_comes_back(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # what ipykernel sets
    monkeypatch.delenv("PYTHON_COLORS", raising=False)
    assert run_python(SHOW).split() == ["None", "0"]
    with plain_children():
        assert (os.environ.get("FORCE_COLOR"), os.environ["PYTHON_COLORS"]) == (None, "0")
    assert (os.environ["FORCE_COLOR"], os.environ.get("PYTHON_COLORS")) == ("1", None)
    with capture_child_stderr():
        assert "FORCE_COLOR" not in os.environ
    assert os.environ["FORCE_COLOR"] == "1"
