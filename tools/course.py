"""Facts about the course layout that the maintenance tools and the tests share."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
LESSON_NAME = re.compile(r"^(\d\d)_[a-z0-9_]+\.ipynb$")


def _course_table() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["course"]


def github_slug() -> str:
    return _course_table()["github"]


def branch() -> str:
    return _course_table()["branch"]


def lessons() -> list[Path]:
    """The numbered lesson notebooks, in course order."""
    return sorted(p for p in NOTEBOOKS.glob("*.ipynb") if LESSON_NAME.match(p.name))


def solutions() -> list[Path]:
    return sorted(SOLUTIONS.glob("*.ipynb"))


def all_notebooks() -> list[Path]:
    return lessons() + solutions()


def repo_path(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def colab_url(path: Path | str) -> str:
    rel = path if isinstance(path, str) else repo_path(path)
    return f"https://colab.research.google.com/github/{github_slug()}/blob/{branch()}/{rel}"


def install_spec() -> str:
    """What the Colab setup cell gives to pip: the helpers package straight from the repository."""
    return f"git+https://github.com/{github_slug()}@{branch()}"


BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"


def badge(path: Path) -> str:
    return f"[![Open In Colab]({BADGE_IMAGE})]({colab_url(path)})"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as a module (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
