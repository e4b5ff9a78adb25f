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
4. smdebug as a peer, in the same run, when a checkout of sagemaker-debugger
   1.0.34 is given (``--smdebug DIR`` or $SMDEBUG_SRC; imported as
   bench/agent_bench.py does; skipped with the reason printed otherwise): the
   same workload through smdebug's ``FileWriter`` the way its hook writes (one
   event file a step, with its index, into a local directory), timed until
   the last file is closed; then smdebug's ``create_trial`` on that directory
   and ``Tensor.values()`` of every tensor (checked bit for bit, untimed).

Prints one JSON object of numbers as its last line (tensorkeep-bench parses it).
"""

import argparse
import json
import os
import resource
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
    ap.add_argument("--smdebug", default=os.environ.get("SMDEBUG_SRC"),
                    help="a checkout of sagemaker-debugger 1.0.34 to run as a peer (default $SMDEBUG_SRC)")
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

    faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
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
    # The values are kept, so they are fresh memory: ~1 page fault a 4 KiB page read
    # unless the heap grows in huge pages (tensorkeep/_malloc.py's reserve).
    read_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0

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

    peer = smdebug_peer(args, names, values)
    if "smdebug_push_s" in peer:
        peer["push_end_step_vs_smdebug"] = peer["smdebug_push_s"] / push_end_step_s
        peer["read_vs_smdebug"] = peer["smdebug_read_s"] / read_s
        print(f"smdebug FileWriter: push {peer['smdebug_push_s']:.3f} s, read {peer['smdebug_read_s']:.3f} s; "
              f"tensorkeep push with end_step {push_end_step_s:.3f} s "
              f"({peer['push_end_step_vs_smdebug']:.1f}x faster, target >= 10), "
              f"read {read_s:.3f} s ({peer['read_vs_smdebug']:.1f}x faster, target >= 5; "
              f"{read_faults} page faults)", file=sys.stderr)
    print(json.dumps({
        **peer,
        "settle_s": settle_s,
        "push_end_step_s": push_end_step_s,
        "push_s": push_s,
        "push_MBps": total_bytes / push_s / 1e6,
        "read_s": read_s,
        "read_MBps": read_bytes / read_s / 1e6,
        "records": args.steps * args.tensors,
        "bytes": total_bytes,
        "read_values": read_values,
        "read_faults": read_faults,
    }))
    trial.close()
    return 0


def smdebug_peer(args, names, values) -> dict:
    """Step 4: smdebug's FileWriter and trial on the same workload ({} when skipped)."""
    import shutil
    import tempfile

    from agent_bench import smdebug_import

    work = tempfile.mkdtemp(prefix="tk-python-bench-smdebug-")
    try:
        smd, why = smdebug_import(args.smdebug, work)
        if smd is None:
            print(f"smdebug: skipped: {why}", file=sys.stderr)
            return {}
        from smdebug.core.collection_manager import CollectionManager
        from smdebug.core.modes import ModeKeys
        from smdebug.core.writer import FileWriter
        from smdebug.trials import create_trial as smd_create_trial

        out = os.path.join(work, "trial")
        settle()
        t0 = time.perf_counter()
        for step in range(args.steps):
            w = FileWriter(trial_dir=out, worker="worker_0", step=step)
            for name, value in zip(names, values):
                w.write_tensor(tdata=value, tname=name, mode=ModeKeys.TRAIN, mode_step=step)
            w.flush()
            w.close()
        # What the hook writes once, and a trial waits for: the collections file.
        cm = CollectionManager()
        cm.get("weights").include("weight")
        cm.set_num_workers(1)
        cm.export(out, "worker_0_collections.json")
        push_s = time.perf_counter() - t0
        settle()
        t1 = time.perf_counter()
        trial = smd_create_trial(out)
        got = {name: trial.tensor(name).values(mode=ModeKeys.TRAIN) for name in trial.tensor_names()}
        read_s = time.perf_counter() - t1
        for name, value in zip(names, values):
            vals = got.get(name, {})
            if len(vals) != args.steps or not all(np.array_equal(v, value) for v in vals.values()):
                print(f"smdebug: skipped: its values() of {name} differ from what was written", file=sys.stderr)
                return {}
        return {"smdebug_push_s": push_s, "smdebug_read_s": read_s}
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
