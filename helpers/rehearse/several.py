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
import os
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
    try:  # one list per process: a script that ends its process has the other machines rehearsed in another
        chunks = done.stdout.split(MARK)[1:]
        reports = [r for chunk in chunks for r in json.JSONDecoder().raw_decode(chunk.strip())[0]]
        if len(reports) != len(machines):
            raise IndexError(len(reports))
    except (IndexError, json.JSONDecodeError):
        why = (done.stderr or done.stdout)[-2000:]
        return {m: {"runs": False, "exit_code": 3, "findings": [], "tool_error": why, "output": ""} for m in machines}
    return dict(zip(machines, reports, strict=True))


def main(argv: list[str]) -> int:
    from helpers.rehearse.pretend_gpu import Machine
    from helpers.rehearse.script_run import run_script

    machines, steps, loops, timeout, script, *args = argv
    names = machines.split(",")
    reports = []
    real_stdout = sys.stdout

    def show(report, output: io.StringIO) -> None:
        """The script caught the stop and this process ends: its reports so far, then the other machines in a
        fresh process (the same command for them)."""
        sys.stdout = real_stdout
        reports.append({**json.loads(report.as_json()), "output": output.getvalue()})
        print(MARK)
        print(json.dumps(reports, ensure_ascii=False))
        sys.stdout.flush()
        rest = names[len(reports) :]
        if rest:
            command = [sys.executable, "-m", "helpers.rehearse.several", ",".join(rest), steps, loops, timeout]
            os.execv(sys.executable, [*command, script, *args])

    for name in names:
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            report = run_script(
                script,
                args,
                Machine.parse(name),
                int(steps),
                int(loops),
                float(timeout),
                emit=lambda report, output=output: show(report, output),
            )
        result = json.loads(report.as_json())
        result["output"] = output.getvalue()
        reports.append(result)
    print(MARK)
    print(json.dumps(reports, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
