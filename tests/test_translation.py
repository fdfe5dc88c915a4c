"""The zh-CN edition cannot drift from the English: catalogs complete and in step, notebooks as generated.

``python tools/translate.py status`` lists what these tests report; ``update`` refreshes the catalogs after
the English changed (entries whose English changed become fuzzy: outdated), ``build`` regenerates the
Chinese notebooks. The lessons' twins run under nbval against their own Chinese outputs (conftest.py); one
solutions twin is run here (the others share the English solutions' code, checked token by token).
"""

from __future__ import annotations

import io
import re
import shutil
import tokenize

import nbformat
import pytest
from nbclient import NotebookClient

from helpers.course import i18n
from tools import course, translate

STATUS = "`python tools/translate.py status` lists them; `update` after changing the English, then translate"
CJK = re.compile(r"[\u4e00-\u9fff]")
LINK = re.compile(r"\]\(([^)\s]+)")
SPLIT_CHINESE = re.compile(r"[\u4e00-\u9fff，。：；、）]\n[ \t]*(?![-*]\s|\d+\.\s|#|\||>)[\u4e00-\u9fff（]")
LIST_ITEM = re.compile(r"^\s*(?:[-*]|\d+\.) ", re.MULTILINE)
# Words a Chinese learner would not find in the course's glossary (site/glossary.md) or the articles.
AVOID = {
    "图形卡": "显卡 / GPU",
    "显示卡": "显卡 / GPU",
    "设配": "设备",
    "元设备": "meta 设备",
    "笔记簿": "Jupyter 笔记本",
    "错误诊所": "报错诊所",
    "拷贝": "复制",
    "标注": "标签",
    "图片": "图像",
    "等效批大小": "有效批大小",
    "代价报告": "开销报告",
    "替代图像": "合成图像",
}
# The pairs that drifted apart, as patterns on Chinese prose with its code (`...`, fenced blocks) left out:
# each has one form (locale/zh_CN/STYLE.md, "One vocabulary"). An English term may follow its Chinese one in
# parentheses, 缓冲区（buffer）, and code (`scaler.step()`, torch.autograd.grad) is not prose.
AVOID_IN_PROSE = {
    r"\d\s*号显卡": "N 号 GPU",
    r"\bGPU (?:[0-9]|\{\w+\})(?![\d.:])": "N 号 GPU",  # a message's {index} too: {index} 号 GPU
    r"(?<![（(.\w])buffers?(?![）)\w(])": "缓冲区",
    r"(?<![（(.\w])autograd(?![）)\w.(])": "自动求导",
    r"(?<![（(.\w])scaler(?![）)\w.(])": "梯度缩放器",
    r"eager\s*模式": "即时执行模式",
    r"(?<!（)Run All": "“全部运行”（Run All）",
    r"DataLoader\s*的?子进程": "DataLoader 工作进程",
    r"CUDA [\d.]+ 版本": "CUDA 13.0 构建",
    r"恰好在[^，。；]{0,20}时|时[^，。；]{0,6}恰好": "当且仅当……时 / 只有……才",
    r"设备选择器": "设备选择函数",
    r"隐藏的同步": "隐式同步",
    r"原地": "就地",
    r"CPU 版本": "只支持 CPU 的构建",
    r"(?<![\w`/.-])CIFAR(?![-\w])": "CIFAR-10 数据集",
    r"演练|排练|彩排": "预演",
    r"迁移(?!学习)": "移植",
    # a course about laptops: the notebook is always a Jupyter 笔记本, the laptop a 笔记本电脑
    r"(?<!Jupyter )笔记本(?!电脑)": "Jupyter 笔记本（notebook）或笔记本电脑（laptop）",
    r"模拟 ?GPU": "模拟的 GPU",
    r"以 ?(?:GPU|Mac|笔记本电脑|\{machine\}) ?预演": "在模拟的 GPU 上预演",
    # a printed label ends in a half-width colon, as d2l-zh's output does; spaces after it that only pad a column
    # (to the end of the label or to a {field}) are output, not prose
    r"[\u4e00-\u9fff][,;?!]|[,;?!][\u4e00-\u9fff]|[\u4e00-\u9fff]: (?! *(?:$|\{))": "全角标点（，；？！：）",
}
# Markdown prose only (a run-time message prints code such as `if __name__ == "__main__":` as it is): straight
# double quotes around any text, Chinese or English (an English error message is quoted “…” or put in backticks).
AVOID_IN_MARKDOWN = {r'"[^"\n]+"': "“中文引号”（引英文的报错也用它，或者用反引号）"}
# A run-time message prints code as it is (device="cuda"): there straight quotes are a quotation when Chinese
# stands beside them (显示为 "cuda" 设备, 会报 "No CUDA GPUs are available", 警告："{warning}").
AVOID_IN_MESSAGES = {
    r'[\u4e00-\u9fff：，]\s*"[^"\n]+"|"[^"\n]+"(?=\s*[\u4e00-\u9fff])': "“中文引号”（引英文的报错也用它，或者用反引号）"
}
# English words left in Chinese prose, outside code and quoted messages; the glossary page pairs them on purpose.
# A first mention may name the English in parentheses: 核函数（kernel）.
ENGLISH_IN_PROSE = {
    r"(?<![（(.\w])kernels?(?![）)\w])": "核函数（kernel）",
    r"(?<![（(.\w])wheels?(?![）)\w])": "安装包（wheel）",
    r"(?<![（(.\w])issues?(?![）)\w])": "问题报告",
    r"(?<![（(.\w])bugs?(?![）)\w])": "错误 / 缺陷",
    r"(?<![（(.\w=`'\"])dtypes?(?![）)\w=(`'\":-])": "数据类型（dtype）",
    r"(?<![\w.`_'\"/-])numpy(?![\w.(`_'\"/-])": "NumPy",
    r"(?<![（(.\w`-])diff(?![）)\w`-])": "差异（diff）",
}
GLOSSARY_CATALOG = "locale/zh_CN/site/glossary.po"
# Full-width colons per 1,000 Chinese characters of a lesson's prose: fewer than this (STYLE.md, "Colons").
COLONS_PER_1000 = 6
SOURCES = translate.sources()


@pytest.mark.parametrize("source", SOURCES, ids=lambda s: s.name)
def test_catalog_is_complete_and_in_step(source):
    found = translate.problems(source)
    assert not found, f"{len(found)} entries to translate or update ({STATUS}):\n" + "\n".join(map(str, found))


def test_every_notebook_and_every_translated_module_has_a_catalog():
    names = {s.english for s in SOURCES}
    assert set(course.all_notebooks()) <= names
    assert {
        course.ROOT / "helpers" / "exercises" / "__init__.py",
        course.ROOT / "helpers" / "clinic" / "doctor.py",
    } <= names
    orphans = {p for p in translate.RUNTIME_CATALOGS.glob("*.po")} - {s.catalog for s in SOURCES}
    assert orphans <= {translate.HEADINGS_CATALOG}, f"catalogs of modules without messages: {sorted(orphans)}"


def test_a_module_without_messages_gets_no_catalog():
    with pytest.raises(SystemExit, match="no tr"):
        translate.main(["update", str(course.ROOT / "helpers" / "course" / "config.py")])
    assert not (translate.RUNTIME_CATALOGS / "config.po").exists()


def test_committed_chinese_notebooks_are_what_the_catalogs_generate():
    differ = translate.build(check=True)
    assert not differ, f"regenerate with `python tools/translate.py build`: {[course.repo_path(p) for p in differ]}"


def code_tokens(source: str) -> list[tuple[int, str]]:
    """The cell's Python tokens, with the texts it prints (translated in the twin) left out of their literals."""
    source = source.replace(translate.SETUP_CALL_ZH, translate.SETUP_CALL)
    lines = source.split("\n")
    for comment in reversed(translate.comments(source)):  # those of a script in a string too (a translation)
        if comment.whole_line:
            del lines[comment.first : comment.last + 1]
        else:
            lines[comment.first] = lines[comment.first][: comment.column].rstrip()
    source = "\n".join(lines)
    lines = source.split("\n")
    for literal in reversed(translate.literal_slots(source)):
        line = lines[literal.row]
        lines[literal.row] = line[: literal.start] + line[literal.end :]
    source = "\n".join(lines)
    text = "\n".join(translate.python_lines(source))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    return [(t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type not in skip]


@pytest.mark.parametrize("english", course.all_notebooks(), ids=lambda p: p.stem)
def test_chinese_notebook_has_the_same_code(english):
    en = nbformat.read(english, as_version=4)
    zh = nbformat.read(translate.zh_path(english), as_version=4)
    assert [c.cell_type for c in zh.cells] == [c.cell_type for c in en.cells]
    setups = 0
    for a, b in zip(en.cells, zh.cells, strict=True):
        if a.cell_type != "code":
            continue
        if not translate.python_cell(a.source):
            assert b.source == a.source
        elif a.source.lstrip().startswith("%%"):  # a Python cell magic: the same magic line, the same code
            assert b.source.lstrip().split("\n", 1)[0] == a.source.lstrip().split("\n", 1)[0]
            assert code_tokens(b.source) == code_tokens(a.source), a.source[:200]
        else:
            assert code_tokens(b.source) == code_tokens(a.source), a.source[:200]
        alt = translate.picture_alt(a)  # the one piece of metadata a twin translates
        table = translate.translations(translate.notebook_source(english).catalog) if alt else {}
        assert translate.picture_alt(b) == table.get(alt, alt)
        assert {**b.metadata, "mystnb": None} == {**a.metadata, "mystnb": None}
        assert bool(b.outputs) == bool(a.outputs), f"outputs where the English has them: {a.source[:80]!r}"
        setups += translate.SETUP_CALL_ZH in b.source
    assert setups == 1, "the setup cell should make the course speak Chinese: setup(lang='zh-CN')"
    assert zh.metadata["course"] == {"language": "zh-CN", "translated_from": course.repo_path(english)}


# What the course prints in English and never in Chinese: the verdicts, the doctor's levels, the clinic's line.
ENGLISH_OUTPUT = re.compile(r"\[PASS\]|\[TRY AGAIN\]|^\s*\[(?:OK|WARN|FAIL)\] |\[device error clinic\]", re.MULTILINE)


def output_text(nb) -> str:
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", ""))
            texts += [str(v) for k, v in out.get("data", {}).items() if k.startswith("text/")]
            texts += out.get("traceback", [])
    return "\n".join(texts)


@pytest.mark.parametrize("english", course.all_notebooks(), ids=lambda p: p.stem)
def test_chinese_notebook_stores_its_chinese_run(english):
    """The twin's outputs are its own run in Chinese (`translate.py build --outputs`), not the English ones."""
    printed = output_text(nbformat.read(translate.zh_path(english), as_version=4))
    found = sorted(set(ENGLISH_OUTPUT.findall(printed)))
    assert not found, f"English in the stored outputs {found}: run `python tools/translate.py build --outputs`"


def test_english_outputs_are_recognised():
    english = output_text(nbformat.read(course.NOTEBOOKS / "00_prerequisites.ipynb", as_version=4))
    assert ENGLISH_OUTPUT.search(english), "the English doctor in lesson 00 prints [OK] lines"
    assert not ENGLISH_OUTPUT.search("[通过] 对了\n[正常] Python 3.12\n[报错诊所]")


def _prose(text: str) -> str:
    """Markdown without its fenced code (comments there keep their lines)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def translated_pairs(kinds=(".ipynb", ".md")):
    for source in SOURCES:
        if source.english.suffix in kinds:
            for english, chinese in translate.translations(source.catalog).items():
                yield source.name, english, chinese


def test_translations_keep_the_markdown_structure():
    """Same links (targets), heading level, fences and list items, and bold that CommonMark closes."""
    wrong = []
    for name, english, chinese in translated_pairs():
        if sorted(LINK.findall(english)) != sorted(LINK.findall(chinese)):
            wrong.append((name, "links", english))
        elif re.match(r"#+ ", english) and re.match(r"#+ ", english).group() != (re.match(r"#+ ", chinese) or [""])[0]:
            wrong.append((name, "heading level", english))
        elif english.count("```") != chinese.count("```"):
            wrong.append((name, "code fences", english))
        elif len(re.findall(r"(?m)^\s*(?:[-*]|\d+\.) ", english)) != len(
            re.findall(r"(?m)^\s*(?:[-*]|\d+\.) ", chinese)
        ):
            wrong.append((name, "list items", english))
    assert not wrong, "\n".join(f"{n}: {what} differ in {e[:80]!r}" for n, what, e in wrong)


def _chinese_prose(text: str) -> str:
    """Prose without fenced or inline code, HTML tags and link targets: what a reader reads as Chinese sentences."""
    prose = re.sub(r"<[^>\n]*>", "", re.sub(r"`[^`\n]*`", "", _prose(text)))
    return re.sub(r"\]\([^)]*\)", "]", prose)


def _unquoted(text: str) -> str:
    """Prose without the messages it quotes (“...”, "..."): an English error message stays English."""
    return re.sub(r"“[^”\n]*”|\"[^\"\n]*\"", "", text)


def _strays(name: str, chinese: str, markdown: bool, english: str = "") -> list[tuple[str, str]]:
    """(what was found, what to write) for each avoided form in one Chinese entry (of ``english``)."""
    prose = _chinese_prose(chinese)
    patterns = [(AVOID_IN_PROSE, prose)]
    patterns.append((AVOID_IN_MARKDOWN if markdown else AVOID_IN_MESSAGES, prose))
    if name != GLOSSARY_CATALOG:
        words = re.sub(r"\{[^{}\n]*\}", "", _unquoted(prose))  # a message's {fields} are code
        for quoted in re.findall(r"[A-Za-z][\w.'-]*(?: [A-Za-z][\w.'-]*){3,}", words):
            if quoted in english:  # an error message cited as it is, unquoted, as a title
                words = words.replace(quoted, "")
        patterns.append((ENGLISH_IN_PROSE, words))
    return [
        (m.group(), good) for table, text in patterns for bad, good in table.items() for m in re.finditer(bad, text)
    ]


def test_translations_use_one_form_of_each_drifted_pair():
    markdown = {s.name for s in SOURCES if s.english.suffix in (".ipynb", ".md")}
    found = [
        (name, good, bad, english[:60])
        for name, english, chinese in translated_pairs((".ipynb", ".md", ".py"))
        if CJK.search(chinese)
        for bad, good in _strays(name, chinese, name in markdown, english)
    ]
    assert not found, "\n".join(f"{n}: {bad!r} (write {good!r}) in {e!r}" for n, good, bad, e in found)


def test_drifted_pairs_are_caught():
    """Each pattern finds its stray and leaves the forms the style guide allows."""
    strays = [
        "复制一份（拷贝）",
        "1 号显卡",
        "用 GPU 0 训练",
        "模块的 buffer 会移动",
        "脱离 autograd 之后",
        "通过 scaler 更新",
        "eager 模式",
        '"Run All" 会停下',
        "DataLoader 子进程",
        "（CUDA 13.0 版本）",
        "恰好在设备不同时复制",
        '叫 "准备工作" 的一节',
        '并修复 "Expected all tensors to be on the same device"',
        'AMD GPU 显示为 "cuda" 设备',
        "没有 GPU,课程照样能跑",
        "设备选择器",
        "隐藏的同步",
        "模型是原地移动的",
        "装的是 CPU 版本",
        "卷积 kernel 更喜欢",
        "每个 CUDA wheel 只带了",
        "尚未关闭的 issue 报告",
        "torch 2.7 有个 bug",
        "一张图片",
        "没有显卡: 课程照样能跑",
        "在笔记本里定义的类",
        "转换 dtype 也返回新张量",
        "与 numpy 共享内存",
        "以 GPU 预演",
        "一块模拟 GPU",
        "读一读这个 diff",
        "整个笔记本约 30 分钟",
        "没有 GPU {number}",
    ]
    allowed = [
        "缓冲区（buffer）",
        "`module.buffers()`",
        "torch.autograd.grad",
        "自动求导（autograd）",
        "调用 scaler.update()",
        "“全部运行”（Run All）",
        "每个样本恰好一次",
        "0 号 GPU",
        "CUDA 13.0 构建",
        "AMD GPU 显示为“cuda”设备",
        "修复 `Expected all tensors to be on the same device`",
        "核函数（kernel）",
        "Jupyter 内核（kernel）",
        "`torch.cuda.get_arch_list()`（这个安装包（wheel）的架构）",
        "会报“no kernel image is available for execution on the device”",
        "在 Jupyter 笔记本里定义的类",
        "转换数据类型（dtype）",
        "`x.dtype` 和 `torch.from_numpy`",
        "与 NumPy 共享内存",
        "在模拟的 GPU 上预演",
        "打印成差异（diff）",
        "在笔记本电脑上预演",
        "可用的加速器:    ",
        "CUDA GPU 上记录的:  {on_cuda}",
    ]
    words = [(p, re.escape(p)) for p in AVOID]
    missed = [s for s in strays if not _strays("page.po", s, True) and not any(re.search(p, s) for _, p in words)]
    assert not missed, missed
    assert not [s for s in allowed if _strays("page.po", s, True) or any(re.search(p, s) for _, p in words)]
    assert _strays("x.po", 'if __name__ == "__main__": 运行', False) == []  # a run-time message prints code
    assert _strays("x.po", 'AMD GPU 显示为 `cuda` 设备（device="cuda"）；用 `-` 读取', False) == []
    messages = [
        'AMD GPU 会显示为 "cuda" 设备',
        '会报 "No CUDA GPUs are available"',
        'PyTorch 警告："{w}"',
        '用 "-" 读取',
    ]
    assert all(_strays("x.po", message, False) for message in messages), "straight quotes in a message's prose"


def rendered(markdown: str) -> str:
    """HTML as CommonMark renders it (markdown-it-py, the parser MyST builds the site with)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").render(markdown)


def test_no_chinese_in_italics_and_bold_renders():
    """Chinese has no italics (emphasis is bold); a `**` that CommonMark leaves open shows as two stars."""
    wrong = []
    for name, _english, chinese in translated_pairs():
        html = rendered(re.sub(r"\{[^{}\n]*\}", "", chinese))  # an f-string's {fields} are code, not markdown
        wrong += [(name, "italic", em) for em in re.findall(r"<em>(.*?)</em>", html, re.DOTALL) if CJK.search(em)]
        if "**" in re.sub(r"<code>.*?</code>", "", html, flags=re.DOTALL):
            wrong.append((name, "bold that does not render", chinese[:80]))
    assert not wrong, "\n".join(f"{n}: {what}: {text!r}" for n, what, text in wrong)


def test_markdown_checks_see_italics_and_open_bold():
    assert re.search("<em>准备工作</em>", rendered("文章的 *准备工作* 一节"))
    assert "**" in rendered("这是**不会渲染的粗体。**后面紧跟中文")
    assert "<strong>" in rendered("这是 **会渲染的粗体**。")


@pytest.mark.parametrize("english", course.lessons(), ids=lambda p: p.stem)
def test_lesson_prose_has_few_colons(english):
    """Chinese prose does not keep the English colons one for one (d2l-zh: about 2 per 1,000 characters)."""
    zh = nbformat.read(translate.zh_path(english), as_version=4)
    text = "\n".join(_chinese_prose(c.source) for c in zh.cells if c.cell_type == "markdown")
    per_1000 = 1000 * text.count("：") / len(CJK.findall(text))
    assert per_1000 < COLONS_PER_1000, f"{per_1000:.1f} full-width colons per 1,000 Chinese characters"


@pytest.mark.parametrize("english", translate.translated_guides(), ids=lambda p: p.stem)
def test_chinese_guide_prose_has_few_colons(english):
    """A teacher's guide in Chinese is held to the lessons' measure (its tables and code left out of the count)."""
    text = translate.zh_guide_path(english).read_text(encoding="utf-8")
    prose = _chinese_prose("\n".join(line for line in text.splitlines() if not line.startswith("|")))
    per_1000 = 1000 * prose.count("：") / len(CJK.findall(prose))
    assert per_1000 < COLONS_PER_1000, f"{per_1000:.1f} full-width colons per 1,000 Chinese characters"


def test_translations_use_the_glossary():
    found = [
        (name, bad, good, english[:60])
        for name, english, chinese in translated_pairs((".ipynb", ".md", ".py"))
        for bad, good in AVOID.items()
        if bad in chinese
    ]
    assert not found, "\n".join(f"{n}: {bad!r} (the glossary says {good!r}) in {e!r}" for n, bad, good, e in found)


@pytest.mark.parametrize("english", course.lessons(), ids=lambda p: p.stem)
def test_chinese_title_cell_keeps_the_time_line(english):
    """The site and the README read a lesson's minutes from its title cell, in both languages."""
    zh = nbformat.read(translate.zh_path(english), as_version=4)
    assert re.search(r"^\*\*时间\*\*：核心内容约 \d+ 分钟，全部内容约 \d+ 分钟。$", zh.cells[0].source, re.MULTILINE)


def test_headings_catalog_maps_every_section_a_check_names(monkeypatch):
    """A check's "where to look" names a section by its English heading; in Chinese it names the Chinese one."""
    from helpers.exercises import heading

    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    named = set()
    for path in sorted((course.ROOT / "helpers" / "exercises").glob("ex*.py")):
        named |= set(re.findall(r'^SECTION\w* = "([^"]+)"', path.read_text(encoding="utf-8"), re.MULTILINE))
    assert named, "the checks name their sections in SECTION_* constants"
    missing = sorted(see for see in named if not CJK.search(heading(see)))
    assert not missing, f"sections named by checks without a Chinese heading: {missing}"


def test_language_follows_course_lang_then_the_locale(monkeypatch):
    for name in ("COURSE_LANG", *i18n.LOCALE_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    assert i18n.language() == "zh-CN"
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    assert i18n.language() == "en"
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    assert i18n.language() == "zh-CN"
    monkeypatch.setenv("COURSE_LANG", "fr")
    with pytest.warns(UserWarning, match="not a language the course speaks"):
        assert i18n.language() == "en"
    with pytest.raises(ValueError, match="zh-CN"):
        i18n.set_language("klingon")


def test_tr_translates_formats_and_falls_back(monkeypatch):
    table = {"{n} tensors on {device}": "{device} 上有 {n} 个张量", "broken {x}": "坏了 {y}"}
    monkeypatch.setattr(i18n, "_catalog", lambda: table)
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    assert i18n.tr("{n} tensors on {device}", n=2, device="cuda:0") == "cuda:0 上有 2 个张量"
    assert i18n.tr("not translated {x}", x=1) == "not translated 1"
    assert i18n.tr("broken {x}", x=1) == "broken 1"  # a translation that lost its field: the English, not a crash
    monkeypatch.setenv("COURSE_LANG", "en")
    assert i18n.tr("{n} tensors on {device}", n=2, device="cpu") == "2 tensors on cpu"


def test_fuzzy_marks_a_changed_paragraph_outdated(tmp_path, monkeypatch):
    """Change an English paragraph: its translation is kept but marked outdated, and status names it."""
    english = tmp_path / "page.md"
    english.write_text("# A title\n\nThe tensor moves to the GPU with one call.\n", encoding="utf-8")
    source = translate.Source(english, tmp_path / "page.po", lambda: (
        (text, "page.md", line, False) for text, line in translate.markdown_messages(english.read_text())
    ))  # fmt: skip
    translate.update(source)
    assert {p.kind for p in translate.problems(source)} == {"missing"}
    catalog = translate.load(source.catalog)
    for message in catalog:
        if message.id:
            message.string = "译文：" + message.id
    translate.save(catalog, source.catalog, "page.md")
    assert translate.problems(source) == []
    english.write_text("# A title\n\nThe tensor moves to the GPU with a single call.\n", encoding="utf-8")
    translate.update(source)
    found = translate.problems(source)
    assert [(p.kind, p.english) for p in found] == [("outdated", "The tensor moves to the GPU with a single call.")]
    assert "译文：The tensor moves to the GPU with one call." not in translate.translations(source.catalog).values()


# The lessons' twins run under nbval (conftest.py); one solutions twin is run here, for its verdicts in Chinese.
SMOKE = [course.SOLUTIONS / "01_cpu_to_gpu_cuda_solutions.ipynb"]


@pytest.mark.parametrize("english", SMOKE, ids=lambda p: p.stem)
def test_a_chinese_notebook_runs_and_speaks_chinese(english, tmp_path):
    """Run the Chinese twin for real: no error outside the cells that raise on purpose, checks in Chinese."""
    twin = translate.zh_path(english)
    work = tmp_path / twin.relative_to(course.NOTEBOOKS)
    work.parent.mkdir(parents=True)
    shutil.copy(twin, work)
    nb = nbformat.read(work, as_version=4)
    resources = {"metadata": {"path": str(work.parent)}}
    NotebookClient(nb, timeout=600, kernel_name="python3", resources=resources, allow_errors=True).execute()
    errors = [
        c.source[:80]
        for c in nb.cells
        if c.cell_type == "code"
        and "raises-exception" not in c.metadata.get("tags", [])
        and any(o.output_type == "error" for o in c.outputs)
    ]
    assert not errors, f"cells that raised: {errors}"
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    verdict = "[通过]" if "solutions" in english.parts else "[再试一次]"
    assert verdict in printed and "[PASS]" not in printed and "[TRY AGAIN]" not in printed


def test_chinese_readme_is_linked_first_and_its_links_and_minutes_hold():
    readme = (course.ROOT / "README.md").read_text(encoding="utf-8")
    assert "[中文](README.zh-CN.md)" in "\n".join(readme.splitlines()[:3])
    text = (course.ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if target.startswith("https://colab.research.google.com/"):
            rel = target.split(f"/blob/{course.branch()}/", 1)[1]
            assert rel.startswith("notebooks/zh-CN/") and (course.ROOT / rel).exists(), target
        elif not target.startswith(("http://", "https://", "#")):
            assert (course.ROOT / target).exists(), target
    rows = re.findall(r"^\| (\d\d) \| .+ \| (\d+) \| (\d+) \| \[打开\]\(([^)]+)\) \|$", text, re.MULTILINE)
    assert [r[0] for r in rows] == [p.name[:2] for p in course.lessons()]
    for (number, essentials, whole, url), english in zip(rows, course.lessons(), strict=True):
        title = nbformat.read(translate.zh_path(english), as_version=4).cells[0].source
        found = re.search(r"核心内容约 (\d+) 分钟，全部内容约 (\d+) 分钟", title) or re.search(
            r"essentials about (\d+) min, whole notebook about (\d+) min", title
        )
        assert found and found.groups() == (essentials, whole), number
        assert url == course.colab_url(translate.zh_path(english))


def test_memory_table_speaks_chinese_and_stays_aligned(monkeypatch):
    """Notebook 07's estimate table (and its check's feedback): Chinese labels, columns aligned by display width."""
    from helpers.lesson.memory import TrainingMemory

    memory = TrainingMemory(1 << 20, 2 << 20, 3 << 20, 4 << 20, 5 << 20)
    english = memory.table(memory).splitlines()
    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    chinese = memory.table(memory).splitlines()
    assert chinese[1].startswith("参数") and chinese[-1].startswith("合计") and "估算" in chinese[0]
    assert [i18n.columns(line) for line in chinese] == [len(line) for line in english]


def _figure_texts(fig) -> list[str]:
    texts = [t.get_text() for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label)]
    texts += [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    return [*texts, fig._suptitle.get_text() if fig._suptitle else ""]


@pytest.mark.parametrize("font", ["WenQuanYi Zen Hei", None], ids=["a CJK font", "no CJK font"])
def test_plots_speak_chinese_only_where_a_font_can_draw_it(monkeypatch, font):
    """Chinese titles, labels and legends with a CJK font; without one, the English (never boxes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.lab import plots

    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    monkeypatch.setattr(plots, "chinese_font", lambda: font)
    history = type("History", (), {"epochs": [1, 2], "train_loss": [2.3, 2.2], "test_loss": [2.3, 2.25]})()
    history.test_accuracy, history.data_name = [0.1, 0.12], "CIFAR-10"
    fig = plots.plot_history(history)
    texts = [t for t in _figure_texts(fig) if t]
    plt.close(fig)
    assert "测试准确率" in texts if font else "test accuracy" in texts
    assert all(bool(CJK.search(t)) == bool(font) for t in texts), texts
    assert plots.figure_style() == {} or font


@pytest.mark.parametrize("font", ["WenQuanYi Zen Hei", None], ids=["a CJK font", "no CJK font"])
def test_the_speed_ladder_plot_speaks_chinese_in_every_line(monkeypatch, font):
    """Lesson 06's ladder: both title lines, the axis label, the legend, every rung's name and every bar's label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from helpers.lab import plots, speed_plots
    from helpers.lesson.speed import LadderResult, ladder

    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    monkeypatch.setattr(plots, "chinese_font", lambda: font)
    rungs = ladder()
    names = [r.name for r in rungs]
    assert set(names) == set(speed_plots.RUNG_LABELS), "a rung the plot does not name in Chinese"
    result = LadderResult(
        rungs, dict.fromkeys(names, 100.0), dict.fromkeys(names, 1.0), dict.fromkeys(names, 0.5), 12, {}, {},
        torch.device("cpu"), 5, {},
    )  # fmt: skip
    fig = speed_plots.plot_ladder(result)
    ax = fig.axes[0]
    title = ax.title.get_text().split("\n")
    texts = [
        *title,
        *_figure_texts(fig),
        *(t.get_text() for t in ax.get_yticklabels()),
        *(t.get_text() for t in ax.texts),
    ]
    texts = [t for t in texts if t]
    plt.close(fig)
    assert len(title) == 2 and len(texts) >= 2 + len(names) * 2
    assert all(bool(CJK.search(t)) == bool(font) for t in texts), texts
    assert ("1 次预热" in title[1]) if font else (title[1] == result.length())


def test_a_figure_leaves_the_interactive_mode_as_the_backend_set_it(monkeypatch):
    """The inline backend turns interactive mode on when a kernel's first figure is made, inside the figure's
    settings: putting back every setting afterwards (plt.rc_context) turned it off, and no later figure showed."""
    import matplotlib

    from helpers.lab import plots

    monkeypatch.setenv("COURSE_LANG", "zh-CN")
    monkeypatch.setattr(plots, "chinese_font", lambda: "WenQuanYi Zen Hei")
    before = matplotlib.is_interactive()
    try:
        matplotlib.interactive(False)
        with plots.figure_context():
            assert matplotlib.rcParams["font.family"][0] == "WenQuanYi Zen Hei"
            matplotlib.interactive(True)  # what the inline backend does at the first figure
        assert matplotlib.is_interactive()
        assert matplotlib.rcParams["font.family"][0] != "WenQuanYi Zen Hei"  # the figure's own settings are undone
    finally:
        matplotlib.interactive(before)


def test_a_cjk_font_is_looked_up_by_name():
    """chinese_font() names a font matplotlib draws with, or None: where it names one, it has the glyphs."""
    from matplotlib import font_manager

    from helpers.lab import plots

    name = plots.chinese_font()
    if name is None:
        pytest.skip("no CJK font on this machine: the figures keep their English labels")
    path = font_manager.findfont(font_manager.FontProperties(family=name), fallback_to_default=False)
    from matplotlib.ft2font import FT2Font

    assert FT2Font(path).get_char_index(ord("显")), f"{name} ({path}) has no glyph for 显"


def _catalogs() -> list:
    """Every catalog of the course: the run-time ones (helpers/locale), the notebooks', pages' and guides' (locale/)."""
    return sorted((course.ROOT / "helpers" / "locale").rglob("*.po")) + sorted((course.ROOT / "locale").rglob("*.po"))


def _lesson_neutral(chinese: str, catalog) -> str:
    """A lesson's catalog numbers its exercises with the lesson ("Exercise 1" is 练习 5.1 in lesson 05): that number
    is the one difference allowed between two catalogs' forms of one English message."""
    if m := re.match(r"(\d\d)_", catalog.name):
        chinese = re.sub(rf"练习 {int(m.group(1))}\.(\d)", r"练习 N.\1", chinese)
    return chinese


def different_forms(catalogs) -> dict[str, dict[str, list[str]]]:
    """Each English message that two catalogs translate differently: its Chinese forms and the catalogs of each."""
    forms: dict[str, dict[str, list[str]]] = {}
    for catalog in catalogs:
        for english, chinese in translate.translations(catalog).items():
            key = english if isinstance(english, str) else english[0]
            text = _lesson_neutral(chinese if isinstance(chinese, str) else chinese[0], catalog)
            forms.setdefault(key, {}).setdefault(text, []).append(translate._shown(catalog))
    return {english: found for english, found in forms.items() if len(found) > 1}


def test_one_english_message_has_one_chinese_form():
    """The same English, in two catalogs, reads the same in Chinese: one vocabulary, one voice."""
    found = different_forms(_catalogs())
    assert not found, "\n".join(
        f"{english[:80]!r}:\n"
        + "\n".join(f"    {chinese[:80]!r} in {', '.join(where)}" for chinese, where in forms.items())
        for english, forms in found.items()
    )


def test_two_forms_of_one_message_are_found(tmp_path):
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import write_po

    for name, chinese in (("06_a.po", "也就是在 __main__ 中；练习 6.1"), ("08_b.po", "即在 __main__ 中；练习 8.1")):
        catalog = Catalog(locale="zh_CN")
        catalog.add("i.e. in __main__; Exercise 1", chinese)
        catalog.add("Exercise 2", f"练习 {name[1]}.2")
        with (tmp_path / name).open("wb") as f:
            write_po(f, catalog)
    found = different_forms(sorted(tmp_path.glob("*.po")))
    assert list(found) == ["i.e. in __main__; Exercise 1"], found


def test_chinese_readme_names_each_lesson_by_its_title():
    """README.zh-CN's lesson table gives each lesson the title its Chinese notebook's first heading gives it."""
    text = (course.ROOT / "README.zh-CN.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\d\d) \| (.+?) \| ", text, re.MULTILINE))
    titles = {}
    for english in course.lessons():
        first = nbformat.read(translate.zh_path(english), as_version=4).cells[0].source.splitlines()[0]
        titles[english.name[:2]] = re.sub(r"^#\s+\d\d\s+·\s+", "", first).strip()
    assert set(rows) == set(titles)
    wrong = {n: (rows[n], titles[n]) for n in titles if rows[n] != titles[n]}
    assert not wrong, "\n".join(f"{n}: README {r!r}, lesson {t!r}" for n, (r, t) in wrong.items())


def _english_lines() -> list[re.Pattern]:
    """The course's own English sentences that have a Chinese translation, one pattern per line of each: the
    run-time messages of the helpers' catalogs and the texts the notebooks' code cells print. A {field} matches
    anything; a line must hold three English words outside its fields to count as a sentence."""
    texts = set()
    for path in translate.RUNTIME_CATALOGS.glob("*.po"):
        texts |= {e for e, z in i18n.read_po(path).items() if z != e}
    for english in course.all_notebooks():
        table = translate.translations(translate.notebook_source(english).catalog)
        nb = nbformat.read(english, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                for literal in translate.printed_literals(cell.source):
                    if table.get(literal.text, literal.text) != literal.text:
                        texts.add(literal.text.replace("\\n", "\n"))
    patterns = set()
    for text in texts:
        for line in text.splitlines():
            words = re.sub(r"\{[^{}]*\}", " ", line)
            if len(re.findall(r"[A-Za-z]{2,}", words)) < 3 or not line.strip():
                continue
            parts = re.split(r"\{[^{}]*\}", line.strip().replace("{{", "{").replace("}}", "}"))
            patterns.add("".join(p if i == 0 else ".*?" + p for i, p in enumerate(map(re.escape, parts))))
    return [re.compile(p) for p in sorted(patterns) if p]


def _stored_english(nb, patterns) -> list[str]:
    found = []
    for line in output_text(nb).splitlines():
        line = line.strip()
        if line and not CJK.search(line) and any(p.fullmatch(line) for p in patterns):
            found.append(line)
    return found


@pytest.fixture(scope="module")
def english_lines():
    return _english_lines()


@pytest.mark.parametrize("english", course.all_notebooks(), ids=lambda p: p.stem)
def test_chinese_outputs_have_no_english_sentence_of_the_course(english, english_lines):
    """No line of a twin's stored outputs is one of the course's own English sentences that has a Chinese form."""
    found = _stored_english(nbformat.read(translate.zh_path(english), as_version=4), english_lines)
    assert not found, f"English in the stored outputs (run `python tools/translate.py build --outputs`): {found[:8]}"


def test_the_english_sentence_measure_finds_the_english_runs(english_lines):
    """The same measure on the English lessons finds their sentences: it cannot pass for want of patterns."""
    for stem in ("01_cpu_to_gpu_cuda", "06_speed", "07_memory"):
        found = _stored_english(nbformat.read(course.NOTEBOOKS / f"{stem}.ipynb", as_version=4), english_lines)
        assert len(found) >= 3, (stem, found)
