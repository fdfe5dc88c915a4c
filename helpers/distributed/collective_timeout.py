"""A collective that only some ranks call, failing after a timeout instead of hanging (notebook 08).

    torchrun --standalone --nproc_per_node=2 -m helpers collective-timeout --timeout 5

Every rank must call every collective (all_reduce, barrier, broadcast, ...) in the same order. Here
rank 0 calls ``all_reduce`` and the other ranks never do, as when a branch such as ``if rank == 0:``
holds a collective. Rank 0 waits; with the process group's ``timeout`` it gives up after that many
seconds with an error, and torchrun ends the job with a non-zero exit code.
"""

from __future__ import annotations

import argparse
import datetime
import re
import time

import torch
import torch.distributed as dist


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="torchrun --standalone --nproc_per_node=2 -m helpers collective-timeout")
    p.add_argument("--timeout", type=float, default=5, help="seconds a collective may wait (default 5)")
    args = p.parse_args(argv)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank = dist.get_rank()
    if rank == 0:
        start = time.perf_counter()
        try:
            dist.all_reduce(torch.ones(1))  # the other ranks never call it
        except RuntimeError as err:
            message = re.sub(r"^\[[^\]]*\]\s*", "", str(err).strip().splitlines()[0])  # drop the C++ file name
            waited = time.perf_counter() - start
            print(f"rank 0 gave up after {waited:.1f} s (timeout {args.timeout:g} s): {type(err).__name__}: {message}",
                  flush=True)  # fmt: skip
            raise SystemExit(1) from None
    else:
        time.sleep(10 * args.timeout)  # busy elsewhere, never reaching the all_reduce; torchrun ends it


if __name__ == "__main__":
    main()
