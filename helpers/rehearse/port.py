"""``--fix``: the device-agnostic version of a script (the articles' method 1), written with libcst so that the
learner's formatting and comments stay; printed as a diff, then rehearsed as a GPU, a Mac and a laptop.

What it rewrites: one device chosen once, after the imports (CUDA, else the Mac's MPS, else the CPU), or the
script's own ``device = ...`` given that fallback; ``.cuda()`` / ``.cuda(i)`` to ``.to(device)``; ``if
torch.cuda.is_available():`` or ``if use_cuda:`` (a name assigned from it) around moves only (method 2) unwrapped;
``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor`` to the CPU type, with what ``Tensor(...)`` makes
moved to ``device``; ``'cuda'``, ``'cuda:1'`` and ``torch.device('cuda')`` where a tensor is moved or made, to
``device``; an argparse ``--device`` default and a config dictionary's ``'device': 'cuda'`` to the same fallback;
``init_process_group('nccl')`` to NCCL where CUDA is and gloo elsewhere; ``torch.load`` given
``map_location=device``; ``torch.cuda.FloatTensor(...)`` to ``torch.FloatTensor(...).to(device)`` and
``.type(torch.cuda.FloatTensor)`` to ``.to(device, torch.float32)``; a CUDA default tensor type to
``torch.set_default_device(device)``; ``.numpy()`` of a device tensor to ``.detach().cpu().numpy()``; a DataParallel
wrapper's ``state_dict()`` to ``getattr(model, "module", model).state_dict()`` (the wrapper's own model, whether or
not the branch that wraps it ran); a script that starts DataLoader workers at its top level gets that work under
``if __name__ == "__main__":``. What it leaves to the learner, it lists (the guard, where a function or class needs
the moved names when it is defined; ``CUDA_VISIBLE_DEVICES`` set in the script; whatever the static reading still
finds in the port, such as ``.to(rank)`` or an unguarded ``torch.cuda`` call).
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
from pathlib import Path

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from helpers.course.i18n import tr, tr_lazy
from helpers.rehearse.static_check import _dotted, _string, has_main_guard, read

DEVICE = "device"
CHOICE_TEXT = '"cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"'
CHOICE = f"torch.device({CHOICE_TEXT})"
BACKEND = '"nccl" if torch.cuda.is_available() else "gloo"'
_DTYPES = {
    "FloatTensor": "float32",
    "DoubleTensor": "float64",
    "HalfTensor": "float16",
    "LongTensor": "int64",
    "IntTensor": "int32",
    "ByteTensor": "uint8",
    "BoolTensor": "bool",
    "ShortTensor": "int16",
    "CharTensor": "int8",
    "BFloat16Tensor": "bfloat16",
}
_IS_AVAILABLE = m.Call(
    func=m.Attribute(value=m.Attribute(value=m.Name("torch"), attr=m.Name("cuda")), attr=m.Name("is_available"))
)


# The machines the port is rehearsed on, as its report names them
REHEARSED_AS = {
    "gpu": tr_lazy("rehearsed as gpu"),
    "mac": tr_lazy("rehearsed as mac"),
    "laptop": tr_lazy("rehearsed as laptop"),
}


def _device_value(node: cst.BaseExpression) -> bool:
    """A device written in: 'cuda', 'cuda:1', torch.device('cuda'...)."""
    text = _string(node)
    if text is not None:
        return text.startswith("cuda")
    return (
        m.matches(node, m.Call(func=m.Attribute(value=m.Name("torch"), attr=m.Name("device"))))
        and bool(node.args)
        and (_string(node.args[0].value) or "").startswith("cuda")
    )


class _Port(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, numpy_lines: set[int], wrappers: set[str], aliases: dict[str, str], flags: set[str]) -> None:
        super().__init__()
        self.numpy_lines = numpy_lines
        self.wrappers = wrappers
        self.aliases = aliases  # Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor: {"Tensor": ...}
        self.flags = flags  # names assigned from torch.cuda.is_available()
        self.has_device = False
        self.changed = 0

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        target = updated.targets[0].target if len(updated.targets) == 1 else None
        if isinstance(target, cst.Name) and target.value in self.aliases:
            self.changed += 1
            return updated.with_changes(value=cst.parse_expression(f"torch.{self.aliases[target.value]}"))
        if (
            len(updated.targets) == 1
            and m.matches(updated.targets[0].target, m.Name(DEVICE))
            and ("cuda" in cst.Module([]).code_for_node(original.value))
        ):
            self.has_device = True
            self.changed += 1
            return updated.with_changes(value=cst.parse_expression(CHOICE))
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = _dotted(updated.func)
        last = func.rsplit(".", 1)[-1]
        device = cst.Name(DEVICE)
        if last == "cuda" and isinstance(updated.func, cst.Attribute) and func != "torch.cuda":
            self.changed += 1
            keep = [a for a in updated.args if a.keyword and a.keyword.value == "non_blocking"]
            return updated.with_changes(
                func=updated.func.with_changes(attr=cst.Name("to")), args=[cst.Arg(device), *keep]
            )
        if last == "to" and updated.args and updated.args[0].keyword is None and _device_value(updated.args[0].value):
            self.changed += 1
            return updated.with_changes(args=[updated.args[0].with_changes(value=device), *updated.args[1:]])
        if isinstance(updated.func, cst.Name) and func in self.aliases:  # Tensor(n, 1): made on the CPU, then moved
            self.changed += 1
            return cst.Call(func=cst.Attribute(value=updated, attr=cst.Name("to")), args=[cst.Arg(device)])
        legacy = _dotted(updated.args[0].value) if updated.args else ""
        if last == "type" and (re.match(r"torch\.cuda\.\w+Tensor$", legacy) or legacy in self.aliases):
            dtype = _DTYPES.get(self.aliases.get(legacy, legacy.rsplit(".", 1)[-1]), "float32")
            self.changed += 1
            return updated.with_changes(
                func=updated.func.with_changes(attr=cst.Name("to")),
                args=[
                    cst.Arg(device, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                    cst.Arg(cst.parse_expression(f"torch.{dtype}")),
                ],
            )
        if re.fullmatch(r"torch\.cuda\.\w+Tensor", func):
            self.changed += 1
            cpu_type = updated.with_changes(func=cst.parse_expression(f"torch.{func.rsplit('.', 1)[-1]}"))
            return cst.Call(func=cst.Attribute(value=cpu_type, attr=cst.Name("to")), args=[cst.Arg(device)])
        if func.endswith("set_default_tensor_type") and "cuda" in cst.Module([]).code_for_node(original):
            self.changed += 1
            return cst.parse_expression(f"torch.set_default_device({DEVICE})")
        if func.endswith("set_default_device") and updated.args and _device_value(updated.args[0].value):
            self.changed += 1
            return updated.with_changes(args=[cst.Arg(device)])
        if func == "torch.load" and not any(a.keyword and a.keyword.value == "map_location" for a in updated.args):
            if len([a for a in updated.args if a.keyword is None]) < 2:
                self.changed += 1
                args = list(updated.args)
                args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                return updated.with_changes(
                    args=[
                        *args,
                        cst.Arg(
                            device,
                            keyword=cst.Name("map_location"),
                            equal=cst.AssignEqual(
                                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
                            ),
                        ),
                    ]
                )
        if last == "numpy" and isinstance(updated.func, cst.Attribute):
            line = self.get_metadata(PositionProvider, original).start.line
            if line in self.numpy_lines:
                self.changed += 1
                receiver = cst.Call(
                    func=cst.Attribute(
                        value=cst.Call(func=cst.Attribute(value=updated.func.value, attr=cst.Name("detach"))),
                        attr=cst.Name("cpu"),
                    )
                )
                return updated.with_changes(func=updated.func.with_changes(value=receiver))
        if (
            last == "state_dict"
            and isinstance(updated.func, cst.Attribute)
            and _dotted(updated.func.value) in self.wrappers
        ):
            self.changed += 1  # getattr: the wrapper may be made in one branch only (one GPU, several, none)
            owner = cst.Module([]).code_for_node(updated.func.value)
            inner = cst.parse_expression(f'getattr({owner}, "module", {owner})')
            return updated.with_changes(func=updated.func.with_changes(value=inner))
        changed = False
        args = []
        for i, arg in enumerate(updated.args):
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in ("device", "map_location") and _device_value(arg.value):
                arg, changed = arg.with_changes(value=device), True
            elif keyword == "default" and last == "add_argument" and _device_value(arg.value):  # --device cuda
                arg, changed = arg.with_changes(value=cst.parse_expression(CHOICE_TEXT)), True
            elif last == "init_process_group" and (keyword == "backend" or (keyword is None and i == 0)):
                if (_string(arg.value) or "").lower() == "nccl":  # NCCL needs CUDA GPUs: gloo elsewhere
                    arg, changed = arg.with_changes(value=cst.parse_expression(BACKEND)), True
            args.append(arg)
        if changed:
            self.changed += 1
            return updated.with_changes(args=args)
        return updated

    def leave_DictElement(self, original: cst.DictElement, updated: cst.DictElement) -> cst.DictElement:
        """``{'device': 'cuda'}``: a config's device, with the fallback."""
        if "device" in (_string(updated.key) or "") and _device_value(updated.value):
            self.changed += 1
            return updated.with_changes(value=cst.parse_expression(CHOICE_TEXT))
        return updated

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        """A batch moved in part (``imgs`` but not ``targets``): every tensor of that batch goes to the device."""
        body = list(updated.body.body)
        groups = _groups(updated.target)
        for statement in body[:2]:
            if m.matches(statement, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Tuple())])])):
                groups += _groups(statement.body[0].targets[0].target)
        moved = {name: i for i, s in enumerate(body) if (name := _moved_name(s))}
        for group in groups:
            done = [moved[name] for name in group if name in moved]
            missing = [name for name in group if name not in moved]
            if done and missing:
                self.changed += 1
                lines = [cst.parse_statement(f"{name} = {name}.to({DEVICE})\n") for name in missing]
                at = max(done) + 1
                body[at:at] = lines
                moved = {name: i for i, s in enumerate(body) if (name := _moved_name(s))}
        return updated.with_changes(body=updated.body.with_changes(body=body))

    def leave_If(self, original: cst.If, updated: cst.If):
        """Method 2's ``if torch.cuda.is_available():`` (or ``if use_cuda:``, a name assigned from it) around moves
        only: the moves, unguarded."""
        flag = isinstance(updated.test, cst.Name) and updated.test.value in self.flags
        if not (flag or m.matches(updated.test, _IS_AVAILABLE)) or updated.orelse is not None:
            return updated
        body = updated.body.body
        moves = all(
            m.matches(s, m.SimpleStatementLine()) and ".to(device" in cst.Module([]).code_for_node(s) for s in body
        )
        if not moves:
            return updated
        self.changed += 1
        return cst.FlattenSentinel(
            [
                s.with_changes(leading_lines=updated.leading_lines if i == 0 else s.leading_lines)
                for i, s in enumerate(body)
            ]
        )


def _groups(target: cst.BaseExpression) -> list[list[str]]:
    """The names unpacked together from one batch: ``imgs, targets = data`` gives [["imgs", "targets"]]."""
    if not isinstance(target, (cst.Tuple, cst.List)):
        return []
    names = [e.value.value for e in target.elements if isinstance(e.value, cst.Name)]
    nested = [g for e in target.elements for g in _groups(e.value)]
    return [names, *nested] if len(names) > 1 else nested


def _moved_name(statement: cst.CSTNode) -> str | None:
    """``x`` for a line ``x = x.to(device...)``."""
    if not m.matches(statement, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name())])])):
        return None
    assign = statement.body[0]
    name = assign.targets[0].target.value
    value = assign.value
    if (
        m.matches(value, m.Call(func=m.Attribute(value=m.Name(name), attr=m.Name("to"))))
        and value.args
        and (m.matches(value.args[0].value, m.Name(DEVICE)))
    ):
        return name
    return None


def _legacy_aliases(module: cst.Module) -> dict[str, str]:
    """Names bound to a CUDA tensor type, ``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``: the
    name and the type (``FloatTensor``), so that ``Tensor(...)`` and ``.type(Tensor)`` can be ported."""
    aliases = {}
    for assign in m.findall(module, m.Assign(targets=[m.AssignTarget(m.Name())])):
        value = assign.value.body if isinstance(assign.value, cst.IfExp) else assign.value
        if re.fullmatch(r"torch\.cuda\.\w+Tensor", _dotted(value)):
            aliases[assign.targets[0].target.value] = _dotted(value).rsplit(".", 1)[-1]
    return aliases


def _availability_flags(module: cst.Module) -> set[str]:
    """Names assigned from ``torch.cuda.is_available()`` (``use_cuda``, ``cuda = True if ... else False``)."""
    return {
        assign.targets[0].target.value
        for assign in m.findall(module, m.Assign(targets=[m.AssignTarget(m.Name())]))
        if assign.targets[0].target.value != DEVICE and m.findall(assign.value, _IS_AVAILABLE)
    }


def _insert_device(module: cst.Module) -> cst.Module:
    """``device = ...`` after the last import at the top of the script."""
    body = list(module.body)
    last_import = -1
    for i, statement in enumerate(body):
        if m.matches(statement, m.SimpleStatementLine(body=[m.Import() | m.ImportFrom()])):
            last_import = i
        elif i > last_import + 1 and last_import >= 0:
            break
    line = cst.parse_statement(f"{DEVICE} = {CHOICE}\n")
    line = line.with_changes(leading_lines=[cst.EmptyLine()])
    body.insert(last_import + 1, line)
    return module.with_changes(body=body)


_DEFINITION = m.SimpleStatementLine(body=[m.Import() | m.ImportFrom()]) | m.FunctionDef() | m.ClassDef()


def _guard_the_script(module: cst.Module) -> cst.Module | None:
    """A script that starts DataLoader workers with no ``__main__`` guard: its imports, functions and classes stay
    where a spawned worker imports them, every other top-level statement goes, in order, under ``if __name__ ==
    "__main__":``. None where a function or class needs, when it is defined, a name those statements set (a
    default, a decorator, a base, a class attribute): moving code is then the learner's call."""
    body = list(module.body)
    docstring = 1 if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString())])) else 0
    dunder = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(value=m.MatchRegex(r"__\w+__")))])])
    moved = [s for s in body[docstring:] if not m.matches(s, _DEFINITION | dunder)]
    if not moved:
        return None
    targets = [t.target for s in moved for t in m.findall(s, m.AssignTarget() | m.For() | m.AnnAssign())]
    assigned = {n.value for target in targets for n in m.findall(target, m.Name())}
    for definition in (s for s in body if m.matches(s, m.FunctionDef() | m.ClassDef())):
        at_definition = [*definition.decorators]
        if isinstance(definition, cst.FunctionDef):
            at_definition += [p.default for p in definition.params.params if p.default is not None]
        else:
            at_definition += [*definition.bases]
            at_definition += [s for s in definition.body.body if not m.matches(s, m.FunctionDef())]
        if {n.value for node in at_definition for n in m.findall(node, m.Name())} & assigned:
            return None
    moved_ids = {id(s) for s in moved}
    kept = [s for s in body if id(s) not in moved_ids]
    guard = cst.parse_statement('if __name__ == "__main__":\n    pass\n')
    blank_unindented = [  # no trailing spaces on the blank lines inside the guard
        s.with_changes(leading_lines=[e.with_changes(indent=e.comment is not None) for e in s.leading_lines])
        for s in moved
    ]
    guard = guard.with_changes(
        body=guard.body.with_changes(body=blank_unindented), leading_lines=[cst.EmptyLine(), cst.EmptyLine()]
    )
    return module.with_changes(body=[*kept, guard])


def port_source(code: str, path: str = "script.py") -> tuple[str, list[str]]:
    """The ported code, and what is left to the learner (lines of text)."""
    module = cst.parse_module(code)
    reading = _read_code(code, path)
    numpy_lines = {f.line for f in reading.findings if f.kind == "numpy-of-device-tensor"}
    wrappers = {f.message.removesuffix(".state_dict()") for f in reading.findings if f.kind == "dataparallel-prefix"}
    port = _Port(numpy_lines, wrappers, _legacy_aliases(module), _availability_flags(module))
    ported = MetadataWrapper(module).visit(port)
    if port.changed and not port.has_device:
        ported = _insert_device(ported)
    unguarded = [f for f in reading.findings if f.kind == "workers-no-main-guard"]
    if unguarded and not has_main_guard(code):
        guarded = _guard_the_script(ported)
        if guarded is not None:
            ported, reading.findings[:] = guarded, [f for f in reading.findings if f not in unguarded]
    left = [
        tr("{line}: [{kind}] left for you: {what}", line=f.line, kind=f.kind, what=f.message)
        for f in reading.findings
        if f.kind == "workers-no-main-guard" or "CUDA_VISIBLE_DEVICES" in f.message
    ]
    listed = {(f.kind, f.message) for f in reading.findings if f.kind == "workers-no-main-guard"}
    for f in _read_code(ported.code, path).problems:  # what still ties the port to one machine, at the port's line
        if (f.kind, f.message) not in listed and "CUDA_VISIBLE_DEVICES" not in f.message:
            left.append(tr("{line}: [{kind}] left for you: {what}", line=f.line, kind=f.kind, what=f.message))
    return ported.code, left


def _read_code(code: str, path: str):
    """The static reading of ``code`` as if it were the file ``path``."""
    tmp = Path(tempfile.mkdtemp()) / Path(path).name
    try:
        tmp.write_text(code, encoding="utf-8")
        return read(tmp)
    finally:
        tmp.unlink(missing_ok=True)
        tmp.parent.rmdir()


def port_command(
    script: Path, args: list[str], write: str | None, as_json: bool, steps: int, loops: int, timeout: float
) -> int:
    """``--fix``: the diff, what is left, and the ported script rehearsed on three machines."""
    from helpers.rehearse.script_run import rehearse

    code = script.read_text(encoding="utf-8")
    ported, left = port_source(code, str(script))
    diff = "".join(
        difflib.unified_diff(code.splitlines(True), ported.splitlines(True), f"{script}", f"{script} (ported)")
    )
    print(diff or tr("Nothing to port: the script already chooses its device once."))
    for line in left:
        print(line)
    target = Path(write) if write else None
    fd, temp = tempfile.mkstemp(suffix=".py", prefix=f".{script.stem}_ported_", dir=script.parent)
    os.close(fd)
    verdicts = {}
    try:
        Path(temp).write_text(ported, encoding="utf-8")
        for machine in ("gpu", "mac", "laptop"):
            result = rehearse(
                temp, *args, machine=machine, steps=steps, loops=loops, timeout=timeout, cwd=script.parent
            )
            verdicts[machine] = result
            problems = [f for f in result.get("findings", []) if f.get("blocks")]
            print(
                tr(
                    "{rehearsed}: {verdict}",
                    rehearsed=tr(REHEARSED_AS[machine]),
                    verdict=tr("runs")
                    if result.get("runs")
                    else tr(
                        "{n} problem(s): {kinds}",
                        n=len(problems),
                        kinds=", ".join(sorted({f["kind"] for f in problems})) or result.get("tool_error", ""),
                    ),
                )
            )
    finally:
        os.unlink(temp)
    if target is not None:
        target.write_text(ported, encoding="utf-8")
        print(tr("wrote {path}", path=str(target)))
    return 0 if all(v.get("runs") for v in verdicts.values()) else 1
