"""Measures the hook's overhead per training step.

    PYTHONPATH=build/python /usr/bin/python3 -m tensorkeep.pytorch.benchmark \
        --server HOST:PORT [--steps 300] [--rounds 3] [--threads 1]

Model: MLP 784-256-10, batch 64, SGD, CrossEntropyLoss. Three configurations,
interleaved in rounds so that drift of the machine hits all alike:

* ``no hook``;
* ``every step``: weights, biases, gradients and the loss saved at every step
  (about 1.6 MB per step);
* ``interval 100``: the same collections with ``SaveConfig(save_interval=100)``.

A step is ``zero_grad``, forward, loss, backward, ``optimizer.step``, timed on
the training thread, both in wall-clock time and in the training thread's CPU time
(``time.thread_time``: what the hook costs the training loop, steadier than wall
time on a busy machine); the report gives medians and the overhead over no hook.
Without ``--server`` it starts ``build/bin/tensorkeep-server`` in a temporary
directory.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from typing import Dict, List, Optional, Tuple


def _run(server: str, config: str, steps: int, warmup: int) -> Tuple[List[float], List[float]]:
    import torch

    import tensorkeep.pytorch as tkp
    from tensorkeep import modes

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 784)
    y = torch.randint(0, 10, (64,))
    hook = None
    if config != "no hook":
        interval = 1 if config == "every step" else 100
        hook = tkp.Hook(
            f"tensorkeep://{server}/bench-{uuid.uuid4().hex[:10]}",
            save_config=tkp.SaveConfig(save_interval=interval),
            include_collections=["weights", "biases", "gradients", "losses"],
        )
        hook.register_module(model)
        hook.register_loss(loss_fn)
        hook.set_mode(modes.TRAIN)
    times: List[float] = []
    cpu: List[float] = []
    for i in range(warmup + steps):
        c = time.thread_time()
        t = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t
        dc = time.thread_time() - c
        if i >= warmup:
            times.append(dt)
            cpu.append(dc)
    if hook is not None:
        hook.close()
    return times, cpu


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="tensorkeep PyTorch hook overhead per step")
    ap.add_argument("--server", help="HOST:PORT (default: start build/bin/tensorkeep-server)")
    ap.add_argument("--server-binary", default=None)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    proc = None
    data_dir = None
    server = args.server
    if not server:
        binary = args.server_binary or str(pathlib.Path.cwd() / "build" / "bin" / "tensorkeep-server")
        data_dir = tempfile.mkdtemp(prefix="tk-bench-")
        proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--data-dir", data_dir, "--log-level", "warn"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        line = proc.stdout.readline().strip() if proc.stdout else ""
        if not line.startswith("listening on "):
            raise SystemExit(f"tensorkeep-server did not start: {line!r}")
        server = line[len("listening on "):]
    try:
        configs = ["no hook", "every step", "interval 100"]
        times: Dict[str, List[float]] = {c: [] for c in configs}
        cpu: Dict[str, List[float]] = {c: [] for c in configs}
        for _ in range(args.rounds):
            for c in configs:
                t, u = _run(server, c, args.steps, args.warmup)
                times[c] += t
                cpu[c] += u
        print(f"MLP 784-256-10, batch 64, torch threads {args.threads}, "
              f"{args.rounds} rounds x {args.steps} steps per configuration (cpu count {os.cpu_count()}, "
              f"load average {os.getloadavg()[0]:.2f})")
        for label, data in (("wall clock per step", times), ("training thread CPU per step", cpu)):
            base = statistics.median(data["no hook"])
            print(f" {label}:")
            for c in configs:
                med = statistics.median(data[c])
                p90 = sorted(data[c])[int(0.9 * len(data[c]))]
                print(f"  {c:13s} median {med * 1e3:7.3f} ms  p90 {p90 * 1e3:7.3f} ms"
                      f"  overhead {1e3 * (med - base):+7.3f} ms ({100 * (med / base - 1):+.1f} %)")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        if data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
