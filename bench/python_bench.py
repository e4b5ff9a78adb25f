#!/usr/bin/python3
"""The ``python`` benchmark of tensorkeep-bench: the Python client end to end.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py \\
        --server 127.0.0.1:PORT [--trial NAME] [--steps 1000] [--tensors 10] [--elements 1000]

1. push: a ``tensorkeep.Writer`` writes ``steps`` x ``tensors`` float32 tensors of
   ``elements`` values (1,000 x 10 x 1,000 = 40 MB by default), timed from the
   Writer's construction until ``close()`` returned (everything durable) -- what
   smdebug's writer needs 2.2-2.7 s for on local disk on the reference machine.
2. read: ``create_trial`` + ``tensor_names()`` + ``Tensor.values()`` of every
   tensor, checking that every value came back intact (smdebug: about 0.55 s).
3. push with end_step: the push of 1. into a second trial with ``end_step(step)``
   after every step, as the PyTorch hook does (issue 11 measured 0.43-0.49 s for
   the default workload where the push without end_step takes 0.11 s).

Prints one JSON object of numbers as its last line (tensorkeep-bench parses it).
"""

import argparse
import json
import os
import sys
import time
import uuid

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_agent_env  # noqa: E402,F401  (an agent of its own)
from quiet import settle  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True, help="HOST:PORT of the collector")
    ap.add_argument("--trial", default=None)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--tensors", type=int, default=10)
    ap.add_argument("--elements", type=int, default=1000)
    args = ap.parse_args()
    if not (0 < args.steps <= 1_000_000 and 0 < args.tensors <= 10_000 and 0 < args.elements):
        ap.error("steps, tensors and elements must be positive (steps <= 1e6, tensors <= 1e4)")

    from tensorkeep import Writer, modes
    from tensorkeep.trials import create_trial

    trial_name = args.trial or f"bench-python-{uuid.uuid4().hex[:10]}"
    url = f"tensorkeep://{args.server}/{trial_name}"
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(args.elements, dtype=np.float32) for _ in range(args.tensors)]
    names = [f"layer_{t:03d}/weight" for t in range(args.tensors)]
    total_bytes = args.steps * args.tensors * args.elements * 4

    # Not what an earlier benchmark left running (the memory benchmark's GB).
    settle_s = settle()
    t0 = time.perf_counter()
    writer = Writer(url, worker="worker_0", num_workers=1)
    for step in range(args.steps):
        for name, value in zip(names, values):
            writer.write_tensor(name, value, step=step, mode=modes.TRAIN)
    writer.close(end_of_training=True)
    push_s = time.perf_counter() - t0

    t1 = time.perf_counter()
    trial = create_trial(url)
    got_names = trial.tensor_names()
    read_bytes = 0
    read_values = 0
    all_values = {}
    for name in got_names:
        vals = trial.tensor(name).values()
        all_values[name] = vals
        read_values += len(vals)
        read_bytes += sum(a.nbytes for a in vals.values())
    read_s = time.perf_counter() - t1

    # Checks, untimed: every value back, bit for bit.
    if sorted(got_names) != names:
        print(f"python_bench: tensor_names() gave {got_names!r}", file=sys.stderr)
        return 1
    for name, value in zip(names, values):
        vals = all_values[name]
        if len(vals) != args.steps or not all(np.array_equal(v, value) for v in vals.values()):
            print(f"python_bench: values() of {name} differ from what was written", file=sys.stderr)
            return 1

    # 3. The same push with end_step after every step, into a trial of its own.
    settle()
    t2 = time.perf_counter()
    writer = Writer(url + "-es", worker="worker_0", num_workers=1)
    for step in range(args.steps):
        for name, value in zip(names, values):
            writer.write_tensor(name, value, step=step, mode=modes.TRAIN)
        writer.end_step(step)
    writer.close(end_of_training=True)
    push_end_step_s = time.perf_counter() - t2
    steps_back = create_trial(url + "-es").steps()
    if steps_back != list(range(args.steps)):
        print(f"python_bench: the end_step trial has {len(steps_back)} steps", file=sys.stderr)
        return 1

    print(json.dumps({
        "settle_s": settle_s,
        "push_end_step_s": push_end_step_s,
        "push_s": push_s,
        "push_MBps": total_bytes / push_s / 1e6,
        "read_s": read_s,
        "read_MBps": read_bytes / read_s / 1e6,
        "records": args.steps * args.tensors,
        "bytes": total_bytes,
        "read_values": read_values,
    }))
    trial.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
