"""The package's house: at most 11 entries at helpers/' top level, each one named in the map (helpers/__init__.py's
docstring) and, for code, with a docstring that says its role; every module under one name only; and
``python -m helpers COMMAND`` runs each command a learner types."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys

import helpers
from helpers import __main__ as commands
from tools import course

HELPERS = course.ROOT / "helpers"


def top_level() -> list[str]:
    return sorted(p.name for p in HELPERS.iterdir() if p.name != "__pycache__" and not p.name.startswith("."))


def docstring(path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))


def test_at_most_eleven_entries_at_the_top_each_on_the_map_with_its_role():
    entries = top_level()
    assert len(entries) <= 11, entries
    for name in entries:
        if name == "__init__.py":  # the map itself
            assert helpers.__doc__
            continue
        shown = (
            f"helpers/{name}" if name.startswith("__main__") or name == "locale" else f"helpers.{name.split('.')[0]}"
        )
        assert f"``{shown}" in helpers.__doc__, f"{name} is not on the map in helpers/__init__.py"
        path = HELPERS / name
        code = path / "__init__.py" if path.is_dir() else path
        if path.is_dir() and not code.exists():
            assert name == "locale", f"{name} is a folder of code without __init__.py"
            continue
        if code.suffix == ".py":
            assert docstring(code), f"{code.relative_to(course.ROOT)} has no docstring that says its role"


def test_every_module_says_its_role_and_has_one_name():
    stems = {}
    for path in sorted(HELPERS.rglob("*.py")):
        assert docstring(path), f"{path.relative_to(course.ROOT)} has no docstring"
        if path.stem not in ("__init__", "__main__"):  # python -m PACKAGE needs its own __main__
            stems.setdefault(path.stem, []).append(path.relative_to(HELPERS).as_posix())
    twice = {stem: paths for stem, paths in stems.items() if len(paths) > 1}
    assert not twice, f"modules under two names: {twice}"


def test_a_lessons_checks_live_in_its_one_numbered_module():
    """The grader, the guides' and the hints' tests find a lesson's checks in helpers/exercises/exNN_topic.py: one
    such module per lesson, and it holds checks; a module beside it (an exercise's diagnoses) holds none and is
    named without the number."""
    numbered: dict[str, list[str]] = {}
    for path in sorted((HELPERS / "exercises").glob("*.py")):
        if path.stem == "__init__":
            continue
        module = importlib.import_module(f"helpers.exercises.{path.stem}")
        checks = [
            name
            for name, value in vars(module).items()
            if getattr(value, "is_exercise_check", False) and value.__module__ == module.__name__
        ]
        lesson = re.fullmatch(r"ex(\d\d)_\w+", path.stem)
        if lesson:
            numbered.setdefault(lesson.group(1), []).append(path.stem)
            assert checks, f"{path.stem} is named as a lesson's checks but holds none"
        else:
            assert not checks, f"{path.stem} holds checks {checks}: they belong in the lesson's exNN_topic.py"
    assert len(numbered) >= 11 and all(len(stems) == 1 for stems in numbered.values()), numbered


def test_each_command_names_a_module_that_runs_as_a_script():
    for name, (module, _) in commands.COMMANDS.items():
        path = HELPERS.parent / (module.replace(".", "/") + ".py")
        if not path.exists():  # a package runs its __main__.py (python -m helpers.rehearse)
            path = HELPERS.parent / module.replace(".", "/") / "__main__.py"
        assert path.exists(), (name, module)
        assert 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"), f"{module} does not run as a script"


def _helpers(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COURSE_LANG": "en"}
    return subprocess.run(
        [sys.executable, "-m", "helpers", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_python_m_helpers_lists_the_commands_and_refuses_an_unknown_one():
    listing = _helpers()
    assert listing.returncode == 0
    assert all(f"  {name} " in listing.stdout for name in commands.COMMANDS), listing.stdout
    unknown = _helpers("doktor")
    assert unknown.returncode == 2 and "'doktor'" in unknown.stderr and "  doctor " in unknown.stderr


def test_a_command_gets_its_arguments_and_its_own_name():
    explained = _helpers("doctor", "--explain", "RuntimeError: CUDA error: device-side assert triggered")
    assert explained.returncode == 0, explained.stderr
    assert "notebook 09" in explained.stdout
    shown = _helpers("grade", "--help")
    assert shown.returncode == 0 and shown.stdout.startswith("usage: python -m helpers grade"), shown.stdout
