"""A training script for torchrun (test_torchrun_restart.py), run as

    torchrun --standalone --nproc_per_node=2 --max_restarts=1 torchrun_job.py URL

Each rank trains a small DDP model for STEPS steps with the tensorkeep hook
(no rank, world size or attempt given: the hook takes them from what torchrun
sets) and saves a marker scalar ``1000 * attempt + step`` (``scalar/marker``) every step. In the
first attempt, rank 1 fails (an uncaught exception) at step FAIL_AT after its
earlier steps were sent; torchrun then stops the other rank and restarts the
job, whose second attempt trains every step from the start. Prints
``attempt A rank R done`` at the end.
"""

import datetime
import os
import sys

import torch
import torch.distributed as dist

import tensorkeep.pytorch as tkp

STEPS = 8
FAIL_AT = 5


def main() -> None:
    url = sys.argv[1]
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    hook = tkp.Hook(
        url,
        save_config=tkp.SaveConfig(save_interval=1),
        include_collections=["weights", "losses"],
        include_workers="all",
    )
    torch.manual_seed(attempt)
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    hook.register_module(ddp)
    loss_fn = torch.nn.MSELoss()
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(STEPS):
        if attempt == 0 and rank == 1 and step == FAIL_AT:
            hook.flush()
            raise RuntimeError(f"injected failure of rank {rank} at step {step}")
        g = torch.Generator().manual_seed(100 * step + rank)
        x, y = torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
        hook.save_scalar("marker", float(1000 * attempt + step))
    hook.close()
    print(f"attempt {attempt} rank {rank} done", flush=True)


if __name__ == "__main__":
    main()
