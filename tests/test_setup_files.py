"""The install files agree with each other and with the README."""

import re
import subprocess
import sys
import tomllib

from tools import course

PYPROJECT = tomllib.loads((course.ROOT / "pyproject.toml").read_text())
README = (course.ROOT / "README.md").read_text()
CI = (course.ROOT / ".ci" / "run").read_text()
INSTALL = 'pip install -e ".[dev]"'


def environment_yml() -> tuple[list[str], list[str]]:
    """(conda dependencies, pip lines) of environment.yml, read without a YAML library."""
    conda, pip, in_pip = [], [], False
    for line in (course.ROOT / "environment.yml").read_text().splitlines():
        item = re.match(r"^(\s*)- (.+)$", line)
        if not item:
            in_pip = in_pip and line.startswith("      ")
            continue
        if len(item.group(1)) >= 6:
            pip.append(item.group(2).strip())
        elif item.group(2).strip() != "pip:":
            conda.append(item.group(2).strip())
            in_pip = False
    return conda, pip


def test_environment_yml_installs_pyproject_and_nothing_else():
    conda, pip = environment_yml()
    assert pip == ["-e .[dev]"], "list packages in pyproject.toml only"
    assert [d.split("=")[0] for d in conda if d != "conda-forge"] == ["python", "pip"]


def test_environment_python_satisfies_requires_python():
    conda, _ = environment_yml()
    (python,) = [d for d in conda if d.startswith("python=")]
    minimum = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert tuple(map(int, python.split("=")[1].split("."))) >= tuple(map(int, minimum.split(".")))


def test_design_card_packages_and_ranges():
    deps = PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["dev"]
    names = {re.split(r"[<>=!\[ ]", d)[0] for d in deps}
    assert {"torch", "torchvision", "matplotlib", "jupyterlab", "nbval"} <= names
    assert not [d for d in deps if "==" in d], "state a supported range, do not pin"


def test_readme_and_ci_install_the_same_way():
    assert INSTALL in README and INSTALL in CI
    assert "conda env create -f environment.yml" in README
    assert re.search(r"^pytest$", CI, re.MULTILINE), ".ci/run runs the README's test command"
    assert "COURSE_QUICK" in README


def test_ruff_is_clean():
    targets = ["helpers", "tests", "tools", "benchmarks", "notebooks", "conftest.py"]
    for args in (["check", *targets], ["format", "--check", "helpers", "tests", "tools", "benchmarks"]):
        result = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=course.ROOT, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_import_helpers_is_light():
    code = (
        "import sys, torch; before = set(sys.modules); import helpers, helpers.devices, helpers.colab, helpers.doctor;"
        "heavy = {m.split('.')[0] for m in set(sys.modules) - before} & "
        "{'torchvision', 'matplotlib', 'tqdm', 'IPython', 'nbformat', 'pandas', 'scipy'}; print(sorted(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
