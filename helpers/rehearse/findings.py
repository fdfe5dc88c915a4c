"""What a rehearsal finds: the kinds of problem (what each means, its fix, the lesson that teaches it) and the
report, in text (English or Chinese, through the catalogs) and in JSON for editors and CI."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from helpers.course.i18n import tr, tr_lazy


@dataclass(frozen=True)
class Kind:
    key: str
    what: str  # a short title
    fix: str
    lesson: str
    blocks: bool = True  # False: the script runs, but not on every machine, or slower (a note, not a failure)


def _kinds(*kinds: Kind) -> dict[str, Kind]:
    return {k.key: k for k in kinds}


KINDS = _kinds(
    # what --static reads
    Kind(
        "cuda-call",
        tr_lazy(".cuda() (or 'cuda') with no fallback: fails on a machine without a CUDA GPU"),
        tr_lazy("choose the device once (device = torch.device(...) with a fallback) and write .to(device)"),
        tr_lazy("notebook 03, section 6 (device-agnostic code); notebook 05, section 4 (method 1)"),
    ),
    Kind(
        "device-literal",
        tr_lazy("a GPU index written in ('cuda:1', .cuda(1)): fails where that GPU is missing"),
        tr_lazy("use the one chosen device; pick GPUs with CUDA_VISIBLE_DEVICES outside the script"),
        tr_lazy("notebook 00, section 4 (CUDA_VISIBLE_DEVICES); notebook 09, section 6"),
    ),
    Kind(
        "cuda-tensor-type",
        tr_lazy("a torch.cuda.FloatTensor-style type: CUDA only, and a legacy API"),
        tr_lazy("torch.tensor(data, dtype=torch.float32, device=device), or x.to(device, torch.float32)"),
        tr_lazy("notebook 01, section 5 (torch.Tensor or torch.tensor)"),
    ),
    Kind(
        "cuda-api-unguarded",
        tr_lazy("a torch.cuda call reached on every machine, in a script that picks its device at run time"),
        tr_lazy("call it only where the device is CUDA: if device.type == 'cuda': torch.cuda.synchronize()"),
        tr_lazy("notebook 03, section 6 (device-agnostic code)"),
    ),
    Kind(
        "default-tensor-type",
        tr_lazy("a CUDA default tensor type or default device: every new tensor needs a GPU"),
        tr_lazy("torch.set_default_device(device) with the chosen device, or create tensors with device="),
        tr_lazy("notebook 03, section 7 (a default device)"),
    ),
    Kind(
        "load-no-map-location",
        tr_lazy("torch.load without map_location: a GPU's checkpoint fails on a laptop"),
        tr_lazy("torch.load(path, map_location=device)"),
        tr_lazy("notebook 05, section 9 (checkpoints that load anywhere)"),
    ),
    Kind(
        "dataparallel-prefix",
        tr_lazy("nn.DataParallel: its state_dict keys start with 'module.'"),
        tr_lazy("save model.module.state_dict(); for one device drop DataParallel; for many use DDP"),
        tr_lazy("notebook 08, section 1 (why not nn.DataParallel); notebook 09, section 7"),
    ),
    Kind(
        "workers-no-main-guard",
        tr_lazy("DataLoader workers without an if __name__ == '__main__' guard"),
        tr_lazy("put the training code in main() and call it under if __name__ == '__main__':"),
        tr_lazy("notebook 06, section 3 (workers under spawn); notebook 09, section 10"),
        blocks=False,
    ),
    Kind(
        "numpy-of-device-tensor",
        tr_lazy(".numpy() of a tensor on the GPU"),
        tr_lazy("t.detach().cpu().numpy(); for one number, t.item()"),
        tr_lazy("notebook 02, section 3 (.numpy() needs a CPU tensor); notebook 09, section 3"),
    ),
    Kind(
        "cuda-only-fallback",
        tr_lazy("a CUDA GPU or the CPU: a Mac's GPU (MPS) is never used"),
        tr_lazy(
            "add the Mac: 'cuda' if torch.cuda.is_available() else 'mps' if torch.backends.mps.is_available() "
            "else 'cpu'"
        ),
        tr_lazy("notebook 03, section 6 (device-agnostic code); notebook 00, section 5 (MPS)"),
        blocks=False,
    ),
    Kind(
        "spawn-per-gpu",
        tr_lazy(
            "one process per CUDA GPU (nprocs from torch.cuda.device_count()): where there is no CUDA GPU, "
            "mp.spawn starts no process and the script ends (exit code 0) having trained nothing"
        ),
        tr_lazy(
            "start at least one process, nprocs = max(1, torch.cuda.device_count()), and choose by device in each: "
            "NCCL and torch.device('cuda', rank) on CUDA, gloo and the CPU otherwise (an int rank in .to(rank) "
            "means cuda:rank)"
        ),
        tr_lazy("notebook 08, section 2 (one process per device, gloo on the CPU); notebook 08, section 4 (mp.spawn)"),
        blocks=False,
    ),
    Kind(
        "nccl-backend",
        tr_lazy("init_process_group('nccl') for any device: NCCL needs CUDA GPUs, a Mac or a laptop refuses it"),
        tr_lazy("backend = 'nccl' if torch.cuda.is_available() else 'gloo'"),
        tr_lazy("notebook 08, section 2 (one process per device, gloo on the CPU)"),
    ),
    # what the rehearsal meets at run time
    Kind(
        "mixed-devices",
        tr_lazy("tensors on two devices in one operation"),
        tr_lazy(
            "move every input of the operation to the model's device (inputs, labels, a loss's weight, "
            "tensors made inside forward)"
        ),
        tr_lazy("notebook 03, section 8; notebook 09, section 2"),
    ),
    Kind(
        "weights-input-devices",
        tr_lazy("a layer's weights and its input on two devices"),
        tr_lazy("model.to(device) and inputs.to(device), the same device"),
        tr_lazy("notebook 04, section 6; notebook 09, section 4"),
    ),
    Kind(
        "device-index",
        tr_lazy("a GPU index past the GPUs this machine has"),
        tr_lazy("use an index below torch.cuda.device_count(), or the chosen device"),
        tr_lazy("notebook 09, section 6 (a device that is not there)"),
    ),
    Kind(
        "no-gpu",
        tr_lazy("the script needs a device this machine does not have"),
        tr_lazy("choose the device with a fallback: the articles' method 1"),
        tr_lazy("notebook 01, section 6; notebook 09, section 5"),
    ),
    Kind(
        "load-missing-device",
        tr_lazy("a checkpoint saved on a GPU, loaded where that GPU is missing"),
        tr_lazy("torch.load(path, map_location=device)"),
        tr_lazy("notebook 05, section 9; notebook 09, section 7"),
    ),
    Kind(
        "mps-float64",
        tr_lazy("float64 on a Mac's GPU, which has none"),
        tr_lazy("use float32: torch.from_numpy(a).float(), dtype=torch.float32"),
        tr_lazy("notebook 09, section 12 (errors of one kind of machine)"),
    ),
    Kind(
        "spawn-workers",
        tr_lazy("DataLoader workers started at import time: under spawn (Mac, Windows) they start the script again"),
        tr_lazy("put the training code in main() and call it under if __name__ == '__main__':"),
        tr_lazy("notebook 06, section 3; notebook 09, section 10"),
    ),
    Kind(
        "cuda-in-forked-worker",
        tr_lazy("the GPU used in a DataLoader worker forked after the script used it: CUDA refuses"),
        tr_lazy("return CPU tensors from the dataset and move each batch in the training loop (pin_memory=True)"),
        tr_lazy("notebook 06, section 3 (workers); notebook 09, section 10"),
    ),
    Kind(
        "generator-device",
        tr_lazy("a random generator on another device than the tensor it fills"),
        tr_lazy(
            "torch.Generator(device=device), or draw on the CPU and move: torch.randn(..., generator=g).to(device)"
        ),
        tr_lazy("notebook 03, section 7 (a default device)"),
    ),
    Kind(
        "cublas-deterministic",
        tr_lazy("torch.use_deterministic_algorithms(True) on a CUDA GPU: cuBLAS refuses without a fixed workspace"),
        tr_lazy(
            "set CUBLAS_WORKSPACE_CONFIG=:4096:8 in the environment before the script starts (or in os.environ "
            "before the first CUDA call)"
        ),
        tr_lazy("notebook 09, section 12 (errors that belong to one kind of machine)"),
    ),
    Kind(
        "mps-missing-op",
        tr_lazy("an operator the Mac's GPU (MPS) has no kernel for, in this version of torch"),
        tr_lazy(
            "run that one step on the CPU (x.cpu(), then back with .to(device)), or set "
            "PYTORCH_ENABLE_MPS_FALLBACK=1 before the script starts (every such operator then runs on the CPU, slower)"
        ),
        tr_lazy("notebook 09, section 12 (errors that belong to one kind of machine)"),
    ),
    Kind(
        "script-bug",
        tr_lazy("the script fails on any machine, the CPU included"),
        tr_lazy("fix the script's own error first (the traceback's last line says what)"),
        tr_lazy("notebook 09, section 1 (read the last line first)"),
    ),
)


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    kind: str
    message: str  # the real device's wording, or what --static read
    found_by: str = "run"  # "run" or "static"
    detail: str = ""

    @property
    def fix(self) -> str:
        return tr(KINDS[self.kind].fix)

    def as_json(self) -> dict:
        return {
            **asdict(self),
            "fix": self.fix,
            "lesson": tr(KINDS[self.kind].lesson),
            "blocks": KINDS[self.kind].blocks,
        }


@dataclass
class Report:
    """Everything one rehearsal (or reading) found, each problem once."""

    machine: str
    findings: list[Finding] = field(default_factory=list)
    seen: set = field(default_factory=set)
    stopped: str = ""  # why the run ended early, if it did
    steps: int = 0
    tool_error: str = ""  # the rehearsal itself failed (not the script), or could not tell (gap)
    gap: bool = False  # tool_error names what the rehearsal does not model: "could not tell", not a failure
    cost: list[str] = field(default_factory=list)  # the per-step lines of what a GPU would pay for

    def add(self, finding: Finding) -> bool:
        key = (finding.kind, finding.file, finding.line)
        if key in self.seen:
            return False
        self.seen.add(key)
        self.findings.append(finding)
        return True

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if KINDS[f.kind].blocks]

    @property
    def runs(self) -> bool:
        return not self.problems and not self.tool_error

    def exit_code(self) -> int:
        """0: it runs on that machine; 1: it would not; 3: the rehearsal itself could not tell."""
        return 3 if self.tool_error else (1 if self.problems else 0)

    def verdict(self) -> str:
        machine = tr(MACHINE_NAMES.get(self.machine.split(":")[0], self.machine))
        if self.tool_error and self.gap:
            return tr("runs on {machine}: unknown ({why})", machine=machine, why=self.tool_error)
        if self.tool_error:
            return tr("runs on {machine}: unknown (the rehearsal failed: {why})", machine=machine, why=self.tool_error)
        notes = len(self.findings) - len(self.problems)
        if self.machine == "static":
            text = tr("ties it to one machine: {n} problem(s)", n=len(self.problems))
        elif self.runs:
            text = tr("runs on {machine}: yes", machine=machine)
        else:
            text = tr("runs on {machine}: no, {n} problem(s)", machine=machine, n=len(self.problems))
        return text + (tr(", {n} note(s)", n=notes) if notes else "")

    def render(self) -> str:
        lines = []
        for f in self.findings:
            kind = KINDS[f.kind]
            level = tr("problem") if kind.blocks else tr("note")
            lines += [f"{_short(f.file)}:{f.line}: {level} [{f.kind}] {tr(kind.what)}"]
            if f.message and f.found_by == "static":
                lines.append("    " + tr("in the script: {code}", code=f.message))
            elif f.message:
                lines.append("    " + tr("the device says: {message}", message=f.message))
            lines.append("    " + tr("fix: {fix}", fix=f.fix))
            lines.append("    " + tr("taught in: {lesson}", lesson=tr(kind.lesson)))
        if self.cost:
            lines += ["", tr("What a GPU would pay for, per step:"), *self.cost]
        if self.stopped:
            lines += ["", self.stopped]
        lines.append(self.verdict())
        return "\n".join(lines)

    def as_json(self) -> str:
        return json.dumps(
            {
                "machine": self.machine,
                "runs": self.runs,
                "exit_code": self.exit_code(),
                "steps": self.steps,
                "stopped": self.stopped,
                "tool_error": self.tool_error,
                "gap": self.gap,
                "findings": [f.as_json() for f in self.findings],
            },
            ensure_ascii=False,
            indent=1,
        )


MACHINE_NAMES = {
    "gpu": tr_lazy("a CUDA GPU"),
    "gpus": tr_lazy("several CUDA GPUs"),
    "mac": tr_lazy("a Mac (MPS)"),
    "laptop": tr_lazy("a laptop without a GPU"),
    "static": tr_lazy("any machine"),
}


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel
