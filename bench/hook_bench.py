#!/usr/bin/python3
"""The ``hook`` benchmark of tensorkeep-bench: what the PyTorch hook costs a training step.

    PYTHONPATH=build/python /usr/bin/python3 bench/hook_bench.py \\
        --server 127.0.0.1:PORT [--steps 200] [--min-seconds 1] [--warmup 20] [--rounds 5] [--threads 1]

Model: an MLP 784-256-10 on batches of 64 (SGD, CrossEntropyLoss). Three
configurations, interleaved in rounds so that drift of a shared machine hits
them alike; each round builds one model that its configurations share, and
each configuration starts on a quiet machine (``settle``):

* ``no hook``;
* ``every step``: weights, biases, gradients and the loss saved at every step
  (about 1.6 MB a step);
* ``interval 100``: the same collections with ``SaveConfig(save_interval=100)``.

A step is zero_grad, forward, loss, backward and optimizer.step, timed on the
training thread (wall clock, and the thread's CPU time). The hook's sending
happens on its writer's thread; the training thread only copies and enqueues.
Each configuration's hook is closed (everything durable) after its timed
steps, outside the timing; the time close() took is reported too, so a hook
that only deferred its work shows it.

Prints one JSON object of numbers as its last line (tensorkeep-bench parses
it): medians per step in ms (``no_hook_ms``, ``every_ms``, ``interval_ms``),
their p90s, the training thread's CPU medians, the close times, and the
overheads over no hook (``every_overhead_ms``, ``interval_overhead_ms``: the
median over rounds of each round's difference of medians; rounds alternate
the order of the configurations).
"""

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from typing import Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_agent_env  # noqa: E402,F401  (an agent of its own)
from mlp import Model  # noqa: E402,F401  (one per round, shared by its configurations; see mlp.py)
from quiet import settle  # noqa: E402


def run(server: str, config: str, m: Model, steps: int, warmup: int) -> Tuple[List[float], List[float], float]:
    import tensorkeep.pytorch as tkp
    from tensorkeep import modes

    model, loss_fn = m.module, m.loss_fn
    hook = None
    if config != "no hook":
        hook = tkp.Hook(
            f"tensorkeep://{server}/bench-hook-{uuid.uuid4().hex[:10]}",
            save_config=tkp.SaveConfig(save_interval=1 if config == "every step" else 100),
            include_collections=["weights", "biases", "gradients", "losses"],
        )
        hook.register_module(model)
        hook.register_loss(loss_fn)
        hook.set_mode(modes.TRAIN)
    wall: List[float] = []
    cpu: List[float] = []
    for i in range(warmup + steps):
        c = time.thread_time()
        t = time.perf_counter()
        m.step()
        dt = time.perf_counter() - t
        dc = time.thread_time() - c
        if i >= warmup:
            wall.append(dt)
            cpu.append(dc)
    close_s = 0.0
    if hook is not None:
        t = time.perf_counter()
        hook.close()
        close_s = time.perf_counter() - t
    return wall, cpu, close_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True, help="HOST:PORT of the collector")
    ap.add_argument("--steps", type=int, default=200, help="timed steps per configuration and round, at least")
    ap.add_argument("--min-seconds", type=float, default=1.0,
                    help="more steps if the no-hook loop runs them faster than this (a 1 ms step: 1,000 steps)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = ap.parse_args()
    if not (0 < args.steps <= 100_000 and 0 <= args.warmup <= 10_000 and 0 < args.rounds <= 100
            and 0 <= args.min_seconds <= 60):
        ap.error("steps, warmup, rounds or min-seconds out of range")

    # torch.set_num_threads does not reach a BLAS torch was not built against
    # (Debian's torch uses whichever libblas.so.3 is installed, OpenBLAS included).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    configs = {"no hook": "no_hook", "every step": "every", "interval 100": "interval"}
    wall: Dict[str, List[float]] = {c: [] for c in configs}
    cpu: Dict[str, List[float]] = {c: [] for c in configs}
    close: Dict[str, float] = {c: 0.0 for c in configs}
    # Per round: each configuration's median step and its difference to the
    # round's no-hook median. The reported overheads are the medians of those
    # per-round differences, which drift of a shared machine between rounds
    # does not bias the way pooling all steps would.
    round_overhead: Dict[str, List[float]] = {c: [] for c in configs}
    settled_s = 0.0
    # With Debian's reference BLAS a step takes ~16 ms, with OpenBLAS ~1 ms: run
    # long enough for the every-step configuration to reach the collector's
    # steady state (its compactions), not only its first buffers.
    probe, _, _ = run(args.server, "no hook", Model(), 50, args.warmup)
    steps = max(args.steps, min(100_000, int(args.min_seconds / max(statistics.median(probe), 1e-6))))
    for r in range(args.rounds):
        order = list(configs) if r % 2 == 0 else list(reversed(configs))
        medians: Dict[str, float] = {}
        model = Model()
        for c in order:
            settled_s += settle()
            w, u, s = run(args.server, c, model, steps, args.warmup)
            wall[c] += w
            cpu[c] += u
            close[c] += s
            medians[c] = statistics.median(w)
        for c in configs:
            round_overhead[c].append(medians[c] - medians["no hook"])
    out = {"steps": steps * args.rounds, "rounds": args.rounds, "torch_threads": args.threads,
           "loadavg_1m": os.getloadavg()[0], "settle_s": settled_s}
    for c, key in configs.items():
        data = sorted(wall[c])
        out[f"{key}_ms"] = 1e3 * statistics.median(data)
        out[f"{key}_p90_ms"] = 1e3 * data[int(0.9 * (len(data) - 1))]
        out[f"{key}_cpu_ms"] = 1e3 * statistics.median(cpu[c])
        out[f"{key}_close_s"] = close[c] / args.rounds
        out[f"{key}_overhead_ms"] = 1e3 * statistics.median(round_overhead[c])
        out[f"{key}_overhead_cpu_ms"] = 1e3 * (statistics.median(cpu[c]) - statistics.median(cpu["no hook"]))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
