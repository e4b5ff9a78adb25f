#!/usr/bin/python3
"""The ``hook`` benchmark of tensorkeep-bench: what the PyTorch hook costs a training step.

    PYTHONPATH=build/python /usr/bin/python3 bench/hook_bench.py \\
        --server 127.0.0.1:PORT [--rounds 40] [--block-steps 25] [--block-warmup 5] [--warmup 20] [--threads 1]

Model: an MLP 784-256-10 on batches of 64 (SGD, CrossEntropyLoss;
bench/mlp.py). Three configurations, each with its own copy of the model,
measured in interleaved short blocks (bench/interleave.py: the order
reversed every other round, every model stepping in each copy of a step's
memory in turn, the agent and collector finishing a block's work untimed
before the next block):

* ``no hook``;
* ``every step``: weights, biases, gradients and the loss saved at every step
  (about 1.6 MB a step), handed over to this bench's own tensorkeep-agent;
* ``interval 100``: the same collections with ``SaveConfig(save_interval=100)``.

A step is zero_grad, forward, loss, backward and optimizer.step, timed on the
training thread. Until 2026-11-28 this bench ran each configuration for
>= 200 steps and >= 1 s in a row, 5 rounds: this VM's speed drifts by more
than the effects measured, and ``interval 100`` read +3.6 to +6.3 % in three
runs of one afternoon where the interleaved measure reads ~0 ± 3 %.

Prints one JSON object of numbers as its last line (tensorkeep-bench parses
it): the median step per configuration in ms (``no_hook_ms``, ``every_ms``,
``interval_ms``), their p90s, the training thread's CPU medians, the close
times, and the overheads over no hook: ``every_overhead_ms`` (the median over
rounds of the round's difference of mean steps) and ``interval_overhead_ms``
(interleave.amortized_overhead: the typical step's overhead plus the saving
steps' excess spread over every step; ``interval_mean_overhead_ms``, the mean
over rounds, is noisier), each with its process-CPU twin (``..._cpu_ms``; for
interval 100 the mean over rounds).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from typing import Dict, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_agent_env  # noqa: E402,F401  (an agent of its own)
import interleave  # noqa: E402
from mlp import reference_blas_note  # noqa: E402

# This bench's names -> interleave's configurations.
CONFIGS = {"no hook": "no hook", "every step": "agent", "interval 100": "agent 100"}
KEYS = {"no hook": "no_hook", "every step": "every", "interval 100": "interval"}


def measure(server: str, rounds: int = 40, block_steps: int = 25, block_warmup: int = 5,
            warmup: int = 20, cpus: Optional[Tuple[int, int]] = None) -> Dict[str, float]:
    """The three configurations against the collector at ``server``; the JSON's figures.

    ``cpus`` (training, collector): agent_bench.py's placement, without which
    the per-round differences of ``interval 100`` spread over ±1.5 ms here.
    The warmup runs on the collector's CPU, so that the agent the first
    writer starts inherits it; the training is then pinned to its own."""
    after_warmup = None
    if cpus is not None:
        os.sched_setaffinity(0, {cpus[1]})
        after_warmup = lambda: os.sched_setaffinity(0, {cpus[0]})  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="tk-hook-bench-") as work:
        runs = interleave.run(list(CONFIGS.values()), server, work, None, rounds, block_steps, block_warmup,
                              warmup, after_warmup)
    out: Dict[str, float] = {"steps": rounds * block_steps, "rounds": rounds, "block_steps": block_steps,
                             "loadavg_1m": os.getloadavg()[0]}
    for name, c in CONFIGS.items():
        key = KEYS[name]
        run = runs[c]
        wall = sorted(run.wall)
        out[f"{key}_ms"] = 1e3 * statistics.median(wall)
        out[f"{key}_p90_ms"] = 1e3 * wall[int(0.9 * (len(wall) - 1))]
        out[f"{key}_cpu_ms"] = 1e3 * statistics.median(run.thread_cpu)
        out[f"{key}_close_s"] = run.close_s
        if c == "no hook":
            out[f"{key}_overhead_ms"] = out[f"{key}_overhead_cpu_ms"] = 0.0
        elif c == "agent 100":
            out[f"{key}_overhead_ms"] = interleave.amortized_overhead(runs, c)
            out[f"{key}_overhead_cpu_ms"] = interleave.mean_overhead(runs, c, 2)
            out[f"{key}_mean_overhead_ms"] = interleave.mean_overhead(runs, c, 1)
        else:
            out[f"{key}_overhead_ms"] = interleave.overhead(runs, c, 1)
            out[f"{key}_overhead_cpu_ms"] = interleave.overhead(runs, c, 2)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True, help="HOST:PORT of the collector")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--block-steps", type=int, default=25, help="timed steps of one configuration's block in a round")
    ap.add_argument("--block-warmup", type=int, default=5,
                    help="untimed steps at the start of each block: its model back in the caches")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--train-cpu", type=int, default=None,
                    help="pin the training to this CPU (with --service-cpu)")
    ap.add_argument("--service-cpu", type=int, default=None,
                    help="the collector's CPU: this bench's agent is started there")
    args = ap.parse_args()
    if (args.train_cpu is None) != (args.service_cpu is None):
        ap.error("--train-cpu and --service-cpu go together")
    if not (0 < args.rounds <= 1000 and 0 < args.block_steps <= 10_000 and 0 <= args.block_warmup <= 1000
            and 0 <= args.warmup <= 10_000 and 0 < args.threads <= 256):
        ap.error("rounds, block-steps, block-warmup, warmup or threads out of range")

    # torch.set_num_threads does not reach a BLAS torch was not built against
    # (Debian's torch uses whichever libblas.so.3 is installed, OpenBLAS included).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    note = reference_blas_note()
    if note:
        print(note, file=sys.stderr, flush=True)  # (stdout: the figures' JSON line)
    cpus = None if args.train_cpu is None else (args.train_cpu, args.service_cpu)
    out = measure(args.server, args.rounds, args.block_steps, args.block_warmup, args.warmup, cpus)
    out["torch_threads"] = args.threads
    out["pinned"] = 1.0 if args.train_cpu is not None else 0.0
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
