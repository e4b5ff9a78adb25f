"""Configurations of a training loop measured in interleaved short blocks
(bench/agent_bench.py, bench/hook_bench.py).

Each configuration (no hook, the hook saving every step through the agent,
...) has its own copy of one model (a hook stays registered on its model),
and they run in rounds of one short block each, the order reversed every
other round: this VM's speed drifts by more than the effects measured (±15 %
of a step within minutes), and a round's difference between two
configurations sees only the drift within its blocks. Every configuration's
model steps in each of as many copies of a step's memory (bench/mlp.py's
Storage) in turn. After each block, untimed, the agent and collector finish
that block's work (a flush; smdebug's writer thread gets 50 ms), so that the
next block does not pay for it.

Configurations (``Config.name``):

* ``no hook``;
* ``floor``: no hook, but the saved tensors copied once into preallocated
  buffers after each step (the snapshot the training process cannot avoid);
* ``shared floor``: the same copy into a ring in shared memory, of the
  agent's ring's size, that another process on the other CPU copies out
  (bench/shared_ring.py): what any hand-over to another process costs at
  least, with no protocol around it;
* ``agent``: tensorkeep's hook saving weights, biases, gradients and the
  loss every step, handing over to tensorkeep-agent;
* ``agent 100``: the same with ``save_interval=100``;
* ``agent losses``: the hook with its default collections (the losses
  alone), saving every step;
* ``dry run``: the hook with ``dry_run=True``;
* ``minimal hook``: the least any hook in Python can cost the training
  process: the callbacks tensorkeep's hook registers for these collections
  (a forward pre-hook on the model copying the parameters, a hook on each
  parameter's gradient, a forward hook on the loss module), each doing
  nothing but copying its tensor into a preallocated buffer; no step
  counting, no save config, no hand-over;
* ``hand-over``: ``agent`` with the training thread's CPU in the writer
  stream's add_record and end_step timed;
* ``smdebug``: smdebug's own hook writing local files (``smd``: its
  ``smdebug.pytorch`` module).

A name ending in `` @base`` (``agent @base``) is that configuration with the
client at another commit (bench/base_package.py; ``base``: its package).
"""

import atexit
import copy
import importlib
import os
import statistics
import time
import uuid
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from mlp import Model, Storage
from shared_ring import SharedRing
from quiet import settle

COLLECTIONS = ["weights", "biases", "gradients", "losses"]
HOOKED = ("agent", "agent 100", "agent losses", "dry run", "hand-over")  # tensorkeep's hook
BASE = " @base"


class Block(NamedTuple):
    """One kept block of a configuration: per step its wall time, its
    training-thread CPU, the floor's copy (``floor`` only) and whether it
    saved or followed a step that saved (which ends it: the hand-over's
    send); and the process CPU of the whole block (s)."""

    wall: List[float]
    thread_cpu: List[float]
    copy: List[float]
    saved: List[bool]
    process_cpu: float

    def per_step(self, k: int) -> float:
        """k 1: the mean wall time of a step; 2: the process CPU a step (s)."""
        return (sum(self.wall) if k == 1 else self.process_cpu) / len(self.wall)


class Config:
    """One configuration with its own copy of the round's model (and hook),
    run block after block between the others'."""

    def __init__(self, name: str, m: Model, server: str, work: str, smd, base=None,
                 shared_ring_bytes: Optional[int] = None) -> None:
        import numpy as np

        self.name = name
        # What it runs: the name without " @base", with the package it names.
        self.kind = name[: -len(BASE)] if name.endswith(BASE) else name
        if name.endswith(BASE) and (base is None or self.kind not in HOOKED):
            raise ValueError(f"configuration {name!r}: the base package is for tensorkeep's hook ({HOOKED})")
        # Each its own copy: a hook stays registered on its model (smdebug's
        # never removes its own), and blocks of every configuration alternate.
        self.m = copy.deepcopy(m)
        self.hook = None
        model, loss_fn = self.m.module, self.m.loss_fn
        if self.kind in HOOKED:
            import tensorkeep

            package = base if name.endswith(BASE) else tensorkeep
            tkp = importlib.import_module(package.__name__ + ".pytorch")
            self.hook = tkp.Hook(
                f"tensorkeep://{server}/bench-agent-{uuid.uuid4().hex[:10]}",
                save_config=tkp.SaveConfig(save_interval=100 if self.kind == "agent 100" else 1),
                include_collections=["losses"] if self.kind == "agent losses" else COLLECTIONS,
                dry_run=self.kind == "dry run",
            )
            self.hook.register_module(model)
            self.hook.register_loss(loss_fn)
            self.hook.set_mode(importlib.import_module(package.__name__ + ".modes").TRAIN)
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
        if name == "minimal hook":
            self._register_minimal_hook(model, loss_fn)
        self.shared: Optional[SharedRing] = None
        if name == "shared floor":
            from tensorkeep import _handover, writer

            others = sorted(set(range(os.cpu_count() or 1)) - os.sched_getaffinity(0))
            ring = shared_ring_bytes or _handover.ring_bytes_for(writer.DEFAULT_MAX_QUEUE_BYTES)
            self.shared = SharedRing(ring, others[0] if others else None)
        self.blocks: List[Block] = []  # the kept blocks, one a round
        self.quiet_cost_ms: Optional[float] = None  # quiet_cost, when run asked for it
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
        if self.kind == "hand-over" and self.hook._writer is not None and not self._timing:
            self._time_handover(self.hook._writer._stream)
        floor = self.kind == "floor"
        shared = self.shared
        for _ in range(warmup):
            m.step()
        wall: List[float] = []
        thread_cpu: List[float] = []
        copies: List[float] = []
        saved: List[bool] = []
        saving = self._saving()
        self._keep = keep
        proc0 = time.process_time()
        for _ in range(steps):
            c = time.thread_time()
            t = time.perf_counter()
            loss = m.step()
            now = self._saving()
            saved.append(saving or now)
            saving = now
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
            elif shared is not None:
                t1 = time.perf_counter()
                with torch.no_grad():
                    arrays = [a for p in m.params for a in (p.detach().numpy(), p.grad.numpy())]
                    arrays.append(loss.detach().numpy())
                    shared.put(arrays)
                copies.append(time.perf_counter() - t1)
            wall.append(time.perf_counter() - t)
            thread_cpu.append(time.thread_time() - c)
        proc = time.process_time() - proc0
        self._keep = False
        self.drain()
        if keep:
            self.blocks.append(Block(wall, thread_cpu, copies, saved, proc))

    def _register_minimal_hook(self, model, loss_fn) -> None:
        """The ``minimal hook``'s callbacks: where tensorkeep's hook takes each
        tensor (the parameters at the step's first forward, the gradients as
        autograd computes them, the loss as its module returns it), a copy
        into a buffer of this configuration's."""
        import numpy as np

        params = list(model.parameters())
        weights, grads = self.buffers[0::2], self.buffers[1::2]
        self.loss_buffer = loss_buffer = np.empty((), np.float32)

        def pre(module, inputs):
            for p, b in zip(params, weights):
                np.copyto(b, p.detach().numpy())

        def grad_hook(b):
            def hook(g):
                np.copyto(b, g.numpy())

            return hook

        def loss_hook(module, inputs, output):
            np.copyto(loss_buffer, output.detach().numpy())

        model.register_forward_pre_hook(pre)
        for p, b in zip(params, grads):
            p.register_hook(grad_hook(b))
        loss_fn.register_forward_hook(loss_hook)

    def _saving(self) -> bool:
        """The step just run (or about to be ended) saved: tensorkeep's hook only."""
        return bool(getattr(self.hook, "_saving", False))

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
        if self.kind in HOOKED and self.kind != "dry run":
            self.hook.flush()
        elif self.shared is not None:
            self.shared.drain()
        elif self.name == "smdebug":
            time.sleep(0.05)

    def close(self) -> None:
        t = time.perf_counter()
        if self.shared is not None:
            self.shared.close()
        if self.hook is not None:
            if self.name == "smdebug":
                self.hook._cleanup()
                # Not again at exit: it would write training_job_end.ts into
                # its out_dir after the bench removed its work directory.
                atexit.unregister(self.hook._cleanup)
            else:
                self.hook.close()
        self.close_s = time.perf_counter() - t

    @property
    def wall(self) -> List[float]:
        """Every kept step's wall time (s)."""
        return [w for b in self.blocks for w in b.wall]

    @property
    def thread_cpu(self) -> List[float]:
        """Every kept step's training-thread CPU (s)."""
        return [c for b in self.blocks for c in b.thread_cpu]

    def figures(self) -> Dict[str, float]:
        steps = sum(len(b.wall) for b in self.blocks)
        copies = [c for b in self.blocks for c in b.copy]
        return {
            "ms": 1e3 * statistics.median(self.wall),
            "mean_ms": 1e3 * sum(sum(b.wall) for b in self.blocks) / steps,
            "thread_cpu_ms": 1e3 * statistics.median(self.thread_cpu),
            "process_cpu_ms": 1e3 * sum(b.process_cpu for b in self.blocks) / steps,
            "copy_ms": 1e3 * statistics.median(copies) if copies else 0.0,
            "close_s": self.close_s,
            "handover_ms": 1e3 * self.handover_s / max(1, self.handover_steps),
        }


def run(configs: List[str], server: str, work: str, smd, rounds: int, block_steps: int,
        block_warmup: int, warmup: int, after_warmup: Optional[Callable[[], None]] = None,
        depth: int = 0, base=None, shared_ring_bytes: Optional[int] = None,
        quiet_costs: Sequence[str] = ()) -> Dict[str, Config]:
    """Runs ``configs`` (names above, "no hook" first) against the collector
    at ``server``, interleaved, on bench/mlp.py's Model(depth); returns each
    one's Config, closed, with its figures. ``after_warmup`` is called once
    every configuration has stepped (its writer, and the agent, started) and
    before the measured rounds. ``base``: the package `` @base``
    configurations run (bench/base_package.py). ``shared_ring_bytes``: the
    ``shared floor``'s ring (default: the size of the hook's ring).
    ``quiet_costs``: hooked configurations whose quiet_cost is measured after
    the rounds (``Config.quiet_cost_ms``)."""
    m = Model(depth)
    runs = {c: Config(c, m, server, work, smd, base, shared_ring_bytes) for c in configs}
    # As many copies of the memory a step works in as configurations, each
    # configuration's model stepping in each of them in turn (bench/mlp.py: a
    # copy's placement alone moved a step by up to 0.10 ms).
    storages = [Storage(m) for _ in configs]
    settle()
    for i, c in enumerate(configs):
        runs[c].block(warmup, keep=False, storage=storages[i])
    if after_warmup is not None:
        after_warmup()
    # Short blocks, the configurations alternating (their order reversed every
    # other round): the host's speed drifts by more than the effects measured
    # (±15 % of a step over minutes on this VM), and a round's difference
    # sees only the drift within its blocks.
    for r in range(rounds):
        order = configs if r % 2 == 0 else list(reversed(configs))
        for c in order:
            storage = storages[(configs.index(c) + r) % len(storages)]
            runs[c].block(block_steps, keep=True, storage=storage, warmup=block_warmup)
    for c in quiet_costs:
        runs[c].quiet_cost_ms = quiet_cost(runs[c], storages[configs.index(c)])
    for c in configs:
        runs[c].close()
    return runs


def per_round(runs: Dict[str, Config], c: str, k: int) -> List[float]:
    """Per round: c's figure k per step minus no hook's (ms); k: 1 wall, 2 process CPU."""
    return [1e3 * (x.per_step(k) - b.per_step(k)) for x, b in zip(runs[c].blocks, runs["no hook"].blocks)]


def overhead(runs: Dict[str, Config], c: str, k: int = 1) -> float:
    """c's overhead over no hook (ms a step): the median over rounds of the round's difference of means."""
    return statistics.median(per_round(runs, c, k))


def amortized_overhead(runs: Dict[str, Config], c: str) -> float:
    """c's wall overhead over no hook (ms a step) for a configuration that
    saves one step in many: the typical step's (the median over rounds of the
    round's difference of median steps, the steps that saved and the steps
    after them left out) plus saving_excess. Less noisy than the mean over
    rounds: the blocks with a saved step are a fraction of the rounds, and
    one slow block of either configuration moves a mean. The typical step's
    part compares two copies of the model, which differ by up to ±0.1 ms a
    step on this VM; quiet_cost measures it on one model."""
    diffs: List[float] = []
    for block, base_block in zip(runs[c].blocks, runs["no hook"].blocks):
        plain = [w for w, s in zip(block.wall, block.saved) if not s]
        if plain:
            diffs.append(statistics.median(plain) - statistics.median(base_block.wall))
    return 1e3 * statistics.median(diffs) + saving_excess(runs, c)


def saving_excess(runs: Dict[str, Config], c: str) -> float:
    """What c's saving steps and the steps after them (which end them) take
    over their block's median other step, spread over every step (ms a step,
    wall): measured within c's own blocks, on its own model."""
    excess = 0.0
    steps = 0
    for block in runs[c].blocks:
        steps += len(block.wall)
        plain = [w for w, s in zip(block.wall, block.saved) if not s]
        if plain:
            typical = statistics.median(plain)
            excess += sum(w - typical for w, s in zip(block.wall, block.saved) if s)
    return 1e3 * excess / max(1, steps)


def quiet_cost(config: Config, storage: Storage, pairs: int = 1000, steps: int = 1,
               max_untimed: int = 1000) -> float:
    """What tensorkeep's hook costs a step that saves nothing (ms, wall), on
    ``config``'s own model and ``storage``: ``pairs`` pairs of ``steps``-step
    blocks, the hook's root forward pre-hook attached in one block and
    detached in the other (which first alternating), every block within a
    quiet stretch (the saving steps, and the steps that end them, are run
    untimed in between, and the agent and collector finish their work before
    the next pair). Detached, the model steps as one without a hook: in a
    quiet stretch the hook has no other callback attached
    (Hook._sync_step_hooks). The median of the pairs' differences. Across
    two copies of the model the typical step differs by up to ±0.1 ms here
    (amortized_overhead's first part), the quiet step's cost is a few µs.
    ValueError when no quiet stretch of ``steps`` steps comes within
    ``max_untimed`` steps (a hook that saves every step has none)."""
    hook, m = config.hook, config.m
    m.use(storage)
    module = m.module

    def quiet_ahead() -> bool:
        # The next `steps` forwards take the quiet path of forward_pre_hook.
        ms = hook._mode_steps[hook._mode]
        return (
            ms + steps < hook._quiet_until
            and not (hook._wrote_step or hook._scalar_cache or hook._pending or hook._reduced)
            and hook.prepared_collections
        )

    def block() -> float:
        t = time.perf_counter()
        for _ in range(steps):
            m.step()
        return (time.perf_counter() - t) / steps

    diffs: List[float] = []
    for i in range(pairs):
        moved = 0
        while not quiet_ahead():
            if moved == max_untimed:
                raise ValueError(f"no stretch of {steps} steps that save nothing within {max_untimed} steps: "
                                 "quiet_cost measures a hook that saves one step in many")
            m.step()
            moved += 1
        if moved:
            config.drain()
        attached = detached = 0.0
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            if on:
                attached = block()
            else:
                handle = hook._handles.pop()  # the root pre-hook (Hook.register_module)
                handle.remove()
                try:
                    detached = block()
                finally:
                    hook._handles.append(module.register_forward_pre_hook(hook.forward_pre_hook))
        diffs.append(attached - detached)
    return 1e3 * statistics.median(diffs)


def mean_overhead(runs: Dict[str, Config], c: str, k: int = 1) -> float:
    """The mean over rounds instead: what a configuration that saves one step
    in many ("agent 100") costs on average, which the median would hide."""
    return statistics.fmean(per_round(runs, c, k))
