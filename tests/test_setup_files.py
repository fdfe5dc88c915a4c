"""The install files agree with each other and with the README."""

import re
import subprocess
import sys
import tomllib
from importlib import metadata

import pytest

from helpers.clinic import doctor
from tools import course, floor

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
    assert pip == ["-e .[lab]"], "list packages in pyproject.toml only: the learner's install"
    assert [d.split("=")[0] for d in conda if d != "conda-forge"] == ["python", "pip"]


def test_environment_python_satisfies_requires_python():
    conda, _ = environment_yml()
    (python,) = [d for d in conda if d.startswith("python=")]
    minimum = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert tuple(map(int, python.split("=")[1].split("."))) >= tuple(map(int, minimum.split(".")))


def test_design_card_packages_and_ranges():
    extras = PYPROJECT["project"]["optional-dependencies"]
    deps = PYPROJECT["project"]["dependencies"] + extras["lab"] + extras["dev"]
    names = {re.split(r"[<>=!\[ ]", d)[0] for d in deps}
    assert {"torch", "torchvision", "matplotlib", "jupyterlab", "nbval"} <= names
    assert not [d for d in deps if "==" in d], "state a supported range, do not pin"


def test_learners_install_brings_jupyterlab_and_no_test_tools():
    extras = PYPROJECT["project"]["optional-dependencies"]
    lab = {re.split(r"[<>=!\[ ]", d)[0] for d in extras["lab"]}
    assert "jupyterlab" in lab and not lab & {"pytest", "nbval", "ruff"}
    assert f"{PYPROJECT['project']['name']}[lab]" in extras["dev"], "dev = lab + the test tools"
    assert 'pip install -e ".[lab]"' in README


def test_readme_quick_start_comes_first_and_fits_a_screen():
    """A learner reads how to install before anything for maintainers; the CPU-only build comes first."""
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert len(quick.splitlines()) <= 45, "the quick start fits one screen"
    assert README.index("## Quick start") < README.index("## Notebooks") < README.index("## Maintaining")
    first_install = quick.index("pip install")
    first_line = quick[first_install:].splitlines()[0]
    assert "--index-url https://download.pytorch.org/whl/cpu" in first_line, "the CPU-only build is the first install"
    assert quick.index("without** an NVIDIA GPU") < first_install
    assert "python -m helpers doctor" in quick


def ci_commands() -> list[tuple[str, str]]:
    """(phase name, command) of every ``phase NAME COMMAND`` line of .ci/run, in order."""
    return re.findall(r'^phase "([^"]+)" (.+)$', CI, re.MULTILINE)


def test_readme_and_ci_install_the_same_way():
    assert INSTALL in README
    assert "conda env create -f environment.yml" in README
    assert "COURSE_QUICK" in README
    commands = [command for _, command in ci_commands()]
    wanted = [
        f"python -m {INSTALL}",  # newest
        "pytest",
        "python -m pip install $(python tools/floor.py)",  # floor: the oldest pair first, from the registry
        f"python -m {INSTALL}",  # keeps that torch
        "python tools/floor.py --check",  # ... which this proves
        'pytest -m "not newest_only"',  # what can differ between torch versions (conftest.py)
    ]
    it = iter(commands)
    assert all(step in it for step in wanted), f".ci/run must run, in this order: {wanted}; it runs {commands}"
    assert "source .venv-ci-floor/bin/activate" in CI


def test_ci_phases_are_timed_and_named_after_their_venv():
    names = [name for name, _ in ci_commands()]
    assert len(names) == len(set(names)) >= 8
    assert all(name.startswith(("newest: ", "floor: ")) for name in names)
    assert "trap summary EXIT" in CI


def test_readme_states_the_range_ci_tests():
    """The README names both ends CI tests: the floor from pyproject.toml and the newest release."""
    floor_specs = floor.floor_specs()
    for spec in floor_specs:
        name, version = spec.split("==")
        assert f"{name} {version.removesuffix('.*')}" in README, f"README: say that CI tests {spec}"
    assert "python tools/floor.py" in README
    assert "oldest" in README and "newest" in README


def test_floor_is_read_from_the_lower_bounds():
    deps = ["torch>=2.9,<3", "torchvision >= 0.24, <1", "numpy>=1.24", "tqdm"]
    assert floor.lower_bounds(deps) == {"torch": "2.9", "torchvision": "0.24", "numpy": "1.24"}
    assert floor.floor_specs(deps) == ["torch==2.9.*", "torchvision==0.24.*"]
    with pytest.raises(ValueError, match="torchvision"):
        floor.floor_specs(["torch>=2.9", "torchvision"])


def test_floor_torch_and_torchvision_are_a_pair():
    torch_spec, vision_spec = floor.floor_specs()
    torch_floor = torch_spec.split("==")[1].removesuffix(".*")
    vision_floor = floor.release(vision_spec.split("==")[1].removesuffix(".*"))
    assert doctor.matching_torchvision(torch_floor) == vision_floor


def test_floor_check_matches_versions():
    assert floor.matches("torch==2.7.*", "2.7.1+cu126")
    assert floor.matches("torch==2.7.*", "2.7.0")
    assert not floor.matches("torch==2.7.*", "2.8.0")
    assert not floor.matches("torch==2.7.*", "2.70.1")
    assert floor.matches("torchvision==0.22.*", "0.22.1+cpu")


def test_floor_command(capsys):
    assert floor.main([]) == 0
    assert capsys.readouterr().out.split() == floor.floor_specs()
    on_floor = all(floor.matches(spec, metadata.version(spec.split("==")[0])) for spec in floor.floor_specs())
    assert floor.main(["--check"]) == (0 if on_floor else 1)
    out = capsys.readouterr().out
    assert "floor: torch==" in out and ("not the declared floor" in out) != on_floor


def test_ruff_is_clean():
    targets = ["helpers", "tests", "tools", "benchmarks", "notebooks", "conftest.py"]
    for args in (["check", *targets], ["format", "--check", "helpers", "tests", "tools", "benchmarks"]):
        result = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=course.ROOT, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def test_import_helpers_is_light():
    code = (
        "import sys, torch; before = set(sys.modules); "
        "import helpers, helpers.lesson.devices, helpers.colab, helpers.clinic.doctor;"
        "heavy = {m.split('.')[0] for m in set(sys.modules) - before} & "
        "{'torchvision', 'matplotlib', 'tqdm', 'IPython', 'nbformat', 'pandas', 'scipy'}; print(sorted(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
