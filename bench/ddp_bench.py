#!/usr/bin/python3
"""The PyTorch hook's per-step overhead with 4 DDP ranks against 1 (issue 13).

    PYTHONPATH=build/python /usr/bin/python3 bench/ddp_bench.py [--bin-dir build/bin]
        [--steps 150] [--rounds 3] [--worlds 1,4]

Starts a collector and a tensorkeep-agent, then for each world size W runs W
rank processes (gloo on loopback, DistributedDataParallel of the MLP
784-256-10 of bench/hook_bench.py, batch 64 a rank, one BLAS thread a rank).
Each rank trains two models in rounds that alternate their order: one without
the hook and one with tensorkeep's hook on every rank (include_workers='all';
weights, biases, gradients and the loss saved every step, ~1.6 MB a rank a
step). Rank 0 times each step (wall clock, the all-reduce included); the
overhead is the median over rounds of the difference of the two models'
median steps. Prints a table and, as its last line, one JSON object.

On this 2-core machine 4 ranks share 2 cores with the collector and the
agent, so a step of 4 ranks is slower than one of 1 for the model itself; the
figure to read is the overhead per step against the same world without the
hook, and the ratio of the 4-rank overhead to the 1-rank one.
"""

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_bench import start_services, stop  # noqa: E402  (the collector and agent, pinned to CPUs)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_CPUS = f"0-{(os.cpu_count() or 1) - 1}"  # not pinned: the ranks share every core
COLLECTIONS = ["weights", "biases", "gradients", "losses"]


def rank_main(rank: int, world: int, port: int, url: str, steps: int, rounds: int) -> None:
    """One rank: prints one JSON line of per-round median step times (rank 0)."""
    import torch
    import torch.distributed as dist

    import tensorkeep.pytorch as tkp

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))

    plain = torch.nn.parallel.DistributedDataParallel(model())
    hooked = torch.nn.parallel.DistributedDataParallel(model())
    hook = tkp.Hook(url, save_config=tkp.SaveConfig(save_interval=1), include_collections=COLLECTIONS,
                    include_workers="all")
    hook.register_module(hooked)
    loss_fn = torch.nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    g = torch.Generator().manual_seed(rank)
    x, y = torch.randn(64, 784, generator=g), torch.randint(0, 10, (64,), generator=g)

    def run(net) -> float:
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        times = []
        for s in range(steps + 10):
            dist.barrier()  # every rank starts the step together
            t0 = time.perf_counter()
            opt.zero_grad()
            loss_fn(net(x), y).backward()
            opt.step()
            if s >= 10:
                times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000

    out: Dict[str, List[float]] = {"plain": [], "hooked": []}
    for r in range(rounds):
        order = [("plain", plain), ("hooked", hooked)]
        if r % 2:
            order.reverse()
        for name, net in order:
            out[name].append(run(net))
    hook.close()
    dist.barrier()
    if rank == 0:
        print(json.dumps(out), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worlds", default="1,4")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if args.rank is not None:
        rank_main(args.rank, args.world, args.port, args.url, args.steps, args.rounds)
        return 0

    work = tempfile.mkdtemp(prefix="tk-ddp-bench-")
    os.chmod(work, 0o700)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"):
        env.pop(k, None)
    procs = []
    results: Dict[int, Dict[str, List[float]]] = {}
    try:
        address = start_services(args.bin_dir, work, ALL_CPUS, env, procs)
        for world in [int(w) for w in args.worlds.split(",")]:
            url = f"tensorkeep://{address}/ddp-bench-w{world}-{uuid.uuid4().hex[:6]}"
            port = free_port()
            ranks = [subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--rank", str(r), "--world", str(world), "--port",
                 str(port), "--url", url, "--steps", str(args.steps), "--rounds", str(args.rounds)],
                stdout=subprocess.PIPE, stderr=open(os.path.join(work, f"w{world}-rank{r}.err"), "w"),
                stdin=subprocess.DEVNULL, env=env, text=True) for r in range(world)]
            outs = [p.communicate(timeout=1800)[0] for p in ranks]
            if any(p.returncode != 0 for p in ranks):
                err = open(os.path.join(work, f"w{world}-rank0.err")).read()[-2000:]
                raise SystemExit(f"world {world}: a rank failed: {err}")
            results[world] = json.loads(outs[0].strip().splitlines()[-1])
    finally:
        stop(procs, work)

    out: Dict[str, float] = {"steps": args.steps, "rounds": args.rounds}
    print(f"{args.rounds} rounds x {args.steps} steps a world; step time of rank 0 (median), ms")
    print(f"{'ranks':>5} {'no hook':>9} {'hook':>9} {'overhead':>9}")
    for world, r in results.items():
        over = statistics.median(h - p for h, p in zip(r["hooked"], r["plain"]))
        out[f"w{world}_no_hook_ms"] = statistics.median(r["plain"])
        out[f"w{world}_hook_ms"] = statistics.median(r["hooked"])
        out[f"w{world}_overhead_ms"] = over
        print(f"{world:>5} {out[f'w{world}_no_hook_ms']:9.3f} {out[f'w{world}_hook_ms']:9.3f} {over:+9.3f}")
    worlds = sorted(results)
    if len(worlds) >= 2 and out[f"w{worlds[0]}_overhead_ms"] > 0:
        ratio = out[f"w{worlds[-1]}_overhead_ms"] / out[f"w{worlds[0]}_overhead_ms"]
        out["overhead_ratio"] = ratio
        print(f"overhead with {worlds[-1]} ranks / with {worlds[0]}: {ratio:.2f}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
