"""One rank of the DDP collector-outage test (test_distributed_outage.py).

    ddp_outage_rank.py RANK WORLD PORT URL MAX_STALL FLAG_FILE

Trains a DistributedDataParallel MLP (256-512-10, ~1 MB of weights and
gradients saved a step) with the tensorkeep hook on every rank, a step every
~10 ms, until FLAG_FILE exists (the test made it after the collector's outage)
and AFTER steps more, or MAX_STEPS. The writer's queue is 1 MiB (through the
hook's writer seam), so an outage fills it within a step and the agent must
journal. Prints ``rank R steps N longest_ms X journaled B dropped D``.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import tensorkeep.pytorch as tkp
import tensorkeep.pytorch.hook as tk_hook

MAX_STEPS = 3000
STEP_S = 0.01
AFTER = 30


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    url, max_stall, flag = sys.argv[4], float(sys.argv[5]), sys.argv[6]
    torch.set_num_threads(1)
    make_writer = tk_hook._make_writer
    tk_hook._make_writer = lambda *a, **k: make_writer(*a, max_queue_bytes=1 << 20, **k)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    hook = tkp.Hook(
        url,
        save_config=tkp.SaveConfig(save_interval=1),
        include_collections=["weights", "biases", "gradients", "losses"],
        include_workers="all",
        gradients="all_reduced",
        max_stall_seconds=max_stall,
    )
    hook.register_module(ddp)
    loss_fn = torch.nn.CrossEntropyLoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    longest, after = 0.0, None
    step = 0
    for step in range(MAX_STEPS):
        t0 = time.monotonic()
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(32, 256, generator=g), torch.randint(0, 10, (32,), generator=g)
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
        took = time.monotonic() - t0
        longest = max(longest, took)
        if took < STEP_S:
            time.sleep(STEP_S - took)
        if after is None:
            # The ranks must stop at the same step (a rank that trains one
            # step more waits in DDP's all-reduce for a peer already in the
            # final barrier), so they agree on when they saw the flag: one
            # rank may see the file a step before the other.
            seen = torch.tensor([1 if os.path.exists(flag) else 0])
            dist.all_reduce(seen, op=dist.ReduceOp.MAX)
            if seen.item():
                after = step + AFTER
        if after is not None and step >= after:
            break
    writer = hook._writer
    journaled, dropped = writer.journaled_bytes, writer.dropped_records
    hook.close()
    dist.barrier()
    print(f"rank {rank} steps {step + 1} longest_ms {longest * 1e3:.0f} journaled {journaled} dropped {dropped}",
          flush=True)


if __name__ == "__main__":
    main()
