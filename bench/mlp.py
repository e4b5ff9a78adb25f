"""The model the hook benches train: an MLP 784-256-10 on batches of 64
(SGD, CrossEntropyLoss), one training step, and the memory a step works in.

Used by bench/hook_bench.py and bench/agent_bench.py (and, through
hook_bench, tests/python/test_pytorch_hook.py's overhead test).

Why ``Storage``: the same model's step time moves from one instance to the
next (4.9 or 8.1 ms of backward with Debian's reference BLAS; with OpenBLAS,
five hook-free copies interleaved differed by up to 0.10 ms a step of ~3 ms,
a different copy the slowest each run), which a bench comparing
configurations would read as a hook's cost. Where a configuration needs a
model of its own (a hook stays registered on it), the benches give every
model each of several ``Storage`` in turn, so that each configuration steps
in every copy's memory alike.
"""

from typing import List


class Storage:
    """One copy of the memory a step reads and writes in place: the
    parameters, their gradients and the batch."""

    def __init__(self, model: "Model") -> None:
        import torch

        self.data = [p.data.clone() for p in model.params]
        self.grads = [torch.zeros_like(p.data) for p in model.params]
        self.x = model.x.clone()
        self.y = model.y.clone()


class Model:
    """``depth`` 0: the issue's MLP 784-256-10. ``depth`` N: N layers
    Linear(32, 32) + ReLU, then Linear(32, 10), on batches of 64 × 32: many
    small parameters and modules (2N + 2 parameters, ~0.4 MB a step saved),
    where the hook's costs per tensor and per module show."""

    def __init__(self, depth: int = 0) -> None:
        import torch

        torch.manual_seed(0)
        if depth:
            layers = []
            for _ in range(depth):
                layers += [torch.nn.Linear(32, 32), torch.nn.ReLU()]
            self.module = torch.nn.Sequential(*layers, torch.nn.Linear(32, 10))
            self.x = torch.randn(64, 32)
        else:
            self.module = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
            self.x = torch.randn(64, 784)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        self.opt = torch.optim.SGD(self.module.parameters(), lr=0.01)
        self.y = torch.randint(0, 10, (64,))
        self.params: List = list(self.module.parameters())

    def step(self):
        """One training step: zero_grad, forward, loss, backward, optimizer step. Returns the loss."""
        self.opt.zero_grad()
        loss = self.loss_fn(self.module(self.x), self.y)
        loss.backward()
        self.opt.step()
        return loss

    def use(self, storage: Storage) -> None:
        """Steps from now on in ``storage``'s memory (the parameter objects,
        and the hooks registered on them, stay)."""
        for p, d, g in zip(self.params, storage.data, storage.grads):
            p.data = d
            p.grad = g
        self.x, self.y = storage.x, storage.y



def reference_blas_note() -> str:
    """A line to print when torch's matrix products are slow, as on netlib's
    reference BLAS (Debian's ``libblas3`` alone): then the MLP's step takes
    ~12-16 ms instead of the issue's ~1 ms, and every overhead is measured
    against a step 10x longer. '' otherwise. Timed rather than looked up in
    /proc/self/maps: which library answers depends on the alternatives, the
    load order and LD_PRELOAD."""
    import time

    import torch

    x, w = torch.ones(64, 784), torch.ones(784, 256)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        x @ w
        best = min(best, time.perf_counter() - t)
    if best < 1e-3:
        return ""
    return (f"note: a 64x784 @ 784x256 product takes {best * 1e3:.1f} ms here (OpenBLAS: ~0.1 ms): PyTorch "
            "runs on a slow BLAS, Debian's reference libblas3?, so a step takes ~12-16 ms, not the issue's "
            "~1 ms; install libopenblas0-pthread (apt) to measure the issue's loop")
