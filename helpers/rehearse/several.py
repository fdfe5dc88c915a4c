"""One script rehearsed on several machines in one child process (one start of Python and torch, not three):
``rehearse_on(script, machines=("gpu", "mac", "laptop"))``, for the exercise checks and a notebook's proof of a port.

``python -m helpers.rehearse.several MACHINES STEPS LOOPS TIMEOUT SCRIPT [ARGS...]`` is that child: for each machine
(comma-separated) it rehearses the script (``script_run.run_script``) and prints the script's own output, then one
JSON list, a report per machine, after a marker line.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

MARK = "=== rehearse.several reports ==="
MACHINES = ("gpu", "mac", "laptop")


def rehearse_on(
    script: str | Path,
    *args: str,
    machines: tuple[str, ...] = MACHINES,
    steps: int = 2,
    loops: int = 2,
    timeout: float = 300,
    cwd: str | Path | None = None,
) -> dict[str, dict]:
    """{machine: its JSON report plus the script's own ``output``}; a report with ``tool_error`` when the child
    itself failed."""
    command = [sys.executable, "-m", "helpers.rehearse.several", ",".join(machines)]
    command += [str(steps), str(loops), str(timeout)]
    done = subprocess.run(
        [*command, str(script), *args], capture_output=True, text=True, cwd=cwd, timeout=timeout * len(machines) + 60
    )
    try:
        reports = json.loads(done.stdout.split(MARK, 1)[1])
    except (IndexError, json.JSONDecodeError):
        why = (done.stderr or done.stdout)[-2000:]
        return {m: {"runs": False, "exit_code": 3, "findings": [], "tool_error": why, "output": ""} for m in machines}
    return dict(zip(machines, reports, strict=True))


def main(argv: list[str]) -> int:
    from helpers.rehearse.pretend_gpu import Machine
    from helpers.rehearse.script_run import run_script

    machines, steps, loops, timeout, script, *args = argv
    reports = []
    for name in machines.split(","):
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            report = run_script(script, args, Machine.parse(name), int(steps), int(loops), float(timeout))
        result = json.loads(report.as_json())
        result["output"] = output.getvalue()
        reports.append(result)
    print(MARK)
    print(json.dumps(reports, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
