#!/usr/bin/python3
"""What a collector's memory and start-up cost per record it stores: the
in-memory index (server/trial.h) that lists steps and names and finds a
record's block without reading the store. For sizing a shared collector
(docs/shared-collector.md, "Sizing").

    PYTHONPATH=build/python /usr/bin/python3 bench/index_bench.py [--bin-dir build/bin]
        [--tensors 1] [--steps 500000] [--trials 2]

Starts a collector (port 0, a temporary data directory) and, per trial, a
Python Writer saving --tensors float32 scalars a step for --steps steps, with
end_step after each (what a training loop logging a few scalars every step
makes). Then stops the collector, starts it again on the same directory and
times its start (until it listens: LevelDB opened and the index rebuilt). Per
run: the collector's RSS idle, after writing and after the restart, bytes of
RSS per record and per step over the idle RSS, the data directory's size per
record, records written per second, and the start-up time per million
records. Prints a table and, as its last line, one JSON object.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_agent_env  # noqa: E402,F401  (an agent of its own)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def start(binary: str, data_dir: str, log) -> "tuple[subprocess.Popen, str, float]":
    t = time.perf_counter()
    proc = subprocess.Popen(
        [binary, "--listen", "127.0.0.1:0", "--data-dir", data_dir],
        stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
    )
    line = proc.stdout.readline().decode()
    took = time.perf_counter() - t
    m = re.match(r"listening on (\S+:\d+)", line)
    if not m:
        raise RuntimeError(f"tensorkeep-server did not start: {line!r}")
    return proc, m.group(1), took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "bin"))
    ap.add_argument("--tensors", type=int, default=1)
    ap.add_argument("--steps", type=int, default=500000)
    ap.add_argument("--trials", type=int, default=2)
    args = ap.parse_args()
    if not (0 < args.tensors <= 10000 and 0 < args.steps <= 10_000_000 and 0 < args.trials <= 100):
        ap.error("tensors in [1, 10000], steps in [1, 1e7], trials in [1, 100]")
    binary = os.path.join(args.bin_dir, "tensorkeep-server")
    from tensorkeep import Writer, modes

    work = tempfile.mkdtemp(prefix="tk-index-bench-")
    data = os.path.join(work, "data")
    log = open(os.path.join(work, "server.log"), "ab")
    proc = None
    try:
        proc, address, _ = start(binary, data, log)
        time.sleep(0.5)
        idle = rss_mib(proc.pid)
        names = [f"layer_{i:04d}/scalar" for i in range(args.tensors)]
        value = np.zeros(1, np.float32)
        t = time.perf_counter()
        for _ in range(args.trials):
            w = Writer(f"tensorkeep://{address}/index-bench-{uuid.uuid4().hex[:8]}", worker="worker_0")
            for step in range(args.steps):
                for name in names:
                    w.write_tensor(name, value, step=step, mode=modes.TRAIN)
                w.end_step(step)
            w.close(end_of_training=True)
        write_s = time.perf_counter() - t
        written = rss_mib(proc.pid)
        proc.terminate()
        proc.wait(60)
        proc, address, start_s = start(binary, data, log)
        time.sleep(0.5)
        restarted = rss_mib(proc.pid)
        records = args.trials * args.steps * args.tensors
        steps = args.trials * args.steps
        disk = dir_bytes(data)
        out = {
            "records": records,
            "steps": steps,
            "records_per_s": records / write_s,
            "idle_rss_mib": idle,
            "written_rss_mib": written,
            "restarted_rss_mib": restarted,
            "rss_bytes_per_record": (restarted - idle) * 2**20 / records,
            "rss_bytes_per_step": (restarted - idle) * 2**20 / steps,
            "disk_bytes_per_record": disk / records,
            "start_s": start_s,
            "start_s_per_million_records": start_s / records * 1e6,
        }
        print(f"{records:,} records ({args.trials} trials x {args.steps:,} steps x {args.tensors} tensors), "
              f"written at {out['records_per_s']:,.0f} records/s")
        print(f"collector RSS: idle {idle:.0f} MiB, after writing {written:.0f} MiB, after a restart "
              f"{restarted:.0f} MiB: {out['rss_bytes_per_record']:.1f} bytes a record, "
              f"{out['rss_bytes_per_step']:.1f} a step")
        print(f"disk: {disk / 1e6:.1f} MB, {out['disk_bytes_per_record']:.1f} bytes a record")
        print(f"start-up: {start_s:.2f} s ({out['start_s_per_million_records']:.2f} s a million records)")
        print(json.dumps(out))
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(60)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
