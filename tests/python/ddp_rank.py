"""One rank of the torch.distributed test (test_distributed.py), a process of its own.

    ddp_rank.py RANK WORLD PORT URL_PREFIX RUNS KILL_AT

The first Hook is made before ``init_process_group`` and no Hook is given a
rank: it must take rank and world size from torch.distributed when its first
step starts. The model is wrapped in DistributedDataParallel and the wrapper is
registered.

1. RUNS runs, run r into trial URL_PREFIX-r: train (a step every ~9 ms) until
   ``hook.should_stop()``; print ``run R rank K stopped S`` (the hook's step).
   Even runs save every rank (include_workers='all') with all-reduced
   gradients, odd runs smdebug's default (only worker_0 saves) with local
   gradients. A run that sees no stop within MAX_STEPS prints ``nostop``.
2. One run into URL_PREFIX-kill (include_workers='all', local gradients): the
   last rank flushes and SIGKILLs itself at step KILL_AT; the others see the
   collective fail, go on with AFTER forward passes of the plain model (no
   DDP), close and print ``survived LAST``.

Each rank's batch at step s is seeded with 1000 * s + rank (the test recomputes
the gradients from it).
"""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import tensorkeep.pytorch as tkp

MAX_STEPS = 3000
STEP_S = 0.009
AFTER = 6


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def batch(step: int, rank: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 8, generator=g), torch.randn(16, 3, generator=g)


def make(url: str, include_workers: str, gradients: str):
    return tkp.Hook(
        url,
        save_config=tkp.SaveConfig(save_interval=1),
        include_collections=["weights", "biases", "gradients", "losses"],
        include_workers=include_workers,
        gradients=gradients,
    )


def train_until_stop(hook, ddp, rank: int, run: int) -> None:
    loss_fn = torch.nn.MSELoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(MAX_STEPS):
        t0 = time.monotonic()
        x, y = batch(step, rank)
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
        left = STEP_S - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
        if hook.should_stop():
            print(f"run {run} rank {rank} stopped {hook.step}", flush=True)
            return
    print(f"run {run} rank {rank} nostop", flush=True)


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    prefix, runs, kill_at = sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
    torch.set_num_threads(1)
    first = make(f"{prefix}-0", "all", "all_reduced")
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    for run in range(runs):
        hook = first if run == 0 else make(
            f"{prefix}-{run}", "all" if run % 2 == 0 else "one", "all_reduced" if run % 2 == 0 else "local"
        )
        torch.manual_seed(0)
        ddp = torch.nn.parallel.DistributedDataParallel(Net())
        hook.register_module(ddp)
        train_until_stop(hook, ddp, rank, run)
        hook.close()
        dist.barrier()

    hook = make(f"{prefix}-kill", "all", "local")
    torch.manual_seed(0)
    model = Net()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    hook.register_module(ddp)
    loss_fn = torch.nn.MSELoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    step = 0
    try:
        for step in range(MAX_STEPS):
            if rank == world - 1 and step == kill_at:
                hook.flush()
                print(f"rank {rank} dies at {hook.step}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            x, y = batch(step, rank)
            opt.zero_grad()
            loss_fn(ddp(x), y).backward()
            opt.step()
    except RuntimeError as e:  # the dead rank's peers: the all-reduce failed
        print(f"rank {rank} collective failed at step {hook.step}: {str(e)[:80]!r}", flush=True)
    with torch.no_grad():
        for _ in range(AFTER):
            x, y = batch(step, rank)
            loss_fn(model(x), y)
    hook.close()
    print(f"survived {hook.step}", flush=True)


if __name__ == "__main__":
    main()
