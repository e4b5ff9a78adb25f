#!/usr/bin/python3
"""What the PyTorch hook costs the training process, against the floor (issue 16).

    PYTHONPATH=build/python /usr/bin/python3 bench/agent_bench.py [--bin-dir build/bin]
        [--steps 300] [--rounds 5] [--warmup 20] [--smdebug DIR]

Starts a collector and a tensorkeep-agent pinned to CPU 1 (``taskset``, as a
collector on another machine would be) and trains on CPU 0: the MLP
784-256-10 of bench/hook_bench.py, batch 64, one BLAS thread, weights, biases,
gradients and the loss saved every step (~1.6 MB). Configurations, in rounds
that alternate their order, each with one model they share:

* ``no hook``;
* ``floor``: no hook, but the saved tensors copied once into preallocated
  buffers after each step — the snapshot the training process cannot avoid;
* ``agent``: tensorkeep's hook, handing over to tensorkeep-agent (the one
  push implementation since issue 16; the in-process Python push it replaced
  measured +5.9-6.7 ms a step and ~3.5 ms of process CPU on this machine);
* ``agent 100``: the same with ``save_interval=100``;
* ``smdebug``: smdebug 1.0.34's own PyTorch hook writing local files, from
  the checkout in ``--smdebug`` or $SMDEBUG_SRC (skipped, with the reason
  printed, when absent or when it cannot be imported here; its generated
  protobuf modules are made with protoc in a copy, and its optional imports
  boto3/botocore/pandas/pyinstrument are stubbed when missing — the hook
  saving to a local directory uses none of them).

Per configuration: the median step (wall clock) on the training thread, the
mean step (which the median hides: steps that wait for room in the shared
ring when the agent and collector take the data slower than training makes
it; on this 2-core VM they do, see docs/performance.md), the training
process's CPU per step (all its threads, ``time.process_time``), the
training thread's CPU, and the overheads over no hook (median over
rounds of each round's difference of medians); the snapshot floor is the
median time of the copy alone. Prints a table and, as its last line, one
JSON object.
"""

import argparse
import copy
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quiet import settle  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = ["weights", "biases", "gradients", "losses"]


class Model:
    def __init__(self) -> None:
        import torch

        torch.manual_seed(0)
        self.module = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.opt = torch.optim.SGD(self.module.parameters(), lr=0.01)
        self.x = torch.randn(64, 784)
        self.y = torch.randint(0, 10, (64,))


def smdebug_import(src: Optional[str], work: str):
    """smdebug.pytorch from the checkout ``src``, or (None, reason)."""
    if not src:
        return None, "no smdebug checkout given (--smdebug or $SMDEBUG_SRC)"
    if not os.path.isdir(os.path.join(src, "smdebug")):
        return None, f"{src} has no smdebug/ package"
    copy = os.path.join(work, "smdebug-src")
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns(".git", "tests", "examples", "docs"))
    protos = [os.path.join("smdebug/core/tfevent/proto", f)
              for f in os.listdir(os.path.join(copy, "smdebug/core/tfevent/proto")) if f.endswith(".proto")]
    if protos and shutil.which("protoc"):
        subprocess.run(["protoc", "--python_out=.", *protos], cwd=copy, check=True)
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import types

    stubbed = {"boto3", "botocore", "pandas", "pyinstrument"}

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            m = types.ModuleType(spec.name)
            m.__getattr__ = lambda attr: type(attr, (Exception,), {})
            m.__path__ = []
            return m

        def exec_module(self, module):
            pass

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            top = name.split(".")[0]
            if top not in stubbed:
                return None
            if "." not in name and importlib.machinery.PathFinder.find_spec(top) is not None:
                stubbed.discard(top)  # installed: the real one
                return None
            return importlib.util.spec_from_loader(name, Loader(), is_package=True)

    sys.meta_path.insert(0, Finder())
    sys.path.insert(0, copy)
    try:
        import logging

        import smdebug.pytorch as smd

        logging.getLogger("smdebug").setLevel(logging.WARNING)
        return smd, ""
    except Exception as e:  # noqa: BLE001 (any failure: skip with the reason)
        return None, f"smdebug from {src} cannot be imported here: {type(e).__name__}: {e}"


def run(config: str, m: Model, steps: int, warmup: int, server: str, work: str, smd) -> Dict[str, float]:
    import numpy as np
    import torch

    model, loss_fn, opt, x, y = m.module, m.loss_fn, m.opt, m.x, m.y
    hook = None
    if config in ("agent", "agent 100"):
        import tensorkeep.pytorch as tkp
        from tensorkeep import modes

        hook = tkp.Hook(
            f"tensorkeep://{server}/bench-agent-{uuid.uuid4().hex[:10]}",
            save_config=tkp.SaveConfig(save_interval=100 if config == "agent 100" else 1),
            include_collections=COLLECTIONS,
        )
        hook.register_module(model)
        hook.register_loss(loss_fn)
        hook.set_mode(modes.TRAIN)
    elif config == "smdebug":
        hook = smd.Hook(
            out_dir=os.path.join(work, f"smdebug-{uuid.uuid4().hex[:10]}"),
            save_config=smd.SaveConfig(save_interval=1),
            include_collections=COLLECTIONS,
        )
        hook.register_module(model)
        hook.register_loss(loss_fn)
        hook.set_mode(smd.modes.TRAIN)
    params = list(model.parameters())
    buffers = [np.empty(tuple(p.shape), np.float32) for p in params for _ in (0, 1)]
    wall: List[float] = []
    thread_cpu: List[float] = []
    copy: List[float] = []
    proc0 = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            proc0 = time.process_time()
        c = time.thread_time()
        t = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if config == "floor":
            t1 = time.perf_counter()
            k = 0
            with torch.no_grad():
                for p in params:
                    np.copyto(buffers[k], p.detach().numpy())
                    np.copyto(buffers[k + 1], p.grad.numpy())
                    k += 2
                float(loss)
            if i >= warmup:
                copy.append(time.perf_counter() - t1)
        dt = time.perf_counter() - t
        dc = time.thread_time() - c
        if i >= warmup:
            wall.append(dt)
            thread_cpu.append(dc)
    proc = time.process_time() - proc0
    t = time.perf_counter()
    if hook is not None:
        if config == "smdebug":
            hook._cleanup()
        else:
            hook.close()
    close_s = time.perf_counter() - t
    return {
        "ms": 1e3 * statistics.median(wall),
        "mean_ms": 1e3 * statistics.fmean(wall),
        "thread_cpu_ms": 1e3 * statistics.median(thread_cpu),
        "process_cpu_ms": 1e3 * proc / steps,
        "copy_ms": 1e3 * statistics.median(copy) if copy else 0.0,
        "close_s": close_s,
    }


def start(args: List[str], cpu: str, env: Dict[str, str], log: str):
    """Starts a server or agent pinned to ``cpu``; returns (process, what it listens on)."""
    cmd = (["taskset", "-c", cpu] if shutil.which("taskset") else []) + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(log, "ab"), stdin=subprocess.DEVNULL,
                         env=env, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        raise SystemExit(f"{args[0]} did not start: {line!r} (log {log})")
    return p, line.split()[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--smdebug", default=os.environ.get("SMDEBUG_SRC"),
                    help="a checkout of sagemaker-debugger 1.0.34 (default $SMDEBUG_SRC)")
    ap.add_argument("--configs", default="no hook,floor,agent,agent 100,smdebug")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="tk-agent-bench-")
    os.chmod(work, 0o700)
    other_cpu = "1" if (os.cpu_count() or 1) > 1 else "0"
    data = os.path.join(work, "data")
    os.mkdir(data)
    procs = []
    try:
        server, address = start([os.path.join(args.bin_dir, "tensorkeep-server"), "--listen", "127.0.0.1:0",
                                 "--data-dir", data, "--log-level", "warn"], other_cpu, dict(os.environ),
                                os.path.join(work, "server.log"))
        procs.append(server)
        os.environ["TENSORKEEP_AGENT_SOCKET"] = os.path.join(work, "agent", "agent.sock")
        agent, _ = start([os.path.join(args.bin_dir, "tensorkeep-agent"), "--idle-exit-seconds", "0",
                          "--log-level", "warn"], other_cpu, dict(os.environ), os.path.join(work, "agent.log"))
        procs.append(agent)
        threading_note = f"training on CPU 0, collector and agent on CPU {other_cpu}"
        os.sched_setaffinity(0, {0})
        return bench(args, address, work, threading_note)
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


def bench(args, address: str, work: str, note: str) -> int:
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    smd = None
    if "smdebug" in configs:
        smd, why = smdebug_import(args.smdebug, work)
        if smd is None:
            print(f"smdebug: skipped: {why}", flush=True)
            configs.remove("smdebug")
    results: Dict[str, List[Dict[str, float]]] = {c: [] for c in configs}
    for r in range(args.rounds):
        order = configs if r % 2 == 0 else list(reversed(configs))
        m = Model()
        for c in order:
            settle()
            # smdebug's hook never removes the hooks it registered (its
            # _cleanup closes writers only): on the shared model they would
            # run, and save, in every later configuration of the round.
            model = copy.deepcopy(m) if c == "smdebug" else m
            results[c].append(run(c, model, args.steps, args.warmup, address, work, smd))
    med = lambda c, k: statistics.median(x[k] for x in results[c])  # noqa: E731
    base = "no hook"
    out: Dict[str, float] = {"steps": args.steps, "rounds": args.rounds}
    print(f"{note}; {args.rounds} rounds x {args.steps} steps; medians")
    print(f"{'configuration':<12} {'step ms':>8} {'overhead ms':>12} {'mean step ms':>13} {'process cpu ms':>15} "
          f"{'cpu over no hook':>17} {'train thread cpu':>17} {'close s':>8}")
    for c in configs:
        over = statistics.median(x["ms"] - b["ms"] for x, b in zip(results[c], results[base]))
        cpu_over = statistics.median(x["process_cpu_ms"] - b["process_cpu_ms"] for x, b in zip(results[c], results[base]))
        key = c.replace(" ", "_").replace("-", "_")
        out[f"{key}_ms"] = med(c, "ms")
        out[f"{key}_mean_ms"] = med(c, "mean_ms")
        out[f"{key}_overhead_ms"] = over
        out[f"{key}_process_cpu_ms"] = med(c, "process_cpu_ms")
        out[f"{key}_cpu_overhead_ms"] = cpu_over
        out[f"{key}_thread_cpu_ms"] = med(c, "thread_cpu_ms")
        print(f"{c:<12} {med(c, 'ms'):8.3f} {over:+12.3f} {med(c, 'mean_ms'):13.3f} {med(c, 'process_cpu_ms'):15.3f} {cpu_over:+17.3f} "
              f"{med(c, 'thread_cpu_ms'):17.3f} {med(c, 'close_s'):8.3f}")
    if "floor" in configs:
        out["snapshot_floor_ms"] = med("floor", "copy_ms")
        print(f"snapshot floor (the copy alone): {out['snapshot_floor_ms']:.3f} ms")
        for c in ("agent",):
            if c in configs:
                k = c.replace("-", "_")
                print(f"{c}: process CPU over no hook / floor = "
                      f"{out[f'{k}_cpu_overhead_ms'] / out['snapshot_floor_ms']:.2f} (target <= 2)")
    if "smdebug" in configs:
        for c in ("agent",):
            if c in configs:
                k = c.replace("-", "_")
                print(f"{c}: overhead / smdebug's = {out[f'{k}_overhead_ms'] / out['smdebug_overhead_ms']:.2f} "
                      "(target <= 0.25)")
    if "agent" in configs:
        # The median step hides the steps that wait for room in the ring: when
        # the collector and the agent take the data slower than training makes
        # it, the mean shows the rate training really goes at.
        print(f"agent: mean step {out['agent_mean_ms']:.3f} ms against {out['no_hook_mean_ms']:.3f} ms with no hook "
              f"({out['agent_mean_ms'] / out['no_hook_mean_ms']:.1f}x): steps that wait for the agent and collector")
        if "smdebug" in configs:
            print(f"agent: mean-step overhead / smdebug's = "
                  f"{(out['agent_mean_ms'] - out['no_hook_mean_ms']) / (out['smdebug_mean_ms'] - out['no_hook_mean_ms']):.2f}")
    if "agent 100" in configs:
        print(f"agent 100: {100 * out['agent_100_overhead_ms'] / out['no_hook_ms']:+.2f} % over no hook (target <= 1 %)")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
