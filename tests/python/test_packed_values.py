"""Tensor.values() through packed GetValues messages against a real collector:
small values that share worker, mode, dtype and shape come back as one byte
string per message (TensorValue.packed_steps) and are split into independent,
writable arrays bit for bit equal to what was written; anything that breaks a
run (another shape, mode or worker, a value too large to pack) still reads
right. Also the wire form itself, for old clients (batched) and new (packed)."""

import grpc
import numpy as np
import pytest

from tensorkeep import Writer, _dtypes, modes
from tensorkeep._channel import pb, pb_grpc
from tensorkeep.trials import create_trial

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]
SHAPES = [(), (0,), (0, 3), (1,), (7,), (2, 3, 4)]
STEPS = 40


def sample(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith("float"):
        a = (rng.standard_normal(shape) * 10).astype(dtype)
        if a.size:  # bit patterns that a float conversion would not keep
            a.reshape(-1)[0] = np.array(np.nan, dtype=dtype) if a.size > 1 else -0.0
        return a
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def assert_same(got, want, what):
    assert isinstance(got, np.ndarray), what
    assert got.dtype == want.dtype and got.shape == want.shape, what
    assert got.tobytes() == np.ascontiguousarray(want).tobytes(), what  # bit for bit
    assert got.flags.writeable and got.flags.c_contiguous, what


def assert_independent(arrays):
    """Each array owns its memory: writing one changes no other."""
    arrays = [a for a in arrays if a.size]
    for a in arrays:
        assert a.base is None or not isinstance(a.base, np.ndarray) or a.base.size == a.size
    for i in range(1, len(arrays)):
        assert not np.shares_memory(arrays[i - 1], arrays[i])
    if len(arrays) >= 2:
        before = arrays[1].copy()
        arrays[0].reshape(-1)[...] = arrays[0].reshape(-1)[::-1]
        assert arrays[1].tobytes() == before.tobytes()


def test_every_dtype_and_shape_over_many_steps(trial_url):
    cases = {f"{d}/{i}": (d, s) for d in DTYPES for i, s in enumerate(SHAPES)}
    with Writer(trial_url) as w:
        for step in range(STEPS):
            for name, (d, s) in cases.items():
                w.write_tensor(name, sample(d, s, step), step=step)
    t = create_trial(trial_url)
    for name, (d, s) in cases.items():
        vs = t.tensor(name).values()
        assert sorted(vs) == list(range(STEPS)), name
        for step, v in vs.items():
            assert_same(v, sample(d, s, step), f"{name} at {step}")
        assert_independent([vs[step] for step in range(STEPS)])


def test_runs_broken_by_shape_mode_and_size(trial_url):
    big = np.random.default_rng(1).standard_normal((1100, 1000)).astype(np.float32)  # 4.4 MB: chunked
    want = {}
    with Writer(trial_url) as w:
        for step in range(30):
            mode = modes.EVAL if step % 7 == 3 else modes.TRAIN
            if step == 11:
                a = big
            elif step % 5 == 4:
                a = np.arange(step + 1, dtype=np.float32)  # another shape
            else:
                a = np.full((3, 2), step, dtype=np.float32)
            w.write_tensor("mixed", a, step=step, mode=mode)
            want[step] = (mode, a)
    t = create_trial(trial_url)
    vs = t.tensor("mixed").values()
    assert sorted(vs) == sorted(want)
    for step, (_, a) in want.items():
        assert_same(vs[step], a, f"step {step}")
    # Mode steps: keyed as steps(mode) says, each value as value() (one
    # GetValue call, never packed) reads it and in the order written.
    for mode in (modes.TRAIN, modes.EVAL):
        expect = [a for _, (m, a) in sorted(want.items()) if m == mode]
        got = t.tensor("mixed").values(mode=mode)
        assert sorted(got) == t.tensor("mixed").steps(mode) and len(got) == len(expect)
        for ms, a in zip(sorted(got), expect):
            assert_same(got[ms], a, f"{mode} mode step {ms}")
            assert_same(got[ms], t.tensor("mixed").value(ms, mode=mode), f"{mode} mode step {ms}")


def test_more_values_than_one_message_and_range_steps(trial_url):
    # 600 x 4 KB: more than a 1 MB message holds.
    steps = 600
    with Writer(trial_url) as w:
        for step in range(steps):
            w.write_tensor("w", np.full(1000, step, dtype=np.float32) + np.arange(1000, dtype=np.float32), step=step)
    expect = {s: np.full(1000, s, dtype=np.float32) + np.arange(1000, dtype=np.float32) for s in range(steps)}
    vs = create_trial(trial_url).tensor("w").values()
    assert sorted(vs) == list(range(steps))
    for s, v in vs.items():
        assert_same(v, expect[s], f"step {s}")
    assert_independent(list(vs.values())[250:260])
    ranged = create_trial(trial_url, range_steps=(100, 357)).tensor("w").values()
    assert sorted(ranged) == list(range(100, 357))
    for s, v in ranged.items():
        assert_same(v, expect[s], f"ranged step {s}")


def test_workers_are_not_packed_together(trial_url):
    with Writer(trial_url, worker="worker_0", num_workers=2) as w0, Writer(
        trial_url, worker="worker_1", num_workers=2
    ) as w1:
        for step in range(20):
            w0.write_tensor("t", np.full(4, step, dtype=np.int32), step=step)
            if step % 2:
                w1.write_tensor("t", np.full(4, -step, dtype=np.int32), step=step)
    t = create_trial(trial_url)
    for worker, sign, steps in (("worker_0", 1, range(20)), ("worker_1", -1, range(1, 20, 2))):
        vs = t.tensor("t").values(worker=worker)
        assert sorted(vs) == list(steps)
        for s, v in vs.items():
            assert_same(v, np.full(4, sign * s, dtype=np.int32), f"{worker} step {s}")


def _raw_values(server, trial, tensor, packed):
    with grpc.insecure_channel(server) as ch:
        stub = pb_grpc.TensorKeepStub(ch)
        return list(stub.GetValues(pb.TensorValuesRequest(trial=trial, tensor=tensor, packed=packed)))


def test_wire_form_packed_and_batched(server, trial_url, trial_name):
    with Writer(trial_url) as w:
        for step in range(300):
            w.write_tensor("v", np.full(1000, step, dtype=np.float32), step=step)
    target = trial_url.split("//", 1)[1].split("/", 1)[0]
    # An old client (no `packed`): a message per value, in `batched`.
    old = _raw_values(target, trial_name, "v", packed=False)
    assert all(not m.packed_steps for m in old)
    assert sum(1 + len(m.batched) for m in old) == 300
    # A new one: the values' bytes one after another in `data`.
    new = _raw_values(target, trial_name, "v", packed=True)
    assert len(new) >= 2  # 1.2 MB: more than one message
    steps = []
    for m in new:
        assert m.header and not m.batched
        assert len(m.packed_steps) == len(m.packed_mode_steps)
        n = 1 + len(m.packed_steps)
        assert m.value_size == 4000 and len(m.data) == n * 4000
        steps += [m.step] + list(m.packed_steps)
        for i, s in enumerate([m.step] + list(m.packed_steps)):
            assert m.data[i * 4000 : (i + 1) * 4000] == np.full(1000, s, dtype=np.float32).tobytes()
    assert steps == list(range(300))


def test_split_wire_checks_sizes_and_widens_bfloat16():
    a = np.arange(12, dtype="<i2")
    parts = _dtypes.split_wire(_dtypes.INT16, (2, 3), a.tobytes(), 2)
    assert [p.tolist() for p in parts] == [[[0, 1, 2], [3, 4, 5]], [[6, 7, 8], [9, 10, 11]]]
    assert _dtypes.split_wire(_dtypes.INT16, (2, 3), b"", 0) == []
    empty = _dtypes.split_wire(_dtypes.FLOAT32, (0, 3), b"", 5)
    assert len(empty) == 5 and all(e.shape == (0, 3) and e.dtype == np.float32 for e in empty)
    with pytest.raises(ValueError):
        _dtypes.split_wire(_dtypes.INT16, (2, 3), a.tobytes()[:-2], 2)
    with pytest.raises(ValueError):
        _dtypes.split_wire(_dtypes.INT16, (2, 2), a.tobytes(), 2)
    with pytest.raises(ValueError):
        _dtypes.split_wire(99, (1,), b"\0\0", 2)
    # bfloat16: each 16-bit pattern is the top half of the float32 it stands for.
    f = np.array([1.0, -2.5, 3.140625, np.inf, 0.0, -0.0], dtype="<f4")
    bits = (f.view("<u4") >> 16).astype("<u2")
    got = _dtypes.split_wire(_dtypes.BFLOAT16, (3,), bits.tobytes(), 2)
    assert all(g.dtype == np.float32 and g.shape == (3,) for g in got)
    assert got[0].tobytes() == f[:3].tobytes() and got[1].tobytes() == f[3:].tobytes()
    assert not np.shares_memory(got[0], got[1])


def test_bfloat16_values_over_many_steps(trial_url):
    torch = pytest.importorskip("torch", reason="torch is needed to write bfloat16 tensors")
    want = {}
    with Writer(trial_url) as w:
        for step in range(25):
            x = (torch.arange(6, dtype=torch.float32).reshape(2, 3) - step) * 1.5 ** step
            b = x.to(torch.bfloat16)
            w.write_tensor("bf", b, step=step)
            want[step] = b.float().numpy()
    vs = create_trial(trial_url).tensor("bf").values()
    assert sorted(vs) == list(range(25))
    for s, v in vs.items():
        assert_same(v, want[s], f"step {s}")
    assert_independent(list(vs.values()))
