"""bench/agent_bench.py in small (issue 16's measurement): every configuration
runs and reports, the hand-over is timed where it happens, and ``--base``
runs the client of another commit beside the current one."""

import json
import math
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from conftest import DEFAULT_BIN_DIR  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))
import agent_bench  # noqa: E402


def _git_head():
    """The checkout's HEAD, or None (e.g. a source tarball) with the reason printed."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "HEAD"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"no git: {e}")
        return None
    if out.returncode != 0:
        print(f"not a git checkout: {out.stderr.strip()}")
        return None
    return out.stdout.strip()


def test_configurations_report_and_base_runs_the_other_commit(tmp_path):
    bin_dir = os.environ.get("TK_BIN_DIR", DEFAULT_BIN_DIR)
    for b in ("tensorkeep-server", "tensorkeep-agent"):
        if not os.path.exists(os.path.join(bin_dir, b)):
            pytest.skip(f"{b} is not built in {bin_dir}")
    head = _git_head()
    configs = ["no hook", "floor", "shared floor", "minimal hook", "agent", "agent 100", "agent losses", "dry run",
               "hand-over"]
    cmd = [sys.executable, str(BENCH / "agent_bench.py"), "--bin-dir", bin_dir, "--rounds", "2",
           "--block-steps", "4", "--block-warmup", "1", "--warmup", "2", "--peers", "", "--depth", "3"]
    if head is not None:
        configs += ["agent @base"]
        cmd += ["--base", head]
    else:
        print("skipping the --base part: no git revision to load")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run(cmd + ["--configs", ",".join(configs)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    for c in configs:
        key = agent_bench.json_key(c)
        assert math.isfinite(figures[f"{key}_process_cpu_ms"]) and figures[f"{key}_process_cpu_ms"] > 0, c
        assert any(line.startswith(c + " ") for line in lines), f"{c} has no row:\n{out.stdout}"
    # The copy of 8 parameters and gradients, and the hand-over's calls timed
    # in place (0 if the hook went past the wrapped stream methods).
    assert figures["snapshot_floor_ms"] > 0
    assert figures["handover_thread_cpu_ms"] > 0
    assert any(line.startswith("minimal hook: process CPU over no hook / floor = ") for line in lines)
    # The shared floor's copy, into a ring of the hook's size (32 MiB by default).
    assert figures["shared_floor_copy_ms"] > 0 and figures["shared_floor_ring_mib"] == 32
    assert any(line.startswith("shared floor: the copy into the shared ring (32 MiB) ") for line in lines)
    assert any(line.startswith("agent: process CPU over no hook / the shared floor's = ") for line in lines)
    # save_interval=100 on its own model: the quiet step's cost and the saving steps' excess.
    assert math.isfinite(figures["agent_100_quiet_ms"]) and figures["agent_100_saving_excess_ms"] >= 0
    assert figures["agent_100_same_model_overhead_ms"] == pytest.approx(
        figures["agent_100_quiet_ms"] + figures["agent_100_saving_excess_ms"])
    assert any(line.startswith("agent 100: ") and "on its own model" in line for line in lines)
    # The other CPU's processes: the agent and the collector did the pushing.
    assert figures["agent_cpu_s"] > 0 and figures["collector_cpu_s"] > 0
    assert figures["agent_faults"] >= 0 and figures["collector_faults"] >= 0
    if head is not None:
        assert math.isfinite(figures["agent_minus_base_cpu_ms"])
        assert any(line.startswith("agent - agent @base") for line in lines)
    # Nothing left behind in the temporary directory the bench used.
    assert [p.name for p in tmp_path.iterdir()] == []


def test_base_package_is_a_separate_copy(tmp_path):
    head = _git_head()
    if head is None:
        pytest.skip("not a git checkout: no revision to load")
    sys.path.insert(0, str(BENCH))
    try:
        import base_package
    finally:
        sys.path.remove(str(BENCH))
    import tensorkeep.pytorch

    base = base_package.load(head, str(tmp_path))
    try:
        import importlib

        hook = importlib.import_module("tensorkeep_base.pytorch.hook")
        writer = importlib.import_module("tensorkeep_base.writer")
        assert pathlib.Path(hook.__file__).is_relative_to(tmp_path)
        assert hook.Hook is not tensorkeep.pytorch.Hook
        # Its own modules throughout, the generated protobuf ones excepted.
        assert writer.AgentStream.__module__ == "tensorkeep_base._handover"
        names = importlib.import_module("tensorkeep_base._names")
        assert names._limits.__name__ == "tensorkeep._proto.limits_pb2"
        assert base.__name__ == "tensorkeep_base"
    finally:
        for name in [n for n in sys.modules if n == "tensorkeep_base" or n.startswith("tensorkeep_base.")]:
            del sys.modules[name]
        sys.path[:] = [p for p in sys.path if not p.startswith(str(tmp_path))]


def test_process_bench_runs_each_configuration_in_its_own_process(tmp_path):
    """bench/process_bench.py in small: every configuration reports from a
    process of its own, the unpinned one with glibc's thresholds left alone,
    and nothing is left in the temporary directory."""
    bin_dir = os.environ.get("TK_BIN_DIR", DEFAULT_BIN_DIR)
    for b in ("tensorkeep-server", "tensorkeep-agent"):
        if not os.path.exists(os.path.join(bin_dir, b)):
            pytest.skip(f"{b} is not built in {bin_dir}")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run([sys.executable, str(BENCH / "process_bench.py"), "--bin-dir", bin_dir, "--rounds", "2",
                          "--steps", "30", "--warmup", "2"], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    import process_bench

    for c in process_bench.CONFIGS:
        key = agent_bench.json_key(c)
        assert math.isfinite(figures[f"{key}_cpu_ms"]) and figures[f"{key}_cpu_ms"] > 0, c
        assert figures[f"{key}_faults"] >= 0, c
        assert any(line.startswith(c + " ") for line in lines), f"{c} has no row:\n{out.stdout}"
    assert figures["no_hook_cpu_over_no_hook_ms"] == 0
    assert math.isfinite(figures["agent_cpu_over_no_hook_pinned_ms"])
    # Each round ran each configuration once, in a process of its own.
    assert out.stderr.count(" agent unpinned: ") == 2 and out.stderr.count(" no hook: ") == 2
    assert [p.name for p in tmp_path.iterdir()] == []


def test_the_minimal_hook_copies_each_saved_tensor_where_the_hook_takes_it():
    """The ``minimal hook`` configuration, the least any Python hook costs, does
    the copies it stands for: after a step its buffers hold the parameters as
    the step's forward found them, the step's gradients and its loss."""
    import numpy as np
    import torch

    import interleave
    from mlp import Model

    m = Model(depth=2)
    config = interleave.Config("minimal hook", m, "127.0.0.1:1", "/nonexistent", None)
    model = config.m
    before = [p.detach().clone() for p in model.params]
    loss = model.step()
    weights, grads = config.buffers[0::2], config.buffers[1::2]
    assert len(weights) == len(model.params) == 6
    for b, p0, p in zip(weights, before, model.params):
        np.testing.assert_array_equal(b, p0.numpy())
        assert not np.array_equal(b, p.detach().numpy())  # the optimizer moved it since
    for b, p in zip(grads, model.params):
        np.testing.assert_array_equal(b, p.grad.numpy())
        assert np.abs(b).sum() > 0
    assert config.loss_buffer == np.float32(loss.item())
    # A second step overwrites them with its own.
    before = [p.detach().clone() for p in model.params]
    model.x = torch.randn_like(model.x)
    model.step()
    for b, p0 in zip(weights, before):
        np.testing.assert_array_equal(b, p0.numpy())
    for b, p in zip(grads, model.params):
        np.testing.assert_array_equal(b, p.grad.numpy())


def test_the_shared_floor_hands_each_step_to_a_reader_on_another_process():
    """The ``shared floor`` (bench/shared_ring.py) does the hand-over it
    stands for: another process copies each step out of the shared ring,
    byte for byte, also once the ring has wrapped several times; a step that
    does not fit is refused; closing stops the reader."""
    import numpy as np

    from shared_ring import SharedRing

    rng = np.random.default_rng(7)
    ring = SharedRing(64 << 10, None)
    try:
        with pytest.raises(ValueError, match="does not fit"):
            ring.put([np.zeros(65 << 10, np.uint8)])
        offsets = set()
        for step in range(40):
            arrays = [rng.standard_normal((n,)).astype(np.float32) for n in (1000 + step, 37, 3000)]
            arrays.append(np.float32(step).reshape(()))
            ring.put(arrays)
            ring.drain()
            offsets.add(ring.last[0])
            assert ring.taken() == b"".join(a.tobytes() for a in arrays), step
        # ~16 KB a step in 64 KiB: the ring wrapped, and steps started at several offsets.
        assert ring.pos > 8 * (64 << 10) and len(offsets) > 3
    finally:
        ring.close()
    assert ring.reader.returncode == 0


def _dry_hook_config(save_interval: int):
    """What interleave.quiet_cost uses of a configuration (its hook, model and
    drain), with a dry-run hook (no agent) on a small model."""
    import types

    import torch
    import tensorkeep.pytorch as tkp
    from tensorkeep import modes
    from mlp import Model

    torch.set_num_threads(1)
    m = Model(depth=2)
    hook = tkp.Hook("tensorkeep://127.0.0.1:1/quiet-cost", save_config=tkp.SaveConfig(save_interval=save_interval),
                    include_collections=["weights", "gradients", "losses"], dry_run=True)
    hook.register_module(m.module)
    hook.register_loss(m.loss_fn)
    hook.set_mode(modes.TRAIN)
    return types.SimpleNamespace(hook=hook, m=m, drain=lambda: None)


def test_quiet_cost_measures_what_the_hook_adds_to_a_step_that_saves_nothing():
    """interleave.quiet_cost, the same-model half of agent_bench's
    save_interval=100 figure: a pre-hook made 0.3 ms slower reads ~0.3 ms;
    the hook as it is reads a few µs (its quiet path), not the ±0.1 ms by
    which two copies of a model differ."""
    import time

    import interleave
    from mlp import Storage

    config = _dry_hook_config(100)
    hook, module = config.hook, config.m.module
    plain = interleave.quiet_cost(config, Storage(config.m), pairs=300)
    assert abs(plain) < 0.05, f"the quiet step reads {plain:.4f} ms"
    real = hook.forward_pre_hook

    def slow(mod, inputs):
        end = time.perf_counter() + 3e-4
        while time.perf_counter() < end:
            pass
        return real(mod, inputs)

    hook._handles.pop().remove()
    hook.forward_pre_hook = slow
    hook._handles.append(module.register_forward_pre_hook(hook.forward_pre_hook))
    slowed = interleave.quiet_cost(config, Storage(config.m), pairs=300)
    assert 0.25 < slowed - plain < 0.4, f"0.3 ms more in the pre-hook read {slowed - plain:.4f} ms"
    # quiet_cost leaves the hook's root pre-hook registered again, once.
    assert len(hook._handles) == 1 and len(module._forward_pre_hooks) == 1
    hook.close()


def test_quiet_cost_refuses_a_hook_that_saves_every_step():
    import interleave
    from mlp import Storage

    config = _dry_hook_config(1)
    with pytest.raises(ValueError, match="saves one step in many"):
        interleave.quiet_cost(config, Storage(config.m), pairs=2, max_untimed=20)
    config.hook.close()
