"""The repository's GitHub files: workflows and issue forms valid against GitHub's schemas, and the workflow
running the README's install and test commands on the systems learners use."""

import shutil
import subprocess

import pytest

from tools import course

GITHUB = course.ROOT / ".github"
WORKFLOWS = sorted((GITHUB / "workflows").glob("*.yml"))
FORMS = sorted(p for p in (GITHUB / "ISSUE_TEMPLATE").glob("*.yml") if p.name != "config.yml")
LINTER = shutil.which("check-jsonschema")
needs_linter = pytest.mark.skipif(LINTER is None, reason='the linter comes with the dev extra: pip install -e ".[dev]"')


def lint(schema: str, paths) -> None:
    result = subprocess.run(
        [LINTER, "--builtin-schema", schema, *map(str, paths)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


@needs_linter
def test_workflows_follow_githubs_schema():
    lint("vendor.github-workflows", WORKFLOWS)


@needs_linter
def test_issue_forms_follow_githubs_schema():
    lint("vendor.github-issue-forms", FORMS)
    lint("vendor.github-issue-config", [GITHUB / "ISSUE_TEMPLATE" / "config.yml"])


@needs_linter
def test_the_linter_catches_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("name: x\non: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    stepz:\n      - run: echo\n")
    with pytest.raises(AssertionError, match="stepz"):
        lint("vendor.github-workflows", [broken])


def test_tests_workflow_runs_the_readme_commands_everywhere():
    text = (GITHUB / "workflows" / "tests.yml").read_text()
    for system in ("ubuntu-latest", "windows-latest", "macos-latest"):
        assert system in text
    assert "torch: [newest, floor]" in text and "python tools/floor.py --check" in text
    assert 'pip install -e ".[dev]"' in text and "\n        run: pytest\n" in text
    assert '\n        run: pytest -m "not newest_only"\n' in text  # the floor, as .ci/run runs it
    assert "timeout-minutes:" in text and "cache: pip" in text


def test_device_error_form_asks_for_the_doctors_report():
    form = (GITHUB / "ISSUE_TEMPLATE" / "device_error.yml").read_text()
    assert "python -m helpers doctor --report" in form
    for field in ("The error message", "The code that raised it", "Where it ran"):
        assert field in form
