"""conftest.py's lists of slow and newest-only tests name files and tests that exist: a renamed test would otherwise
leave the quick lane or join the floor phase without a word."""

import ast
from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parent


def functions_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}


def test_every_listed_file_exists():
    listed = conftest.SLOW_FILES | set(conftest.SLOW_TESTS) | conftest.NEWEST_ONLY_FILES
    assert sorted(name for name in listed if not (TESTS / name).is_file()) == []


def test_every_slow_test_named_exists():
    missing = {name: names - functions_in(TESTS / name) for name, names in conftest.SLOW_TESTS.items()}
    assert {name: names for name, names in missing.items() if names} == {}


def test_the_floor_runs_the_english_lessons_and_the_checks():
    """What the oldest torch can break stays in the floor phase: the English notebooks, the checks' banks, the
    rehearsal and the distributed programs (the newest-only list is for what cannot differ between versions)."""
    on_the_floor = {"test_exercises_10.py", "test_rehearse.py", "test_ddp.py", "test_variants.py"}
    assert not on_the_floor & conftest.NEWEST_ONLY_FILES
    assert conftest.CHINESE_EDITION.name == "zh-CN" and conftest.CHINESE_EDITION.is_dir()
