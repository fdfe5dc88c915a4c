"""``--static``: read a script without running it and list what ties it to one machine (libcst, no execution).

What it reads (the kinds in ``findings``): ``.cuda()``, ``'cuda'`` or ``torch.device('cuda')`` with no fallback
(outside an ``if``/``... if ... else`` that asks ``is_available()``); a GPU index written in (``'cuda:1'``,
``.cuda(1)``, ``torch.device('cuda', 1)``, ``CUDA_VISIBLE_DEVICES`` set in the script); ``torch.cuda.FloatTensor``-style
types; a CUDA default tensor type or default device; ``torch.load`` without ``map_location``; ``nn.DataParallel``
whose ``state_dict`` is taken from the wrapper; DataLoader workers the script starts without a ``__main__`` guard;
``.numpy()`` of a tensor that went to the device (names followed through assignments, without ``.cpu()``); a device
chosen between CUDA and the CPU only (no Mac); a ``torch.cuda`` call that fails without CUDA (``synchronize``,
``Event``, ``get_device_name``...) reached unguarded in a script that picks its device at run time; ``mp.spawn`` (or
``start_processes``) of ``torch.cuda.device_count()`` processes, directly or through a name assigned from it that
no ``if``/``assert`` of its scope tests (none start where there is no CUDA GPU). Names are read
through their imports (``import torch as t``, ``from torch import cuda, load``). It cannot follow values across
files or through containers.
"""

from __future__ import annotations

import re
from pathlib import Path

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, PositionProvider

from helpers.rehearse.findings import Finding, Report

_INDEX = re.compile(r"^cuda:(\d+)$")
_DEVICE_CHOICE = re.compile(r"['\"](cuda|cpu|mps)|\.cuda\(|\.to\(|torch\.device\(|device\s*=|\.cpu\(")
_MAIN_GUARD = m.If(test=m.Comparison(left=m.Name("__name__")))
_SPAWNS = ("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes")


# torch.cuda calls that raise where CUDA is missing (is_available, device_count, manual_seed, empty_cache and the
# memory figures answer quietly there)
_CUDA_ONLY = {
    "synchronize", "get_device_name", "get_device_properties", "get_device_capability", "set_device",
    "current_device", "Event", "Stream", "current_stream", "default_stream", "stream", "device",
    "reset_peak_memory_stats", "reset_max_memory_allocated", "mem_get_info", "get_rng_state", "set_rng_state",
    "memory_summary", "utilization", "ipc_collect", "graph", "CUDAGraph",
}  # fmt: skip
_GUARD_TEXT = re.compile(
    r"\.type\s*==\s*['\"]cuda['\"]|['\"]cuda['\"]\s*==\s*[\w.]+\.type\b|\.is_cuda\b"
    r"|==\s*['\"]cuda(:\d)?['\"]|['\"]cuda['\"]\s*in\s|!=\s*['\"]cpu['\"]"
)


def has_main_guard(code: str) -> bool:
    """Whether the script has an ``if __name__ == ...`` guard at its top level."""
    return bool(re.search(r"^if\s+__name__\s*==", code, re.MULTILINE))


def _dotted(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    if isinstance(node, cst.Call):
        return _dotted(node.func) + "()"
    if isinstance(node, cst.Subscript):
        return _dotted(node.value) + "[]"
    return ""


def _string(node) -> str | None:
    """A string literal's text; an f-string's with ``{}`` for each field (``f"cuda:{rank}"`` is ``cuda:{}``)."""
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    if isinstance(node, cst.FormattedString):
        return "".join(p.value if isinstance(p, cst.FormattedStringText) else "{}" for p in node.parts)
    return None


def _cuda_text(node) -> str | None:
    text = _string(node)
    return text if text is not None and re.fullmatch(r"cuda(:(\d+|\{\}))?", text) else None


def _asks_availability(node: cst.CSTNode) -> bool:
    return bool(m.findall(node, m.Attribute(attr=m.Name("is_available")) | m.Name("is_available")))


def _forced(value: cst.BaseExpression | None) -> bool:
    """``.numpy(force=True)``: copies a device tensor to the host itself."""
    return value is not None and m.matches(value, m.Name("True"))


def _mentions(node: cst.CSTNode, text: str) -> bool:
    return text in cst.Module([]).code_for_node(node)


# names that hold a GPU's index (an int), not a device: .to(rank), torch.device(args.gpu)
_RANK_NAME = re.compile(r"^(local_)?rank$|^(local_)?gpu(_?(id|index|idx))?$|^device_?(id|index|idx)$")


class _Reader(m.MatcherDecoratableVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, file: str, code: str) -> None:
        super().__init__()
        self.file = file
        self.found: list[tuple[int, str, str]] = []
        self.guards = 0  # inside an if / ifexp that asks is_available()
        self.functions = 0
        self.scopes: list[str] = []  # the functions the reader is in
        self.gpu_counts: dict[tuple, set[str]] = {}  # (scope, name) assigned from device_count(): names on its way
        self.tested: set[tuple] = set()  # (scope, name) an if / assert / while tests
        self.spawns: list[tuple[int, tuple, set[str], str]] = []  # unguarded spawns of a count: line, scope, names
        self.main_guard = 0
        self.has_main_guard = has_main_guard(code)
        self.mentions_mps = "mps" in code
        self.uses_cuda = bool(re.search(r"\.cuda\(|['\"]cuda", code))
        self.availability: set[str] = set()  # names assigned from torch.cuda.is_available()
        self.top_loaders: dict[str, tuple[int, str]] = {}  # module-level loaders with workers, by name
        self.top_iterated: set[str] = set()
        self._loader_name = ""  # names a module-level loop outside the guard iterates
        self.device_names: set[str] = set()
        self.wrappers: set[str] = set()
        self.wrapper_lines: dict[str, int] = {}
        self.fallback_line: int | None = None  # the first if on is_available() that picks a device
        self.first_ask: int | None = None  # the first line that calls torch.cuda.is_available()
        self.numpy_calls: list[tuple[int, str]] = []
        self.aliases: dict[str, str] = {}  # local name: what it is in torch (t: torch, cuda: torch.cuda)
        self.if_tests: list[str] = []  # the tests of the ifs the reader is in
        self.device_choice = False  # CUDA or not, chosen at run time (an if on is_available() picks a device)
        self.cuda_api_calls: list[tuple[int, str]] = []  # torch.cuda calls outside a guard: line, call

    def canon(self, dotted: str) -> str:
        """``t.cuda.synchronize`` as ``torch.cuda.synchronize`` where ``import torch as t``."""
        head, _, rest = dotted.partition(".")
        real = self.aliases.get(head)
        return dotted if real is None else real + ("." + rest if rest else "")

    def _asks_cuda(self, node: cst.CSTNode) -> bool:
        return any(self.canon(_dotted(call.func)) == "torch.cuda.is_available" for call in m.findall(node, m.Call()))

    # imports ------------------------------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = _dotted(alias.name)
            if alias.asname is not None and (name == "torch" or name.startswith("torch.")):
                self.aliases[_dotted(alias.asname.name)] = name

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = _dotted(node.module) if node.module is not None else ""
        if (module == "torch" or module.startswith("torch.")) and not isinstance(node.names, cst.ImportStar):
            for alias in node.names:
                local = _dotted(alias.asname.name) if alias.asname is not None else _dotted(alias.name)
                self.aliases[local] = f"{module}.{_dotted(alias.name)}"

    def line(self, node) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def add(self, node, kind: str, message: str) -> None:
        self.found.append((self.line(node), kind, message))

    # scopes -------------------------------------------------------------------------------------------------
    def _guards(self, test: cst.BaseExpression) -> bool:
        """A test that only lets CUDA code run where CUDA is: is_available(), a name assigned from it, or a device
        already chosen (``device.type == 'cuda'``, ``x.is_cuda``)."""
        if _asks_availability(test):
            return True
        names = {n.value for n in m.findall(test, m.Name())} | {_dotted(a) for a in m.findall(test, m.Attribute())}
        if names & self.availability:
            return True
        return bool(_GUARD_TEXT.search(cst.Module([]).code_for_node(test)))

    def _tests(self, test: cst.BaseExpression) -> None:
        self.tested |= {(tuple(self.scopes), n.value) for n in m.findall(test, m.Name())}

    def visit_Assert(self, node: cst.Assert) -> None:
        self._tests(node.test)

    def visit_While(self, node: cst.While) -> None:
        self._tests(node.test)

    def visit_If(self, node: cst.If) -> None:
        self.if_tests.append(cst.Module([]).code_for_node(node.test))
        self._tests(node.test)
        if m.matches(node, _MAIN_GUARD):
            self.main_guard += 1
        if self._guards(node.test):
            self.guards += 1
            self._fallback(node)

    def leave_If(self, node: cst.If) -> None:
        self.if_tests.pop()
        if m.matches(node, _MAIN_GUARD):
            self.main_guard -= 1
        if self._guards(node.test):
            self.guards -= 1

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._tests(node.test)
        if self._guards(node.test):
            self.guards += 1
            self._fallback(node)

    def leave_IfExp(self, node: cst.IfExp) -> None:
        if self._guards(node.test):
            self.guards -= 1

    def visit_For(self, node: cst.For) -> None:
        if not self.functions and not self.main_guard:
            self.top_iterated |= {n.value for n in m.findall(node.iter, m.Name())}

    def visit_CompFor(self, node: cst.CompFor) -> None:  # [x for x in loader], next(iter(loader)) at import time
        self.visit_For(node)

    def visit_FunctionDef(self, node) -> None:
        self.functions += 1
        self.scopes.append(node.name.value)

    def leave_FunctionDef(self, node) -> None:
        self.functions -= 1
        self.scopes.pop()

    def _fallback(self, node) -> None:
        """An if / if-expression on CUDA's availability whose branches pick a device: the script chooses at run
        time (not one that raises without CUDA, or picks a dtype or a setting)."""
        if not (_asks_availability(node.test) or self._names(node.test) & self.availability):
            return
        code = "".join(cst.Module([]).code_for_node(b) for b in (node.body, node.orelse) if b is not None)
        if _DEVICE_CHOICE.search(code):
            self.device_choice = True
            if self.fallback_line is None and _mentions(node.test, "cuda.is_available"):
                self.fallback_line = self.line(node)

    @staticmethod
    def _names(test) -> set[str]:
        return {n.value for n in m.findall(test, m.Name())} | {_dotted(a) for a in m.findall(test, m.Attribute())}

    # names --------------------------------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        self._loader_name = _dotted(node.targets[0].target) if len(node.targets) == 1 else ""
        wrapped = value
        while m.matches(wrapped, m.Call(func=m.Attribute(attr=m.Name("cuda") | m.Name("to")))):
            wrapped = wrapped.func.value  # nn.DataParallel(model).cuda()
        for target in node.targets:
            name = _dotted(target.target)
            if isinstance(target.target, cst.Name | cst.Attribute) and self._asks_cuda(value):  # `True if ... else`
                self.availability.add(name)
            if m.matches(wrapped, m.Call(func=m.Attribute(attr=m.Name("DataParallel")) | m.Name("DataParallel"))):
                self.wrappers.add(name)
                self.wrapper_lines[name] = self.line(node)
            if name and self._on_device(value):
                self.device_names.add(name)
            if isinstance(target.target, cst.Name) and not self.guards:
                scope = tuple(self.scopes)
                if self._counts_gpus(value):
                    self.gpu_counts[(scope, name)] = {name}
                elif isinstance(value, cst.Name) and (scope, value.value) in self.gpu_counts:  # world_size = n_gpus
                    self.gpu_counts[(scope, name)] = {name, *self.gpu_counts[(scope, value.value)]}
                else:  # world_size = max(world_size, 1)
                    self.gpu_counts.pop((scope, name), None)
        if (text := _cuda_text(value)) is not None and not self.guards:
            self._device_string(node, text)

    def visit_DictElement(self, node: cst.DictElement) -> None:
        """``{'device': 'cuda'}``: a config's device."""
        if "device" in (_string(node.key) or "") and (text := _cuda_text(node.value)) and not self.guards:
            self._device_string(node, text)

    def leave_Assign(self, node: cst.Assign) -> None:
        self._loader_name = ""

    def _counts_gpus(self, value: cst.BaseExpression) -> bool:
        """``torch.cuda.device_count()`` itself (not ``max(1, ...)``, not ``... or 1``)."""
        return isinstance(value, cst.Call) and self.canon(_dotted(value.func)) == "torch.cuda.device_count"

    def _spawn(self, node: cst.Call, args: list[cst.Arg], kwargs: dict) -> None:
        """``mp.spawn(fn, ..., nprocs=N)``: N is torch.cuda.device_count(), or a name assigned from it (read at the
        end, when the tests of the name are known)."""
        nprocs = kwargs.get("nprocs", args[2].value if len(args) > 2 else None)
        if nprocs is None or self.guards:
            return
        code = cst.Module([]).code_for_node(node)
        code = code if len(code) <= 100 else code[:97] + "..."
        if self._counts_gpus(nprocs):
            self.add(node, "spawn-per-gpu", code)
        elif isinstance(nprocs, cst.Name) and (names := self.gpu_counts.get((tuple(self.scopes), nprocs.value))):
            self.spawns.append((self.line(node), tuple(self.scopes), names, code))

    def _on_device(self, value: cst.BaseExpression) -> bool:
        code = cst.Module([]).code_for_node(value)
        if ".cpu()" in code or ".item()" in code or ".tolist()" in code or ".numpy()" in code:
            return False
        if re.search(r"\.cuda\(|\.to\(", code):
            return True
        names = {n.value for n in m.findall(value, m.Name())}
        return bool(names & self.device_names)

    # calls --------------------------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        func = self.canon(_dotted(node.func))
        if self.first_ask is None and func == "torch.cuda.is_available":
            self.first_ask = self.line(node)  # the first line that asks, an if's or an assignment's
        args = [a for a in node.args if a.keyword is None]
        kwargs = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        last = func.rsplit(".", 1)[-1]
        if last == "cuda" and isinstance(node.func, cst.Attribute) and func not in ("torch.cuda",):
            index = args[0].value if args else kwargs.get("device")
            literal = index.value if isinstance(index, cst.Integer) else None
            if literal is not None and int(literal) >= 1:
                self.add(node, "device-literal", f".cuda({literal})")
            elif not self.guards:
                self.add(node, "cuda-call", ".cuda()")
        elif func in ("torch.device", "device") and args:
            kind = _string(args[0].value)
            index = args[1].value if len(args) > 1 else None
            if kind is not None:
                self._device_string(node, kind, index)
            elif self._rank(args[0].value):
                self.add(node, "cuda-call", f"torch.device({_dotted(args[0].value)})")
        elif last == "add_argument" and (text := _cuda_text(kwargs.get("default"))) and not self.guards:
            self.add(node, "cuda-call", f"default={text!r}")
        elif last == "to" and args:
            kind = _string(args[0].value)
            if kind is not None:
                self._device_string(node, kind)
            elif self._rank(args[0].value):
                self.add(node, "cuda-call", f".to({_dotted(args[0].value)})")
        elif func.endswith("set_default_tensor_type") and _mentions(node, "cuda"):
            self.add(node, "default-tensor-type", "set_default_tensor_type(cuda)")
        elif func.endswith("set_default_device") and args and (_string(args[0].value) or "").startswith("cuda"):
            self.add(node, "default-tensor-type", "set_default_device('cuda')")
        elif func == "torch.load" and len(args) < 2 and "map_location" not in kwargs:
            self.add(node, "load-no-map-location", "torch.load(...)")
        elif last == "state_dict" and isinstance(node.func, cst.Attribute):
            owner = _dotted(node.func.value)
            if owner in self.wrappers:
                self.add(node, "dataparallel-prefix", f"{owner}.state_dict()")
                self.wrappers.discard(owner)
        elif last == "DataLoader":
            workers = kwargs.get("num_workers")
            if len(args) >= 6:
                workers = args[5].value
            zero = isinstance(workers, cst.Integer) and workers.value == "0"
            if workers is not None and not zero and not self.main_guard:
                if not self.has_main_guard:
                    self.add(node, "workers-no-main-guard", "DataLoader(num_workers=...)")
                elif not self.functions:  # built at import time: a problem if a loop at import time uses it
                    self.top_loaders[self._loader_name or f"<{self.line(node)}>"] = (self.line(node), "")
        elif func.startswith("torch.cuda.") and func.count(".") == 2 and last in _CUDA_ONLY:
            if not self.guards:
                self.cuda_api_calls.append((self.line(node), f"{func}()"))
        elif func in _SPAWNS:
            self._spawn(node, args, kwargs)
        elif last == "init_process_group" and not self.guards:
            backend = kwargs.get("backend", args[0].value if args else None)
            if backend is not None and (_string(backend) or "").lower().startswith("nccl"):
                self.add(node, "nccl-backend", "init_process_group('nccl')")
        elif last == "numpy" and isinstance(node.func, cst.Attribute) and not _forced(kwargs.get("force")):
            self.numpy_calls.append((self.line(node), cst.Module([]).code_for_node(node.func.value)))
        for keyword in ("device", "map_location"):
            kind = _string(kwargs[keyword]) if keyword in kwargs else None
            if kind is not None:
                self._device_string(node, kind)

    def _rank(self, value: cst.BaseExpression) -> bool:
        """A GPU's index in a name (``rank``, ``args.gpu``), outside a guard and outside an ``if`` that asks whether
        the learner gave one (``if args.gpu is not None:``)."""
        name = _dotted(value)
        if not name or not _RANK_NAME.match(name.rsplit(".", 1)[-1]) or self.guards:
            return False
        return not any(re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", test) for test in self.if_tests)

    def _device_string(self, node, kind: str, index: cst.BaseExpression | None = None) -> None:
        number = _INDEX.match(kind)
        if isinstance(index, cst.Integer) and kind == "cuda":
            number = re.match(r"(\d+)", index.value)
        if number and int(number.group(1)) >= 1:
            self.add(node, "device-literal", repr(kind) if index is None else f"torch.device('cuda', {index.value})")
        elif kind.startswith("cuda") and not self.guards:
            self.add(node, "cuda-call", repr(kind))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        dotted = self.canon(_dotted(node))
        if re.fullmatch(r"torch\.cuda\.\w+Tensor", dotted):
            self.add(node, "cuda-tensor-type", dotted)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if m.matches(node, m.Subscript(value=m.Attribute(value=m.Name("os"), attr=m.Name("environ")))) and _mentions(
            node, "CUDA_VISIBLE_DEVICES"
        ):
            self.add(node, "device-literal", "os.environ['CUDA_VISIBLE_DEVICES']")

    def finish(self) -> None:
        for line, scope, names, code in self.spawns:
            if not {(scope, n) for n in names} & self.tested:
                self.found.append((line, "spawn-per-gpu", code))
        for name, (line, _) in self.top_loaders.items():
            if name in self.top_iterated:
                self.found.append((line, "workers-no-main-guard", "DataLoader(num_workers=...)"))
        for line, receiver in self.numpy_calls:
            if ".cpu()" in receiver or ".detach().cpu" in receiver:
                continue
            names = set(re.findall(r"[A-Za-z_][\w.]*", receiver))
            roots = {n.split(".")[0] for n in names} | names
            if roots & self.device_names or re.search(r"\.cuda\(|\.to\(", receiver):
                self.found.append((line, "numpy-of-device-tensor", f"{receiver}.numpy()"))
        if self.device_choice and not self.mentions_mps and self.uses_cuda:
            line = min(x for x in (self.first_ask, self.fallback_line) if x is not None)
            self.found.append((line, "cuda-only-fallback", "torch.cuda.is_available()"))
        if self.device_choice:  # a script tied to CUDA anyway is not told to guard its torch.cuda calls
            self.found += [(line, "cuda-api-unguarded", call) for line, call in self.cuda_api_calls]


def read(path: str | Path) -> Report:
    """The static reading of one script, as a Report (machine ``static``)."""
    path = Path(path)
    code = path.read_text(encoding="utf-8", errors="replace")
    report = Report("static")
    try:
        module = cst.parse_module(code)
    except cst.ParserSyntaxError as err:
        report.add(Finding(str(path), err.raw_line, "script-bug", f"SyntaxError: {err.message}", "static"))
        return report
    reader = _Reader(str(path), code)
    MetadataWrapper(module).visit(reader)
    reader.finish()
    seen = set()
    for line, kind, message in sorted(reader.found):
        if (line, kind) not in seen:
            seen.add((line, kind))
            report.add(Finding(str(path), line, kind, message, "static"))
    return report
