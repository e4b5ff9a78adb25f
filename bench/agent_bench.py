#!/usr/bin/python3
"""What the PyTorch hook costs the training process, against the floor (issue 16).

    PYTHONPATH=build/python /usr/bin/python3 bench/agent_bench.py [--bin-dir build/bin]
        [--block-steps 25] [--rounds 40] [--warmup 20] [--smdebug DIR] [--configs ...] [--depth N]

Starts a collector and a tensorkeep-agent pinned to CPU 1 (``taskset``, as a
collector on another machine would be) and trains on CPU 0: the MLP
784-256-10 of bench/mlp.py, batch 64, one BLAS thread, weights, biases,
gradients and the loss saved every step (~1.6 MB). The configurations and
how they are interleaved (each its own model copy, rounds of one short block
each, the order reversed every other round, every model stepping in each
copy of a step's memory in turn, the agent and collector finishing a block's
work untimed) are bench/interleave.py's: ``no hook``, ``floor`` (the copy of
the saved tensors alone, the snapshot the training process cannot avoid),
``shared floor`` (the same copy into a ring in shared memory that another
process on the other CPU copies out, bench/shared_ring.py: the least a
hand-over to another process costs), ``agent`` (tensorkeep's hook handing over to tensorkeep-agent; the
in-process Python push it replaced measured +5.9-6.7 ms a step and ~3.5 ms
of process CPU on this machine), ``agent 100`` (``save_interval=100``),
``agent losses`` (not by default: the hook's default collections, the losses
alone), ``minimal hook`` (the same PyTorch callbacks doing nothing but the
copy: the least any hook written in Python costs), ``dry run`` (the hook's
Python alone), ``hand-over`` (``agent`` with the
hand-over's calls timed in place) and ``smdebug``: smdebug 1.0.34's own
PyTorch hook writing local files, from the checkout in ``--smdebug`` or
$SMDEBUG_SRC (skipped, with the reason printed, when absent or when it
cannot be imported here; its generated protobuf modules are made with protoc
in a copy, and its optional imports boto3/botocore/pandas/pyinstrument are
stubbed when missing -- the hook saving to a local directory uses none of
them). ``--base REV`` adds the client at git revision REV: configurations named
with `` @base`` (``--configs "no hook,agent,agent @base"``) run it, and each
is compared with its current-code twin round by round. ``--depth N`` trains N layers Linear(32, 32) + ReLU instead of the
MLP (bench/mlp.py): 2N + 2 small parameters, where the hook's costs per
tensor and per module show.

Per configuration: the median step (wall clock) on the training thread, the
mean step (which the median hides: steps that wait for room in the shared
ring when the agent and collector take the data slower than training makes
it; on this 2-core VM they do, see docs/performance.md), the training
process's CPU per step (all its threads, ``time.process_time``), the
training thread's CPU, and the overheads over no hook: the median over
rounds of each round's difference of mean steps (and, for ``agent 100``,
whose rounds save a step only now and then, interleave.amortized_overhead
and the mean over rounds); the
snapshot floor is the median time of the copy alone. Prints a table and one JSON object.

Then, as a peer (``--peers in-process``, the default, when
bin/in_process_writer is built): the other shape the issue names, the C++
writer inside the training process, which a pybind11 binding would run —
its process CPU per saved step over the same floor, with the collector on
the other CPU (bench/in_process_writer.cc; its own JSON line last).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interleave  # noqa: E402
from mlp import reference_blas_note  # noqa: E402
from quiet import settle  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def json_key(config: str) -> str:
    """The prefix of a configuration's figures in the JSON line ("hand-over": hand_over_...)."""
    return config.replace(" ", "_").replace("-", "_")


def start(args: List[str], cpu: str, env: Dict[str, str], log: str):
    """Starts a server or agent pinned to ``cpu``; returns (process, what it listens on)."""
    cmd = (["taskset", "-c", cpu] if shutil.which("taskset") else []) + args
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(log, "ab"), stdin=subprocess.DEVNULL,
                         env=env, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        raise SystemExit(f"{args[0]} did not start: {line!r} (log {log})")
    return p, line.split()[2]


def start_services(bin_dir: str, work: str, cpu: str, env, procs: List[subprocess.Popen]) -> str:
    """Starts a collector (its data in ``work``/data) and a tensorkeep-agent
    (its socket in ``work``/agent, set as ``env``'s TENSORKEEP_AGENT_SOCKET
    for the writers), pinned to ``cpu``; appends them to ``procs`` (for
    ``stop``); returns the collector's address."""
    data = os.path.join(work, "data")
    os.mkdir(data)
    server, address = start([os.path.join(bin_dir, "tensorkeep-server"), "--listen", "127.0.0.1:0",
                             "--data-dir", data, "--log-level", "warn"], cpu, dict(env),
                            os.path.join(work, "server.log"))
    procs.append(server)
    env["TENSORKEEP_AGENT_SOCKET"] = os.path.join(work, "agent", "agent.sock")
    agent, _ = start([os.path.join(bin_dir, "tensorkeep-agent"), "--idle-exit-seconds", "0",
                      "--log-level", "warn"], cpu, dict(env), os.path.join(work, "agent.log"))
    procs.append(agent)
    return address


def stop(procs: List[subprocess.Popen], work: str) -> None:
    """Stops what ``start`` started (the last first), then removes the work directory."""
    for p in reversed(procs):
        p.terminate()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
    shutil.rmtree(work, ignore_errors=True)


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
    ap.add_argument("--configs", default="no hook,floor,shared floor,minimal hook,agent,agent 100,dry run,hand-over,smdebug",
                    help="also: 'agent losses' (the hook's default collections, the losses alone)")
    ap.add_argument("--base", metavar="REV",
                    help="also run the client at git revision REV (bench/base_package.py): name its "
                         "configurations with ' @base' in --configs ('agent,agent @base'); prints each "
                         "one's difference to the current code's, round by round")
    ap.add_argument("--depth", type=int, default=0,
                    help="0: the MLP 784-256-10; N: N layers Linear(32, 32) + ReLU (bench/mlp.py), "
                         "where the hook's costs per tensor and per module show")
    ap.add_argument("--shared-ring-mib", type=float, default=0,
                    help="the 'shared floor' ring's size (default: the hook's ring, 32 MiB); a ring the "
                         "reader keeps up with can be small, and a small one stays in the TLB")
    ap.add_argument("--peers", default="in-process",
                    help="'in-process': also run bin/in_process_writer, the C++ writer inside the "
                         "training process (the pybind11 shape's lower bound); '' for none")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    note = reference_blas_note()
    if note:
        print(note, flush=True)
    work = tempfile.mkdtemp(prefix="tk-agent-bench-")
    os.chmod(work, 0o700)
    other_cpu = "1" if (os.cpu_count() or 1) > 1 else "0"
    procs: List[subprocess.Popen] = []
    try:
        address = start_services(args.bin_dir, work, other_cpu, os.environ, procs)
        threading_note = f"training on CPU 0, collector and agent on CPU {other_cpu}"
        os.sched_setaffinity(0, {0})
        rc = bench(args, address, work, threading_note, procs)
        if rc == 0 and "in-process" in args.peers:
            in_process_writer(args, address)
        return rc
    finally:
        stop(procs, work)


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
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        print("in-process C++ writer: failed: no result within 600 s (is the collector's disk full? "
              "see its log in the work directory)", flush=True)
        return
    if out.returncode != 0:
        print(f"in-process C++ writer: failed: {out.stderr.strip()}", flush=True)
        return
    print(out.stdout.strip(), flush=True)


def proc_usage(pid: int) -> "tuple[float, int]":
    """A process's CPU seconds (user + system) and minor page faults so far
    (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), int(fields[7])


def bench(args, address: str, work: str, note: str, procs: List[subprocess.Popen]) -> int:
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    smd = None
    if "smdebug" in configs:
        smd, why = smdebug_import(args.smdebug, work)
        if smd is None:
            print(f"smdebug: skipped: {why}", flush=True)
            configs.remove("smdebug")
    base = None
    if args.base:
        import base_package

        base = base_package.load(args.base, work)
    # What the other CPU's processes (the collector, then the agent) spend
    # over the whole run: the agent's page faults showed its heap given back
    # and faulted in again at every step (docs/performance.md, R11).
    usage0 = [proc_usage(p.pid) for p in procs]
    runs = interleave.run(configs, address, work, smd, args.rounds, args.block_steps, args.block_warmup,
                          args.warmup, depth=args.depth, base=base,
                          shared_ring_bytes=int(args.shared_ring_mib * (1 << 20)) or None,
                          quiet_costs=[c for c in ("agent 100",) if c in configs])
    usage = [(c1 - c0, f1 - f0) for (c0, f0), (c1, f1) in zip(usage0, (proc_usage(p.pid) for p in procs))]
    results = {c: runs[c].figures() for c in configs}

    med = lambda c, k: results[c][k]  # noqa: E731
    out: Dict[str, float] = {"block_steps": args.block_steps, "rounds": args.rounds}
    print(f"{note}; {args.rounds} rounds of a {args.block_steps}-step block each, alternating; "
          "step: median; overheads: median over rounds of the round's difference of means")
    print(f"{'configuration':<20} {'step ms':>8} {'overhead ms':>12} {'mean step ms':>13} {'process cpu ms':>15} "
          f"{'cpu over no hook':>17} {'train thread cpu':>17} {'close s':>8}")
    for c in configs:
        over = interleave.overhead(runs, c, 1)
        cpu_over = interleave.overhead(runs, c, 2)
        key = json_key(c)
        out[f"{key}_ms"] = med(c, "ms")
        out[f"{key}_mean_ms"] = med(c, "mean_ms")
        out[f"{key}_overhead_ms"] = over
        out[f"{key}_process_cpu_ms"] = med(c, "process_cpu_ms")
        out[f"{key}_cpu_overhead_ms"] = cpu_over
        # The mean over rounds: what a configuration that saves one step in
        # many ("agent 100") costs on average, which the median would hide.
        out[f"{key}_mean_overhead_ms"] = interleave.mean_overhead(runs, c, 1)
        out[f"{key}_mean_cpu_overhead_ms"] = interleave.mean_overhead(runs, c, 2)
        out[f"{key}_thread_cpu_ms"] = med(c, "thread_cpu_ms")
        print(f"{c:<20} {med(c, 'ms'):8.3f} {over:+12.3f} {med(c, 'mean_ms'):13.3f} {med(c, 'process_cpu_ms'):15.3f} {cpu_over:+17.3f} "
              f"{med(c, 'thread_cpu_ms'):17.3f} {med(c, 'close_s'):8.3f}")
    for c in configs:
        if c.endswith(interleave.BASE) and c[: -len(interleave.BASE)] in configs:
            # The current code against the base, round by round (process CPU a step).
            new = c[: -len(interleave.BASE)]
            d = [x - b for x, b in zip(interleave.per_round(runs, new, 2), interleave.per_round(runs, c, 2))]
            key = json_key(new)
            out[f"{key}_minus_base_cpu_ms"] = statistics.median(d)
            print(f"{new} - {c} ({args.base}): process CPU a step median {statistics.median(d):+.3f} ms, "
                  f"mean {statistics.fmean(d):+.3f} ms; the current code cheaper in {sum(x < 0 for x in d)} "
                  f"of {len(d)} rounds")
    if "floor" in configs:
        out["snapshot_floor_ms"] = med("floor", "copy_ms")
        print(f"snapshot floor (the copy alone): {out['snapshot_floor_ms']:.3f} ms")
        for c in ("agent",):
            if c in configs:
                k = json_key(c)
                print(f"{c}: process CPU over no hook / floor = "
                      f"{out[f'{k}_cpu_overhead_ms'] / out['snapshot_floor_ms']:.2f} (target <= 2)")
        if "shared floor" in configs:
            # What a hand-over to another process costs at least: the copy
            # into memory the other CPU reads (its lines leave this CPU's
            # cache), across a ring of the agent's size (more pages than the
            # TLB holds).
            k = "shared_floor_cpu_overhead_ms"
            out["shared_floor_copy_ms"] = med("shared floor", "copy_ms")
            out["shared_floor_ring_mib"] = runs["shared floor"].shared.ring / (1 << 20)
            print(f"shared floor: the copy into the shared ring ({out['shared_floor_ring_mib']:g} MiB) "
                  f"{out['shared_floor_copy_ms']:.3f} ms; process CPU "
                  f"over no hook / floor = {out[k] / out['snapshot_floor_ms']:.2f} (the least a hand-over to "
                  "another process costs)")
            if "agent" in configs:
                print(f"agent: process CPU over no hook / the shared floor's = "
                      f"{out['agent_cpu_overhead_ms'] / out[k]:.2f}")
        if "minimal hook" in configs:
            # What the floor leaves out and no Python hook avoids: PyTorch
            # calling back into Python (the callbacks take it off its fast
            # paths) and the copy's effect on the next step's caches.
            k = "minimal_hook_cpu_overhead_ms"
            print(f"minimal hook: process CPU over no hook / floor = {out[k] / out['snapshot_floor_ms']:.2f}"
                  " (the least a hook in Python costs with these callbacks)")
            if "agent" in configs:
                print(f"agent: process CPU over no hook / the minimal hook's = "
                      f"{out['agent_cpu_overhead_ms'] / out[k]:.2f}")
    if "hand-over" in configs:
        out["handover_thread_cpu_ms"] = med("hand-over", "handover_ms")
        print(f"hand-over: the training thread's CPU in the stream's add_record and end_step "
              f"(the copy into the ring and the send): {out['handover_thread_cpu_ms']:.3f} ms a step")
    if "smdebug" in configs:
        for c in ("agent",):
            if c in configs:
                k = json_key(c)
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
        # On its own model: the quiet step's cost (the hook's pre-hook
        # attached and detached in turn) plus the saving steps' excess over
        # the other steps of their blocks. Against the no-hook configuration's
        # model copy (amortized_overhead) the typical step differs by up to
        # ±0.1 ms for reasons of the copy's own, ±5 % of a step.
        out["agent_100_quiet_ms"] = runs["agent 100"].quiet_cost_ms
        out["agent_100_saving_excess_ms"] = interleave.saving_excess(runs, "agent 100")
        out["agent_100_same_model_overhead_ms"] = out["agent_100_quiet_ms"] + out["agent_100_saving_excess_ms"]
        out["agent_100_amortized_overhead_ms"] = interleave.amortized_overhead(runs, "agent 100")
        print(f"agent 100: {100 * out['agent_100_same_model_overhead_ms'] / out['no_hook_ms']:+.2f} % over no hook "
              f"(target <= 1 %): a quiet step {out['agent_100_quiet_ms'] * 1e3:+.1f} us on its own model (the hook's "
              f"pre-hook attached and detached in turn), the saving steps' excess {out['agent_100_saving_excess_ms'] * 1e3:+.1f} "
              "us spread over every step; against the no-hook copy of the model: "
              f"{100 * out['agent_100_amortized_overhead_ms'] / out['no_hook_ms']:+.2f} % (the typical steps' difference "
              f"plus the same excess), the mean over rounds {100 * out['agent_100_mean_overhead_ms'] / out['no_hook_mean_ms']:+.2f} %")
    for name, (cpu_s, faults) in zip(("collector", "agent"), usage):
        out[f"{name}_cpu_s"] = cpu_s
        out[f"{name}_faults"] = faults
    print(f"the other CPU over the whole run (every configuration, untimed drains included): collector "
          f"{out['collector_cpu_s']:.2f} s of CPU and {out['collector_faults']} page faults, agent "
          f"{out['agent_cpu_s']:.2f} s and {out['agent_faults']} page faults")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
