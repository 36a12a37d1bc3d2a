"""Benchmark of the torch.distributed backend "hccl" against gloo, same machine, same run.

    python python/bench/run.py                 # 2 and 4 processes, all-reduce and DDP tables
    python python/bench/run.py --ranks 2 --quick

For each process count it starts ranks under torchrun: ``bench_allreduce.py`` (dist.all_reduce
latency and bus bandwidth, 8 B ... 64 MiB, fp32 sum, hccl and gloo alternating in rounds, and
the Python API's 8-byte all-reduce) and ``bench_ddp.py`` (DDP step time of a ~10 M-parameter
MLP). If the C library's tester ``all_reduce_test`` is built (``cargo build --release -p
hccl-tools``), its 8-byte latency over the same number of processes is shown too, as the floor
the Python layers add to. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def torchrun(n: int, argv, timeout: float = 1800) -> str:
    env = dict(os.environ)
    for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "HCCL_ROOT_ADDR"):
        env.pop(k, None)
    p = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc-per-node={n}", *argv],
        env=env, capture_output=True, text=True, timeout=timeout,
    )
    if p.returncode != 0:
        sys.exit(f"benchmark failed ({' '.join(argv)}):\n{p.stdout}\n{p.stderr[-6000:]}")
    return p.stdout


def last_json(out: str) -> dict:
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"no result in:\n{out}")


def c_latency(n: int, iters: int) -> float | None:
    """8-byte latency of the C library's own tester over n processes, in microseconds."""
    exe = shutil.which("all_reduce_test") or os.path.join(REPO, "target", "release", "all_reduce_test")
    if not os.path.exists(exe):
        return None
    out = torchrun(n, ["--no-python", exe, "-b", "8", "-e", "8", "-n", str(iters), "-w", "100"])
    for line in out.splitlines():
        m = re.match(r"\s*(?:\[\d+\]\s*)?8\s+([\d.]+)\s", line)
        if m:
            return float(m.group(1))
    return None


def fmt_size(b: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k} {unit}"
    return f"{b} B"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="2,4")
    p.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    p.add_argument("--no-ddp", action="store_true")
    a = p.parse_args()
    scale = ["--scale", "0.1", "--rounds", "1"] if a.quick else []
    print(f"# hccl vs gloo, {datetime.date.today()}, {os.cpu_count()} CPUs\n")
    for n in (int(x) for x in a.ranks.split(",")):
        r = last_json(torchrun(n, [os.path.join(HERE, "bench_allreduce.py"), *scale]))
        c = c_latency(n, 200 if a.quick else 2000)
        print(f"## dist.all_reduce, fp32 sum, {n} processes\n")
        print("| bytes | hccl µs | gloo µs | gloo/hccl | hccl busbw GB/s | gloo busbw GB/s | hccl/gloo busbw |")
        print("|---|---|---|---|---|---|---|")
        for row in r["rows"]:
            h, g = row["hccl"], row["gloo"]
            bad = "" if h["ok"] and g["ok"] else " (WRONG RESULT)"
            print(
                f"| {fmt_size(row['bytes'])}{bad} | {h['us']:.1f} | {g['us']:.1f} | "
                f"{g['us'] / h['us']:.1f}× | {h['busbw']:.3f} | {g['busbw']:.3f} | "
                f"{h['busbw'] / g['busbw']:.2f}× |"
            )
        line = f"\n`hccl.Communicator.allreduce`, 8 B numpy array: {r['api_8B_us']:.2f} µs"
        if c is not None:
            line += f"; C library (`all_reduce_test -b 8 -e 8`): {c:.2f} µs; difference {r['api_8B_us'] - c:+.2f} µs"
        print(line + "\n")
        if not a.no_ddp:
            d = last_json(torchrun(n, [os.path.join(HERE, "bench_ddp.py")]
                                   + (["--steps", "3", "--rounds", "1"] if a.quick else [])))
            print(
                f"DDP step, MLP {d['params'] / 1e6:.1f} M parameters, batch {d['batch']}, {n} processes: "
                f"hccl {d['hccl_ms']:.1f} ms, gloo {d['gloo_ms']:.1f} ms, "
                f"hccl/gloo {d['hccl_ms'] / d['gloo_ms']:.2f}"
                f"{'' if d['params_match'] else ' (PARAMETERS DIFFER)'}\n"
            )


if __name__ == "__main__":
    main()
