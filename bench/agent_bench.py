#!/usr/bin/python3
"""What the PyTorch hook costs the training process, against the floor (issue 16).

    PYTHONPATH=build/python /usr/bin/python3 bench/agent_bench.py [--bin-dir build/bin]
        [--block-steps 25] [--rounds 40] [--warmup 20] [--smdebug DIR]

Starts a collector and a tensorkeep-agent pinned to CPU 1 (``taskset``, as a
collector on another machine would be) and trains on CPU 0: the MLP
784-256-10 of bench/mlp.py, batch 64, one BLAS thread, weights, biases,
gradients and the loss saved every step (~1.6 MB). Configurations, each with
its own copy of one model (stepping in turn in each of as many copies of a
step's memory, bench/mlp.py's Storage: a copy's placement alone moved a step
by up to 0.10 ms), run in rounds of one short block each (25 steps),
their order reversed every other round: this VM's speed drifts by more than
the effects measured, and a round's difference sees only the drift within
its blocks. Each block starts with 5 untimed steps (its model back in the
caches after the other blocks'). After each block, untimed, the agent and collector finish that
block's work (a flush; smdebug's writer thread gets 50 ms), so that the next
block does not pay for it:

* ``no hook``;
* ``floor``: no hook, but the saved tensors copied once into preallocated
  buffers after each step — the snapshot the training process cannot avoid;
* ``agent``: tensorkeep's hook, handing over to tensorkeep-agent (the one
  push implementation since issue 16; the in-process Python push it replaced
  measured +5.9-6.7 ms a step and ~3.5 ms of process CPU on this machine);
* ``agent 100``: the same with ``save_interval=100``;
* ``dry run``: the hook with ``dry_run=True``, its Python
  work on the training thread without the copy and the hand-over;
* ``hand-over``: ``agent`` with the training thread's CPU
  in the hand-over's calls (the writer stream's add_record, which copies
  into the ring, and end_step, which sends) timed: with ``dry run``, what
  the agent's figure is made of;
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
training thread's CPU, and the overheads over no hook: the median over
rounds of each round's difference of mean steps (and, for ``agent 100``,
whose rounds save a step only now and then, the mean over rounds); the
snapshot floor is the median time of the copy alone. Prints a table and one JSON object.

Then, as a peer (``--peers in-process``, the default, when
bin/in_process_writer is built): the other shape the issue names, the C++
writer inside the training process, which a pybind11 binding would run —
its process CPU per saved step over the same floor, with the collector on
the other CPU (bench/in_process_writer.cc; its own JSON line last).
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
from mlp import Model, Storage  # noqa: E402
from quiet import settle  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = ["weights", "biases", "gradients", "losses"]


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


class Config:
    """One configuration with its own copy of the round's model (and hook),
    run block after block between the others'."""

    def __init__(self, name: str, m: Model, server: str, work: str, smd) -> None:
        import numpy as np

        self.name = name
        # Each its own copy: a hook stays registered on its model (smdebug's
        # never removes its own), and blocks of every configuration alternate.
        self.m = copy.deepcopy(m)
        self.hook = None
        model, loss_fn = self.m.module, self.m.loss_fn
        if name in ("agent", "agent 100", "dry run", "hand-over"):
            import tensorkeep.pytorch as tkp
            from tensorkeep import modes

            self.hook = tkp.Hook(
                f"tensorkeep://{server}/bench-agent-{uuid.uuid4().hex[:10]}",
                save_config=tkp.SaveConfig(save_interval=100 if name == "agent 100" else 1),
                include_collections=COLLECTIONS,
                dry_run=name == "dry run",
            )
            self.hook.register_module(model)
            self.hook.register_loss(loss_fn)
            self.hook.set_mode(modes.TRAIN)
        elif name == "smdebug":
            self.hook = smd.Hook(
                out_dir=os.path.join(work, f"smdebug-{uuid.uuid4().hex[:10]}"),
                save_config=smd.SaveConfig(save_interval=1),
                include_collections=COLLECTIONS,
            )
            self.hook.register_module(model)
            self.hook.register_loss(loss_fn)
            self.hook.set_mode(smd.modes.TRAIN)
        self.buffers = [np.empty(tuple(p.shape), np.float32) for p in self.m.params for _ in (0, 1)]
        # Per round: (steps, wall s, process CPU s); per step: wall, thread CPU, copy.
        self.rounds: List[tuple] = []
        self.wall: List[float] = []
        self.thread_cpu: List[float] = []
        self.copy: List[float] = []
        self.close_s = 0.0
        self.handover_s = 0.0  # "hand-over": thread CPU in the stream's calls, kept blocks
        self.handover_steps = 0
        self._timing = False
        self._keep = False  # within a kept block's timed steps

    def block(self, steps: int, keep: bool, storage: Storage, warmup: int = 0) -> None:
        """In ``storage``'s memory, ``warmup`` steps untimed (this model back
        in the caches after the other configurations' blocks), then ``steps``
        training steps, their figures kept when ``keep``."""
        import numpy as np
        import torch

        m = self.m
        m.use(storage)
        if self.name == "hand-over" and self.hook._writer is not None and not self._timing:
            self._time_handover(self.hook._writer._stream)
        floor = self.name == "floor"
        for _ in range(warmup):
            m.step()
        wall: List[float] = []
        thread_cpu: List[float] = []
        copies: List[float] = []
        self._keep = keep
        proc0 = time.process_time()
        for _ in range(steps):
            c = time.thread_time()
            t = time.perf_counter()
            loss = m.step()
            if floor:
                t1 = time.perf_counter()
                k = 0
                with torch.no_grad():
                    for p in m.params:
                        np.copyto(self.buffers[k], p.detach().numpy())
                        np.copyto(self.buffers[k + 1], p.grad.numpy())
                        k += 2
                    float(loss)
                copies.append(time.perf_counter() - t1)
            wall.append(time.perf_counter() - t)
            thread_cpu.append(time.thread_time() - c)
        proc = time.process_time() - proc0
        self._keep = False
        self.drain()
        if keep:
            self.rounds.append((steps, sum(wall), proc))
            self.wall += wall
            self.thread_cpu += thread_cpu
            self.copy += copies

    def _time_handover(self, stream) -> None:
        """Wraps this configuration's stream's add_record and end_step (its
        own instance only) to add their thread CPU to handover_s."""
        self._timing = True

        def timed(fn, ends_step):
            def call(*a, **k):
                t = time.thread_time()
                try:
                    return fn(*a, **k)
                finally:
                    if self._keep:
                        self.handover_s += time.thread_time() - t
                        self.handover_steps += ends_step

            return call

        stream.add_record = timed(stream.add_record, 0)
        stream.end_step = timed(stream.end_step, 1)

    def drain(self) -> None:
        """Untimed, after each block: the agent and collector finish this
        block's work (and smdebug's writer thread its files) before the next
        configuration's block, which would otherwise pay for it."""
        if self.name in ("agent", "agent 100", "hand-over"):
            self.hook.flush()
        elif self.name == "smdebug":
            time.sleep(0.05)

    def close(self) -> None:
        t = time.perf_counter()
        if self.hook is not None:
            if self.name == "smdebug":
                self.hook._cleanup()
            else:
                self.hook.close()
        self.close_s = time.perf_counter() - t

    def figures(self) -> Dict[str, float]:
        steps = sum(r[0] for r in self.rounds)
        return {
            "ms": 1e3 * statistics.median(self.wall),
            "mean_ms": 1e3 * sum(r[1] for r in self.rounds) / steps,
            "thread_cpu_ms": 1e3 * statistics.median(self.thread_cpu),
            "process_cpu_ms": 1e3 * sum(r[2] for r in self.rounds) / steps,
            "copy_ms": 1e3 * statistics.median(self.copy) if self.copy else 0.0,
            "close_s": self.close_s,
            "handover_ms": 1e3 * self.handover_s / max(1, self.handover_steps),
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
    ap.add_argument("--block-steps", type=int, default=25, help="steps of one configuration's block in a round")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--block-warmup", type=int, default=5,
                    help="untimed steps at the start of each block: its model back in the caches")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--smdebug", default=os.environ.get("SMDEBUG_SRC"),
                    help="a checkout of sagemaker-debugger 1.0.34 (default $SMDEBUG_SRC)")
    ap.add_argument("--configs", default="no hook,floor,agent,agent 100,dry run,hand-over,smdebug")
    ap.add_argument("--peers", default="in-process",
                    help="'in-process': also run bin/in_process_writer, the C++ writer inside the "
                         "training process (the pybind11 shape's lower bound); '' for none")
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
        rc = bench(args, address, work, threading_note)
        if rc == 0 and "in-process" in args.peers:
            in_process_writer(args, address)
        return rc
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


def in_process_writer(args, address: str) -> None:
    """The other shape issue 16 names, as a peer: the C++ writer in the
    training process (bench/in_process_writer.cc), its process CPU per saved
    step over the floor, pinned to this process's CPU."""
    exe = os.path.join(args.bin_dir, "in_process_writer")
    if not os.path.exists(exe):
        print(f"in-process C++ writer: skipped: {exe} is not built", flush=True)
        return
    settle()
    cmd = (["taskset", "-c", "0"] if shutil.which("taskset") else []) + [
        exe, address, "--steps", str(args.block_steps), "--rounds", str(args.rounds)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        print(f"in-process C++ writer: failed: {out.stderr.strip()}", flush=True)
        return
    print(out.stdout.strip(), flush=True)


def bench(args, address: str, work: str, note: str) -> int:
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    smd = None
    if "smdebug" in configs:
        smd, why = smdebug_import(args.smdebug, work)
        if smd is None:
            print(f"smdebug: skipped: {why}", flush=True)
            configs.remove("smdebug")
    m = Model()
    runs = {c: Config(c, m, address, work, smd) for c in configs}
    # As many copies of the memory a step works in as configurations, each
    # configuration's model stepping in each of them in turn (bench/mlp.py: a
    # copy's placement alone moved a step by up to 0.10 ms).
    storages = [Storage(m) for _ in configs]
    settle()
    for i, c in enumerate(configs):
        runs[c].block(args.warmup, keep=False, storage=storages[i])
    # Short blocks, the configurations alternating (their order reversed every
    # other round): the host's speed drifts by more than the effects measured
    # (±15 % of a step over minutes on this VM), and a round's difference
    # sees only the drift within its blocks.
    for r in range(args.rounds):
        order = configs if r % 2 == 0 else list(reversed(configs))
        for c in order:
            storage = storages[(configs.index(c) + r) % len(storages)]
            runs[c].block(args.block_steps, keep=True, storage=storage, warmup=args.block_warmup)
    for c in configs:
        runs[c].close()
    results = {c: runs[c].figures() for c in configs}

    def per_round(c: str, k: int) -> List[float]:
        """Per round: c's figure k per step minus no hook's (ms)."""
        return [1e3 * (x[k] / x[0] - b[k] / b[0]) for x, b in zip(runs[c].rounds, runs["no hook"].rounds)]

    med = lambda c, k: results[c][k]  # noqa: E731
    out: Dict[str, float] = {"block_steps": args.block_steps, "rounds": args.rounds}
    print(f"{note}; {args.rounds} rounds of a {args.block_steps}-step block each, alternating; "
          "step: median; overheads: median over rounds of the round's difference of means")
    print(f"{'configuration':<12} {'step ms':>8} {'overhead ms':>12} {'mean step ms':>13} {'process cpu ms':>15} "
          f"{'cpu over no hook':>17} {'train thread cpu':>17} {'close s':>8}")
    for c in configs:
        over = statistics.median(per_round(c, 1))
        cpu_over = statistics.median(per_round(c, 2))
        key = c.replace(" ", "_").replace("-", "_")
        out[f"{key}_ms"] = med(c, "ms")
        out[f"{key}_mean_ms"] = med(c, "mean_ms")
        out[f"{key}_overhead_ms"] = over
        out[f"{key}_process_cpu_ms"] = med(c, "process_cpu_ms")
        out[f"{key}_cpu_overhead_ms"] = cpu_over
        # The mean over rounds: what a configuration that saves one step in
        # many ("agent 100") costs on average, which the median would hide.
        out[f"{key}_mean_overhead_ms"] = statistics.fmean(per_round(c, 1))
        out[f"{key}_mean_cpu_overhead_ms"] = statistics.fmean(per_round(c, 2))
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
    if "hand-over" in configs:
        out["handover_thread_cpu_ms"] = med("hand-over", "handover_ms")
        print(f"hand-over: the training thread's CPU in the stream's add_record and end_step "
              f"(the copy into the ring and the send): {out['handover_thread_cpu_ms']:.3f} ms a step")
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
        print(f"agent 100: {100 * out['agent_100_mean_overhead_ms'] / out['no_hook_mean_ms']:+.2f} % over no hook "
              "(mean over rounds, saved steps included; target <= 1 %)")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
