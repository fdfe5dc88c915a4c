"""A class's copy of the course: the lessons without links to the solutions, ready to hand out or push to a JupyterHub.

    python tools/release.py OUT                          # every lesson, the solutions in OUT/solutions/
    python tools/release.py OUT --lessons 03 05          # lessons 03 and 05 only
    python tools/release.py OUT --lessons 03 --assignment   # a graded assignment: no solutions notebooks at all
    python tools/release.py OUT --lang zh-CN             # the Chinese edition (notebooks/zh-CN/)

Each lesson is copied with the sentence that links its worked solutions taken out of its markdown (the link, its
"in Colab" twin and the "Solutions:" label before them); code, outputs and metadata are kept, so the notebook runs
and is graded as the course's own (``python -m helpers grade``, its points included). Without ``--assignment``
the solutions notebooks go to OUT/solutions/, for the teacher to hand out after the lab; with it they are left out.

What a release cannot hide: the course is public (a learner can open the solutions on GitHub, and the checks ship
in the ``helpers`` package every learner installs). For marks that count, grade with hidden tests too (nbgrader's,
``tools/nbgrader_source.py``) or in a room without the network.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = r"\[[^\]]*\]\([^)\s]*solutions[^)\s]*\.ipynb\)"
COLAB = r"[ \t]*[(（]\[[^\]]*\]\([^)\s]*solutions[^)\s]*\)[)）]"
LABEL = r"(?:Worked solutions[ \t]*:|Solutions[ \t]*:|参考答案[ \t]*[:：]|参考答案见)[ \t\n]*"
SOLUTION_LINK = re.compile(rf"(?:{LABEL})?{LINK}(?:{COLAB})?[.。]?")


def without_solution_links(text: str) -> str:
    """Markdown with every link to a solutions notebook taken out, with its label and its Colab twin."""
    text = SOLUTION_LINK.sub("", text)
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def release_notebook(source: Path, target: Path) -> None:
    nb = json.loads(source.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = without_solution_links("".join(cell["source"]))
            lines = text.splitlines(keepends=True)
            cell["source"] = lines
    nb["cells"] = [c for c in nb["cells"] if c["cell_type"] != "markdown" or "".join(c["source"]).strip()]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def lessons(lang: str, numbers: list[str] | None) -> list[Path]:
    folder = ROOT / "notebooks" / ("zh-CN" if lang == "zh-CN" else "")
    found = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    return [p for p in found if not numbers or p.name[:2] in {f"{int(n):02d}" for n in numbers}]


def release(out: Path, numbers: list[str] | None = None, assignment: bool = False, lang: str = "en") -> list[Path]:
    """Write the class's copy into ``out``; the notebooks written."""
    written = []
    for path in lessons(lang, numbers):
        release_notebook(path, out / path.name)
        written.append(out / path.name)
        solutions = path.parent / "solutions" / f"{path.stem}_solutions.ipynb"
        if not assignment and solutions.exists():
            (out / "solutions").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(solutions, out / "solutions" / solutions.name)
            written.append(out / "solutions" / solutions.name)
    return written


def report_written(written: list[Path]) -> int:
    """Print the files a command wrote, one a line; none is an error (exit 1) that names --lessons."""
    if not written:
        print("No lesson matches --lessons: nothing written.", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder to write (the class's copy)")
    parser.add_argument("--lessons", nargs="*", help="lesson numbers (default: every lesson)")
    parser.add_argument("--assignment", action="store_true", help="a graded assignment: leave the solutions out")
    parser.add_argument("--lang", choices=("en", "zh-CN"), default="en", help="the edition (default: en)")
    args = parser.parse_args(argv)
    written = release(args.out, args.lessons, args.assignment, args.lang)
    return report_written(written)


if __name__ == "__main__":
    sys.exit(main())
