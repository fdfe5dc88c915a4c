"""The zh-CN edition (中文版): English is the source, translations are gettext catalogs, Chinese files are generated.

    python tools/translate.py update [SOURCE...]   # English changed: refresh the catalogs (all, or those of
                                                   # SOURCE: notebooks, pages, modules), regenerate the notebooks
    python tools/translate.py status    # list each missing or outdated (fuzzy) entry; exit 1 if there is one
    python tools/translate.py build     # regenerate notebooks/zh-CN/ from the English notebooks and the catalogs
    python tools/translate.py todo CATALOG > todo.json         # the entries still to translate, as JSON
    python tools/translate.py fill CATALOG translations.json   # {English: Chinese} into the catalog

Catalogs (``.po``, one per source), under ``locale/zh_CN/``:

- ``notebooks/NN_name.po`` and ``notebooks/solutions/NN_name_solutions.po``: one entry per markdown block
  (paragraph, list, table, heading, fenced code: blocks are separated by blank lines) and per code comment
  (a run of whole-line comments is one entry);
- ``site/PAGE.po``: the website's pages (``site/*.md``), one entry per block;
- the run-time messages (every ``tr("...")`` in ``helpers/``) ship with the package, one catalog per module:
  ``helpers/locale/zh_CN/LC_MESSAGES/exercises.ex01_cuda.po`` for ``helpers/exercises/ex01_cuda.py``.

``update`` works as gettext's ``msgmerge``: an entry whose English changed keeps its old translation, marked
fuzzy (outdated) with the previous English beside it (``#| msgid``), until a translator updates it and removes
the mark; the generated files use only translated, non-fuzzy entries (the English shows otherwise), and the
tests fail while any entry is missing or fuzzy.

A generated notebook is its English notebook with the markdown blocks and the comments translated, links to
course notebooks pointed at their Chinese twins, and the setup cell's ``setup()`` made ``setup(lang="zh-CN")``
(the course then speaks Chinese at run time). Code, metadata and stored outputs are copied as they are.
"""

from __future__ import annotations

import argparse
import ast
import copy
import io
import json
import re
import sys
import tokenize
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat

from tools import course

LANG = "zh-CN"
LOCALE = course.ROOT / "locale" / "zh_CN"
ZH_NOTEBOOKS = course.NOTEBOOKS / LANG
RUNTIME_CATALOGS = course.ROOT / "helpers" / "locale" / "zh_CN" / "LC_MESSAGES"  # one per helpers module
SITE_PAGES = course.ROOT / "site"
SETUP_CALL = "setup()"
SETUP_CALL_ZH = f'setup(lang="{LANG}")'
FIXED_DATE = datetime(2026, 1, 1, tzinfo=UTC)  # catalogs carry no dates: they would change every update
MACHINE_COMMENT = re.compile(r"^#+\s*(noqa|type:|fmt:|pragma|ruff:)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADER = """\
# The course's Chinese (zh-CN) translation of {source}.
# The English is the source: after changing it, run `python tools/translate.py update`; entries whose
# English changed are then marked fuzzy (outdated) until their translation is updated."""


# --- what is translated: markdown blocks and code comments ---------------------------------------------------------


def markdown_pieces(text: str) -> list[tuple[str, bool]]:
    """``text`` cut into (piece, translatable): blocks, and the blank lines between them (kept as they are).

    Joining the pieces gives ``text`` back exactly. A fenced code block is one block, blank lines included.
    """
    pieces: list[tuple[str, bool]] = []
    block: list[str] = []
    gap = ""
    in_fence = False
    for line in text.splitlines(keepends=True):
        blank = not line.strip() and not in_fence
        if FENCE.match(line):
            in_fence = not in_fence
        if blank:
            gap += line
            continue
        if gap or not block:
            if block:
                pieces.append(("".join(block), True))
                block = []
            if gap:
                pieces.append((gap, False))
                gap = ""
        block.append(line)
    if block:
        pieces.append(("".join(block), True))
    if gap:
        pieces.append((gap, False))
    # a block's own final newline is not part of its text: translators then never have to keep one
    out: list[tuple[str, bool]] = []
    for piece, translatable in pieces:
        if translatable and piece.endswith("\n"):
            out += [(piece[:-1], True), ("\n", False)]
        else:
            out.append((piece, translatable))
    return out


def python_lines(source: str) -> list[str]:
    """The cell's lines with IPython's ``%magic`` and ``!shell`` lines blanked, so that ``tokenize`` reads them."""
    return [re.sub(r"^(\s*)[%!].*", r"\1pass", line) for line in source.split("\n")]


@dataclass(frozen=True)
class Comment:
    first: int  # 0-based line numbers of the comment's lines (a run of whole-line comments) or its one line
    last: int
    column: int  # where '#' is
    prefix: str  # '# ' as written
    text: str  # the lines' texts joined by newlines
    whole_line: bool


def comments(source: str) -> list[Comment]:
    """The translatable comments of a code cell, in order; a cell that is not Python (``%%bash``...) has none."""
    if source.lstrip().startswith("%%"):
        return []
    lines = python_lines(source)
    try:
        tokens = [
            t for t in tokenize.generate_tokens(io.StringIO("\n".join(lines)).readline) if t.type == tokenize.COMMENT
        ]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    found: list[Comment] = []
    for tok in tokens:
        row, col = tok.start[0] - 1, tok.start[1]
        if (
            MACHINE_COMMENT.match(tok.string)
            or tok.string.startswith("#!")
            or not re.search(r"[A-Za-z\u4e00-\u9fff]", tok.string)
        ):
            continue
        prefix = re.match(r"#+\s*", tok.string).group()
        text = tok.string[len(prefix) :].rstrip()
        whole = not lines[row][:col].strip()
        last = found[-1] if found else None
        if whole and last and last.whole_line and last.last == row - 1 and last.column == col and last.prefix == prefix:
            found[-1] = Comment(last.first, row, col, prefix, f"{last.text}\n{text}", True)
        else:
            found.append(Comment(row, row, col, prefix, text, whole))
    return found


def has_words(text: str) -> bool:
    """Whether a markdown block has words to translate (a Colab badge or a bare link has none)."""
    text = re.sub(r"!?\[[^\]]*\]\([^)]*\)|https?://\S+|`[^`]*`", " ", text)
    return bool(re.search(r"[A-Za-z]{2,}|[\u4e00-\u9fff]", re.sub(r"\[!\[Open In Colab\]", "", text)))


def notebook_messages(nb) -> Iterator[tuple[str, int]]:
    """(English text, cell number counted from 1) for every translatable piece of a notebook, in order."""
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for piece, translatable in markdown_pieces(cell.source):
                if translatable and has_words(piece):
                    yield piece, index + 1
        elif cell.cell_type == "code":
            for comment in comments(cell.source):
                yield comment.text, index + 1


def markdown_messages(text: str) -> Iterator[tuple[str, int]]:
    """(English text, line number) for every block of a markdown page."""
    line = 1
    for piece, translatable in markdown_pieces(text):
        if translatable and has_words(piece):
            yield piece, line
        line += piece.count("\n")


def runtime_messages(module: Path) -> Iterator[tuple[str, str, int, bool]]:
    """(message, file, line, formatted) for every ``tr("...")`` and ``tr_lazy("...")`` in one helpers module."""
    tree = ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"tr", "tr_lazy"}
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value, course.repo_path(module), node.lineno, bool(node.keywords)


# --- the catalogs ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One English source and its catalog."""

    english: Path
    catalog: Path
    messages: Callable[[], Iterator[tuple[str, str, int, bool]]]  # (English, file, line or cell, formatted)

    @property
    def name(self) -> str:
        return course.repo_path(self.catalog)


def _notebook_source(path: Path) -> Source:
    rel = path.relative_to(course.NOTEBOOKS).with_suffix(".po")

    def messages():
        nb = nbformat.read(path, as_version=4)
        for text, cell in notebook_messages(nb):
            yield text, course.repo_path(path), cell, False

    return Source(path, LOCALE / "notebooks" / rel, messages)


def _page_source(path: Path) -> Source:
    def messages():
        for text, line in markdown_messages(path.read_text(encoding="utf-8")):
            yield text, course.repo_path(path), line, False

    return Source(path, LOCALE / "site" / path.with_suffix(".po").name, messages)


def site_pages() -> list[Path]:
    return sorted(SITE_PAGES.glob("*.md"))


def _module_source(path: Path) -> Source:
    dotted = ".".join(path.relative_to(course.ROOT / "helpers").with_suffix("").parts)
    return Source(path, RUNTIME_CATALOGS / f"{dotted}.po", lambda: runtime_messages(path))


def helper_modules() -> list[Path]:
    """The helpers modules with messages to translate (``tr("...")`` calls), in a stable order."""
    return [p for p in sorted((course.ROOT / "helpers").rglob("*.py")) if any(runtime_messages(p))]


def sources() -> list[Source]:
    return (
        [_module_source(p) for p in helper_modules()]
        + [_notebook_source(p) for p in course.all_notebooks()]
        + [_page_source(p) for p in site_pages()]
    )


def template(source: Source):
    from babel.messages.catalog import Catalog

    catalog = Catalog(locale="zh_CN", project="pytorch-cpu-gpu-course", creation_date=FIXED_DATE, fuzzy=False)
    for text, file, line, formatted in source.messages():
        entry = catalog.get(text)
        if entry is not None:
            entry.locations.append((file, line))
            continue
        catalog.add(text, locations=[(file, line)], flags=["python-brace-format"] if formatted else [])
    return catalog


def load(path: Path):
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po

    if not path.exists():
        return Catalog(locale="zh_CN", project="pytorch-cpu-gpu-course", creation_date=FIXED_DATE, fuzzy=False)
    with path.open("rb") as f:
        return read_po(f, locale="zh_CN")


def save(catalog, path: Path, source_name: str) -> None:
    from babel.messages.pofile import write_po

    catalog.header_comment = HEADER.format(source=source_name)
    catalog.creation_date = catalog.revision_date = FIXED_DATE
    catalog.fuzzy = False
    catalog.last_translator = "pytorch-cpu-gpu-course"
    catalog.language_team = "zh-CN"
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=0, omit_header=False, ignore_obsolete=True, include_previous=True)
    path.write_bytes(buffer.getvalue())


def update(source: Source) -> None:
    catalog = load(source.catalog)
    catalog.update(template(source), no_fuzzy_matching=False, update_creation_date=False)
    save(catalog, source.catalog, course.repo_path(source.english))


@dataclass(frozen=True)
class Problem:
    catalog: str
    kind: str  # "missing", "outdated", "placeholders", "stale"
    english: str

    def __str__(self) -> str:
        first = self.english.splitlines()[0] if self.english else ""
        return f"{self.catalog}: {self.kind}: {first[:100]!r}"


def problems(source: Source) -> list[Problem]:
    """What keeps a catalog from being complete and in step with its English source."""
    from string import Formatter

    catalog = load(source.catalog)
    found = []
    wanted = {}
    for text, _file, _line, formatted in source.messages():
        wanted[text] = wanted.get(text, False) or formatted
    for text, formatted in wanted.items():
        entry = catalog.get(text)
        if entry is None or not entry.string:
            kind = "missing"
        elif entry.fuzzy:
            kind = "outdated"
        elif formatted and _fields(entry.string, Formatter) != _fields(text, Formatter):
            kind = "placeholders"
        else:
            continue
        found.append(Problem(source.name, kind, text))
    stale = [m.id for m in catalog if m.id and m.id not in wanted]
    found += [Problem(source.name, "stale", text) for text in stale]
    return found


def _fields(text: str, formatter) -> set[str] | None:
    try:
        return {name for _, name, _, _ in formatter().parse(text) if name is not None}
    except ValueError:
        return None


def translations(path: Path) -> dict[str, str]:
    """The usable translations of a catalog: translated and not outdated."""
    return {m.id: m.string for m in load(path) if m.id and m.string and not m.fuzzy}


# --- generating the Chinese files ------------------------------------------------------------------------------------


def zh_path(english: Path) -> Path:
    return ZH_NOTEBOOKS / english.relative_to(course.NOTEBOOKS)


def translate_markdown(text: str, table: dict[str, str]) -> str:
    return "".join(table.get(piece, piece) if translatable else piece for piece, translatable in markdown_pieces(text))


def translate_code(source: str, table: dict[str, str]) -> str:
    lines = source.split("\n")
    for comment in reversed(comments(source)):
        chinese = table.get(comment.text)
        if chinese is None:
            continue
        if comment.whole_line:
            indent = " " * comment.column
            lines[comment.first : comment.last + 1] = [
                f"{indent}{comment.prefix}{t}".rstrip() for t in chinese.split("\n")
            ]
        else:
            line = lines[comment.first]
            lines[comment.first] = line[: comment.column] + comment.prefix + " ".join(chinese.split("\n"))
    return "\n".join(lines)


def point_links_at_twins(text: str) -> str:
    """Colab links to course notebooks lead to their Chinese twins (relative links already do)."""
    prefix = course.colab_url("notebooks/")
    return re.sub(re.escape(prefix) + r"(?!zh-CN/)", prefix + f"{LANG}/", text)


def translate_notebook(english: Path, table: dict[str, str]):
    nb = nbformat.read(english, as_version=4)
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.cell_type == "markdown":
            cell.source = point_links_at_twins(translate_markdown(cell.source, table))
        elif cell.cell_type == "code":
            source = translate_code(cell.source, table)
            if "from helpers.colab import setup" in source:
                source = re.sub(r"^setup\(\)$", SETUP_CALL_ZH, source, flags=re.MULTILINE)
            cell.source = source
    out.metadata["course"] = {"language": LANG, "translated_from": course.repo_path(english)}
    return out


def render(nb) -> str:
    return nbformat.writes(nb) + "\n"


def build(check: bool = False, only: list[Source] | None = None) -> list[Path]:
    """Write (or, with ``check``, compare) every Chinese notebook (or those of ``only``); return those that differ."""
    differ = []
    for source in only or sources():
        if source.english.suffix != ".ipynb":
            continue
        target = zh_path(source.english)
        text = render(translate_notebook(source.english, translations(source.catalog)))
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            differ.append(target)
            if not check:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    return differ


# --- the command line ------------------------------------------------------------------------------------------------


def _find(name: str) -> Source:
    """The source whose catalog or English file is ``name``."""
    path = Path(name).resolve()
    for source in sources():
        if path in (source.catalog, source.english.resolve()):
            return source
    if path.suffix == ".py" and path.is_relative_to(course.ROOT / "helpers"):
        return _module_source(path)  # a module whose first message is being added
    sys.exit(f"{name} is neither a catalog nor a translated source: `python tools/translate.py status` lists them.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    u = sub.add_parser("update", help="refresh the catalogs from the English, then regenerate the Chinese notebooks")
    u.add_argument("sources", nargs="*", help="English sources or their catalogs (default: all)")
    sub.add_parser("status", help="list missing and outdated entries (exit 1 if any)")
    b = sub.add_parser("build", help="regenerate the Chinese notebooks")
    b.add_argument("--check", action="store_true", help="only compare: exit 1 if a committed notebook differs")
    t = sub.add_parser("todo", help="one catalog's missing and outdated entries, as JSON")
    t.add_argument("catalog")
    f = sub.add_parser("fill", help="put translations ({English: Chinese} JSON) into a catalog")
    f.add_argument("catalog")
    f.add_argument("translations")
    args = parser.parse_args(argv)

    if args.command == "update":
        chosen = [_find(p) for p in args.sources] or sources()
        for source in chosen:
            update(source)
        build(only=chosen)
        found = [p for s in chosen for p in problems(s)]
        print(f"{len(found)} entries to translate or update" if found else "complete and in step")
        return 0
    if args.command == "status":
        found = [p for s in sources() for p in problems(s)]
        for problem in found:
            print(problem)
        print(f"{len(found)} entries to translate or update" if found else "every catalog is complete and in step")
        if any(p.kind == "stale" for p in found):
            print("stale entries: the English changed; run `python tools/translate.py update`")
        return 1 if found else 0
    if args.command == "build":
        differ = build(check=args.check)
        for path in differ:
            print(f"{'differs' if args.check else 'wrote'}: {course.repo_path(path)}")
        if args.check and differ:
            print("regenerate with `python tools/translate.py build`")
        return 1 if args.check and differ else 0
    source = _find(args.catalog)
    if args.command == "todo":
        catalog = load(source.catalog)
        todo = []
        for problem in problems(source):
            if problem.kind == "stale":
                continue
            entry = catalog.get(problem.english)
            previous = entry.previous_id if entry is not None and entry.fuzzy else None
            todo.append(
                {
                    "english": problem.english,
                    "kind": problem.kind,
                    "current": entry.string if entry else "",
                    "previous_english": previous,
                }
            )
        json.dump(todo, sys.stdout, ensure_ascii=False, indent=1)
        print()
        return 0
    if args.command == "fill":
        table = json.loads(Path(args.translations).read_text(encoding="utf-8"))
        catalog = load(source.catalog)
        unknown = [english for english in table if catalog.get(english) is None]
        for english, chinese in table.items():
            entry = catalog.get(english)
            if entry is not None:
                entry.string = chinese
                entry.flags.discard("fuzzy")
                entry.previous_id = []
        save(catalog, source.catalog, course.repo_path(source.english))
        for english in unknown:
            print(f"not in the catalog (run update first?): {english[:80]!r}")
        return 1 if unknown else 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
