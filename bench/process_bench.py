#!/usr/bin/python3
"""The hook's cost as a user sees it: each configuration in a training process of its own.

    PYTHONPATH=build/python /usr/bin/python3 bench/process_bench.py [--bin-dir build/bin]
        [--rounds 6] [--steps 1000] [--warmup 100]

bench/agent_bench.py interleaves every configuration in one process, which
controls drift but shares whatever is the process's: one configuration's
effect on the allocator is every configuration's. Here each configuration
runs in a fresh interpreter, as the same script run with and without the
hook would (bench/mlp.py's MLP, one BLAS thread, pinned to CPU 0; the
collector and tensorkeep-agent on CPU 1):

* ``no hook``;
* ``no hook pinned``: no hook, with glibc's heap thresholds set as the hook
  sets them (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``): the
  like-for-like baseline of the hook's own work;
* ``agent``: the hook saving weights, biases, gradients and the loss every
  step, handing over to the agent (its flush every 25 steps untimed);
* ``agent unpinned``: the same with ``TENSORKEEP_MALLOC_THRESHOLDS=0``,
  glibc's dynamic heap thresholds (tensorkeep/_malloc.py).

The configurations run one after the other in each round, the order reversed
every other round. Per process: its CPU a step (``time.process_time``, all
threads) and its page faults a step (``getrusage``), over ``--steps`` steps
after ``--warmup``; the medians over rounds and each hooked configuration's
median over rounds of its difference to the round's ``no hook``. Prints a
table and one JSON object.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_bench import json_key, start_services, stop  # noqa: E402
from quiet import settle  # noqa: E402
from tensorkeep import _malloc  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = ("no hook", "no hook pinned", "agent", "agent unpinned")


def child(config: str, address: str, steps: int, warmup: int) -> None:
    """One configuration's training process: prints its figures as JSON."""
    import resource
    import time
    import uuid

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import torch

    from mlp import Model

    torch.set_num_threads(1)
    m = Model()
    hook = None
    if config != "no hook":
        import tensorkeep.pytorch as tkp
        from tensorkeep.modes import TRAIN

        hook = tkp.Hook(f"tensorkeep://{address}/bench-process-{uuid.uuid4().hex[:10]}",
                        save_config=tkp.SaveConfig(save_interval=1),
                        include_collections=["weights", "biases", "gradients", "losses"])
        hook.register_module(m.module)
        hook.register_loss(m.loss_fn)
        hook.set_mode(TRAIN)
    for _ in range(warmup):
        m.step()
    if hook is not None:
        hook.flush()
    cpu = 0.0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    untimed_faults = 0
    done = 0
    while done < steps:
        block = min(25, steps - done)
        c = time.process_time()
        for _ in range(block):
            m.step()
        cpu += time.process_time() - c
        done += block
        if hook is not None:
            # The agent and collector take the block's data, untimed (as agent_bench's drain).
            f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            hook.flush()
            untimed_faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults - untimed_faults
    if hook is not None:
        hook.close()
    print(json.dumps({"cpu_ms": 1e3 * cpu / steps, "faults": faults / steps}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--address", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not (0 < args.rounds <= 100 and 0 < args.steps <= 100_000 and 0 <= args.warmup <= 10_000):
        ap.error("rounds, steps or warmup out of range")
    if args.child:
        child(args.child, args.address, args.steps, args.warmup)
        return 0

    work = tempfile.mkdtemp(prefix="tk-process-bench-")
    os.chmod(work, 0o700)
    other_cpu = "1" if (os.cpu_count() or 1) > 1 else "0"
    procs: list = []
    try:
        env = dict(os.environ)
        address = start_services(args.bin_dir, work, other_cpu, env, procs)
        # The children's settings are the user's: nothing of this shell's allocator tuning.
        for k in [k for k in env if k.startswith("MALLOC_") or k in ("GLIBC_TUNABLES", "TENSORKEEP_MALLOC_THRESHOLDS")]:
            del env[k]
        figures = {c: [] for c in CONFIGS}
        for r in range(args.rounds):
            order = CONFIGS if r % 2 == 0 else tuple(reversed(CONFIGS))
            for c in order:
                settle()
                cenv = dict(env, TENSORKEEP_MALLOC_THRESHOLDS="0" if c == "agent unpinned" else "1")
                if c == "no hook pinned":
                    cenv.update(MALLOC_MMAP_THRESHOLD_=str(_malloc.MMAP_THRESHOLD),
                                MALLOC_TRIM_THRESHOLD_=str(_malloc.TRIM_THRESHOLD))
                cmd = (["taskset", "-c", "0"] if shutil.which("taskset") else []) + [
                    sys.executable, os.path.abspath(__file__), "--child", c, "--address", address,
                    "--steps", str(args.steps), "--warmup", str(args.warmup)]
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=cenv)
                if out.returncode != 0:
                    print(f"{c}: failed: {out.stderr.strip()[-2000:]}", file=sys.stderr)
                    return 1
                figures[c].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"round {r + 1}/{args.rounds} {c}: {figures[c][-1]['cpu_ms']:.3f} ms CPU a step, "
                      f"{figures[c][-1]['faults']:.1f} page faults a step", file=sys.stderr, flush=True)
    finally:
        stop(procs, work)

    out = {"rounds": args.rounds, "steps": args.steps}
    print(f"each configuration in its own training process on CPU 0, collector and agent on CPU 1; "
          f"{args.rounds} rounds of {args.steps} steps; medians over rounds")
    print(f"{'configuration':<16} {'process cpu ms':>15} {'over no hook':>13} {'page faults':>12}")
    base = [f["cpu_ms"] for f in figures["no hook"]]
    for c in CONFIGS:
        cpu = [f["cpu_ms"] for f in figures[c]]
        over = statistics.median(x - b for x, b in zip(cpu, base))
        k = json_key(c)
        out[f"{k}_cpu_ms"] = statistics.median(cpu)
        out[f"{k}_cpu_over_no_hook_ms"] = over
        out[f"{k}_faults"] = statistics.median(f["faults"] for f in figures[c])
        out[f"{k}_faults_max"] = max(f["faults"] for f in figures[c])
        print(f"{c:<16} {out[f'{k}_cpu_ms']:15.3f} {over:+13.3f} {out[f'{k}_faults']:12.1f}"
              f"  (max {out[f'{k}_faults_max']:.1f})")
    pinned = [f["cpu_ms"] for f in figures["no hook pinned"]]
    out["agent_cpu_over_no_hook_pinned_ms"] = statistics.median(
        f["cpu_ms"] - b for f, b in zip(figures["agent"], pinned))
    print(f"agent over no hook pinned (the hook's own work, like for like): "
          f"{out['agent_cpu_over_no_hook_pinned_ms']:+.3f} ms a step")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
