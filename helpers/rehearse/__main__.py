"""``python -m helpers.rehearse SCRIPT [ARGS...]``: will this script run on a GPU, a Mac, a laptop? Rehearse it here.

The exit code says whether it would run on that machine: 0 yes, 1 no, 2 a wrong option, 3 the rehearsal itself
could not tell (it says why). ``script_run.rehearse()`` runs the same in a child process, for a notebook or a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from helpers.course.i18n import tr


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m helpers.rehearse",
        description=tr(
            "Run a training script on this machine as if it were a GPU machine, a Mac or a laptop: the "
            "device's rules, the CPU's real numbers. Or read it (--static), or port it (--fix)."
        ),
    )
    p.add_argument("script", help=tr("the Python script to rehearse"))
    p.add_argument("args", nargs=argparse.REMAINDER, help=tr("the script's own arguments"))
    p.add_argument(
        "--as",
        dest="machine",
        default="gpu",
        help=tr("gpu (default), gpus:N, mac, or laptop (no GPU, loading what a GPU saved)"),
    )
    p.add_argument("--steps", type=int, default=3, help=tr("batches per DataLoader loop (default 3)"))
    p.add_argument("--loops", type=int, default=4, help=tr("DataLoader loops before the run stops (default 4)"))
    p.add_argument("--timeout", type=float, default=600, help=tr("seconds before the run stops (default 600)"))
    p.add_argument("--static", action="store_true", help=tr("read the script without running it"))
    p.add_argument(
        "--fix",
        action="store_true",
        help=tr("print the device-agnostic version as a diff, then rehearse it as a GPU, a Mac, a laptop"),
    )
    p.add_argument("--write", metavar="PATH", help=tr("with --fix: also write the ported script to PATH"))
    p.add_argument("--json", action="store_true", help=tr("print the findings as JSON"))
    return p


OWN_OPTIONS = ("--as", "--steps", "--loops", "--timeout", "--static", "--fix", "--write", "--json")


def main(argv: list[str] | None = None) -> int:
    opts = parser().parse_args(argv)
    for arg in opts.args:
        if arg.split("=", 1)[0] in OWN_OPTIONS:  # everything after SCRIPT is the script's own
            print(
                tr(
                    "note: {option} comes after the script, so it goes to the script; to give it to the rehearsal, "
                    "put it before the script: python -m helpers.rehearse {option} ... SCRIPT",
                    option=arg.split("=", 1)[0],
                ),
                file=sys.stderr,
            )
    for option, value, least in (("--steps", opts.steps, 1), ("--loops", opts.loops, 1)):
        if value < least:
            print(
                tr(
                    "python -m helpers.rehearse: {option} {value}: give at least {least} (a rehearsal that runs no "
                    "batch cannot tell anything)",
                    option=option,
                    value=value,
                    least=least,
                ),
                file=sys.stderr,
            )
            return 2
    if opts.timeout <= 0:
        print(tr("python -m helpers.rehearse: --timeout must be more than 0 seconds"), file=sys.stderr)
        return 2
    from helpers.rehearse.pretend_gpu import Machine

    script = Path(opts.script)
    if not script.is_file():
        print(
            tr("python -m helpers.rehearse: no script {path!r} here; give the path of a .py file.", path=opts.script),
            file=sys.stderr,
        )
        return 2
    try:
        machine = Machine.parse(opts.machine)
    except ValueError as err:
        print(f"python -m helpers.rehearse: {err}", file=sys.stderr)
        return 2
    if opts.static:
        from helpers.rehearse.static_check import read

        report = read(script)
        print(report.as_json() if opts.json else report.render())
        return report.exit_code()
    if opts.fix:
        from helpers.rehearse.port import port_command

        return port_command(
            script,
            opts.args,
            write=opts.write,
            as_json=opts.json,
            steps=opts.steps,
            loops=opts.loops,
            timeout=opts.timeout,
        )
    from helpers.rehearse.script_run import run_script

    def show(report) -> None:
        print(("\n" if not opts.json else "") + (report.as_json() if opts.json else report.render()))

    report = run_script(str(script), opts.args, machine, opts.steps, opts.loops, opts.timeout, emit=show)
    show(report)
    if report.runs and machine.cuda and not opts.json:
        _tied_to_cuda(script)
    return report.exit_code()


def _tied_to_cuda(script: Path) -> None:
    """A script that runs on a CUDA GPU may run nowhere else: say so when its reading finds what ties it there."""
    from helpers.rehearse.static_check import read

    tied = read(script).problems
    if tied:
        print(
            tr(
                "but only where there is a CUDA GPU: {n} line(s) tie it to one (first: line {line}); see them with "
                "--static, or rehearse it --as mac and --as laptop",
                n=len({f.line for f in tied}),
                line=min(f.line for f in tied),
            )
        )


if __name__ == "__main__":
    sys.exit(main())
