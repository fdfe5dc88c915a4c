"""The oldest torch/torchvision pair the course supports, read from pyproject.toml's lower bounds.

    python tools/floor.py           # prints the pip requirement specs, e.g. torch==2.7.* torchvision==0.22.*
    python tools/floor.py --check   # exit 1 unless the installed torch and torchvision are that pair

CI installs the printed specs into a second virtual environment (``pip install $(python tools/floor.py)``),
then ``pip install -e ".[dev]"``, which keeps that torch, and runs the whole suite there: the range
pyproject.toml declares is the range CI tests. ``==X.Y.*`` takes the newest patch release of the oldest
supported minor release (patch releases only fix bugs).
"""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR_PACKAGES = ("torch", "torchvision")
LOWER_BOUND = re.compile(r">=\s*(\d+(?:\.\d+)*)")


def lower_bounds(dependencies: list[str]) -> dict[str, str]:
    """{name: lower bound} of every requirement that has a ``>=`` bound, e.g. {"torch": "2.7"}."""
    bounds = {}
    for requirement in dependencies:
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip().lower()
        found = LOWER_BOUND.search(requirement)
        if found:
            bounds[name] = found.group(1)
    return bounds


def floor_specs(dependencies: list[str] | None = None) -> list[str]:
    """pip requirement specs of the oldest supported release of each floor package."""
    if dependencies is None:
        with open(ROOT / "pyproject.toml", "rb") as f:
            dependencies = tomllib.load(f)["project"]["dependencies"]
    bounds = lower_bounds(dependencies)
    missing = [name for name in FLOOR_PACKAGES if name not in bounds]
    if missing:
        raise ValueError(f"pyproject.toml gives no lower bound (>=) for {', '.join(missing)}")
    return [f"{name}=={bounds[name]}.*" for name in FLOOR_PACKAGES]


def release(version: str) -> tuple[int, ...]:
    """``"2.7.1+cu126"`` -> (2, 7, 1)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def matches(spec: str, version: str) -> bool:
    """Whether an installed version satisfies a ``name==X.Y.*`` spec."""
    wanted = release(spec.split("==", 1)[1].removesuffix(".*"))
    return release(version)[: len(wanted)] == wanted


def main(argv: list[str]) -> int:
    specs = floor_specs()
    if "--check" not in argv:
        print(" ".join(specs))
        return 0
    wrong = []
    for spec in specs:
        name = spec.split("==")[0]
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "not installed"
        print(f"{name} {version} (floor: {spec})")
        if version == "not installed" or not matches(spec, version):
            wrong.append(name)
    if wrong:
        print(f"not the declared floor: {', '.join(wrong)}; install it with: pip install {' '.join(specs)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
