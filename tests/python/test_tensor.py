"""Tensor against a real collector: values of every dtype, values(), reductions and
histograms checked against numpy, workers, prev_steps, smdebug's exceptions."""

import numpy as np
import pytest

import tkdata
from tensorkeep import Writer, modes
from tensorkeep.exceptions import (
    InvalidWorker,
    NoMoreData,
    StepNotYetAvailable,
    StepUnavailable,
    TensorUnavailableForStep,
)
from tensorkeep.trials import create_trial

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]


@pytest.fixture
def job(trial_url):
    tkdata.write_job(trial_url)
    return create_trial(trial_url)


def sample(dtype, shape, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith("float"):
        return (rng.standard_normal(shape) * 10).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def test_values_round_trip_for_every_dtype_and_shape(trial_url):
    shapes = [(), (0,), (0, 3), (1,), (5,), (2, 3, 4)]
    cases = {f"{d}/{i}": sample(d, s, i) for d in DTYPES for i, s in enumerate(shapes)}
    with Writer(trial_url) as w:
        for name, a in cases.items():
            w.write_tensor(name, a, step=0)
        w.write_tensor("py/float", 1.5, step=0)
        w.write_tensor("py/int", -3, step=0)
        w.write_tensor("py/bool", True, step=0)
        w.write_tensor("np/transposed", np.arange(12, dtype=np.int16).reshape(3, 4).T, step=0)
        w.write_tensor("np/bigendian", np.arange(6, dtype=">f8"), step=0)
    t = create_trial(trial_url)
    for name, a in cases.items():
        v = t.tensor(name).value(0)
        assert v.dtype == a.dtype and v.shape == a.shape, name
        assert np.array_equal(v, a), name
        assert v.flags.writeable
    assert t.tensor("py/float").value(0).dtype == np.float32 and t.tensor("py/float").value(0) == 1.5
    assert t.tensor("py/int").value(0).dtype == np.int64 and t.tensor("py/int").value(0) == -3
    assert t.tensor("py/bool").value(0).dtype == np.bool_ and t.tensor("py/bool").value(0)
    assert np.array_equal(t.tensor("np/transposed").value(0), np.arange(12, dtype=np.int16).reshape(3, 4).T)
    assert np.array_equal(t.tensor("np/bigendian").value(0), np.arange(6, dtype=np.float64))


def test_large_value_round_trips(trial_url):
    big = np.random.default_rng(1).standard_normal((1500, 2000)).astype(np.float32)  # 12 MB: chunked
    with Writer(trial_url) as w:
        w.write_tensor("big", big, step=0)
        w.write_tensor("big", big[::-1], step=1)
    t = create_trial(trial_url)
    assert np.array_equal(t.tensor("big").value(0), big)
    vs = t.tensor("big").values()
    assert np.array_equal(vs[0], big) and np.array_equal(vs[1], big[::-1])


def test_value_and_values(job):
    w = job.tensor("layer1.weight")
    for g, mode, ms in tkdata.MODES:
        expect = tkdata.value("layer1.weight", g)
        assert np.array_equal(w.value(g), expect)
        assert np.array_equal(w.value(ms, mode=mode), expect)
    vs = w.values()
    assert sorted(vs) == list(range(10))
    assert all(np.array_equal(vs[g], tkdata.value("layer1.weight", g)) for g in vs)
    train = w.values(mode=modes.TRAIN)
    assert sorted(train) == [0, 1, 2, 3, 4, 5, 6]  # keyed by mode step
    assert np.array_equal(train[5], tkdata.value("layer1.weight", 7))
    assert sorted(w.values(modes.EVAL)) == [0, 1]
    assert np.array_equal(w.values(worker="worker_0")[3], tkdata.value("layer1.weight", 3))


def test_steps_of_a_tensor(job):
    g = job.tensor("gradient/layer1.weight")
    assert g.steps() == [0, 1, 2, 3, 4, 7, 8]
    assert g.steps(modes.TRAIN) == [0, 1, 2, 3, 4, 5, 6]
    assert g.steps(modes.EVAL) == []
    assert job.tensor("acts").steps() == [0, 1, 2, 3, 4]


REDUCTIONS = {
    "min": np.min,
    "max": np.max,
    "mean": np.mean,
    "std": np.std,
    "variance": np.var,
    "sum": np.sum,
    "prod": np.prod,
    "l1": lambda a: np.sum(np.abs(a)),
    "l2": lambda a: np.sqrt(np.sum(np.square(a))),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16", "uint8", "bool"])
def test_reductions_match_numpy(trial_url, dtype):
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((4, 5)) + 0.1).astype(dtype) if dtype.startswith("float") else sample(dtype, (4, 5), 3)
    if dtype == "int32":
        a = rng.integers(-5, 6, size=(4, 5)).astype(np.int32)
    if dtype == "uint8":
        a = rng.integers(0, 4, size=(4, 5)).astype(np.uint8)
    with Writer(trial_url) as w:
        w.write_tensor("t", a, step=0)
    t = create_trial(trial_url).tensor("t")
    ref = a.astype(np.float64)  # the collector reduces in double precision
    for name, fn in REDUCTIONS.items():
        for use_abs in (False, True):
            expected = float(fn(np.abs(ref) if use_abs else ref))
            got = t.reduction_value(0, name, abs=use_abs)
            assert isinstance(got, float)
            assert got == pytest.approx(expected, rel=1e-6, abs=1e-9), (name, use_abs)
    assert t.reduction_values(0) == {}  # nothing was saved: nothing computed


def test_saved_reductions_win_and_reduction_only_tensors(trial_url):
    a = np.arange(6, dtype=np.float32)
    with Writer(trial_url) as w:
        w.write_tensor("both", a, step=0, reductions={("mean", False): 42.0})
        w.write_tensor("only", None, step=0, reductions={("mean", False): 0.5, ("max", True): 2.0})
    t = create_trial(trial_url)
    both, only = t.tensor("both"), t.tensor("only")
    assert both.reduction_value(0, "mean") == 42.0  # the saved one
    assert both.reduction_value(0, "max") == 5.0  # computed
    assert both.reduction_values(0) == {("mean", False): 42.0}
    assert only.reduction_value(0, "mean") == 0.5
    assert only.reduction_value(0, "max", abs=True) == 2.0
    assert only.reduction_values(0) == {("mean", False): 0.5, ("max", True): 2.0}
    with pytest.raises(TensorUnavailableForStep):
        only.reduction_value(0, "min")
    with pytest.raises(TensorUnavailableForStep):
        only.value(0)
    with pytest.raises(ValueError):
        both.reduction_value(0, "median")


def test_histogram_matches_numpy(trial_url):
    a = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    with Writer(trial_url) as w:
        w.write_tensor("h", a, step=0)
    t = create_trial(trial_url).tensor("h")
    edges, counts = t.histogram(0)
    np_counts, np_edges = np.histogram(a.astype(np.float64), bins=30)
    assert edges.shape == (31,) and counts.shape == (30,)
    np.testing.assert_allclose(edges, np_edges, rtol=1e-6)
    assert counts.sum() == 1000
    assert np.abs(counts - np_counts).sum() <= 2  # values on an edge may fall either side of it
    edges, counts = t.histogram(0, bins=4, range=(-1.0, 1.0))
    np_counts, np_edges = np.histogram(a.astype(np.float64), bins=4, range=(-1.0, 1.0))
    np.testing.assert_allclose(edges, np_edges)
    assert list(counts) == list(np_counts)
    with pytest.raises(ValueError):
        t.histogram(0, bins=0)


def test_workers_and_prev_steps(job):
    w = job.tensor("layer1.weight")
    assert w.workers(3) == ["worker_0"]
    assert w.workers(1, mode=modes.EVAL) == ["worker_0"]
    assert w.prev_steps(5, 3) == [3, 4, 5]
    assert w.prev_steps(1, 5) == [0, 1]
    assert w.prev_steps(0, 1) == [0]
    g = job.tensor("gradient/layer1.weight")
    assert g.prev_steps(6, 3) == [2, 3, 4]  # the last saved steps <= 6
    assert g.prev_steps(6, 2, mode=modes.TRAIN) == [5, 6]


def test_smdebug_exceptions_in_smdebug_situations(job):
    g = job.tensor("gradient/layer1.weight")
    with pytest.raises(TensorUnavailableForStep) as ei:
        g.value(5)  # an EVAL step: the gradient was not saved there
    assert (ei.value.tname, ei.value.step) == ("gradient/layer1.weight", 5)
    with pytest.raises(TensorUnavailableForStep):
        g.value(0, mode=modes.EVAL)
    with pytest.raises(InvalidWorker) as ei:
        job.tensor("loss").value(0, worker="worker_9")
    assert ei.value.worker == "worker_9"
    with pytest.raises((StepUnavailable, NoMoreData)):
        job.tensor("loss").value(50)  # beyond the end of an ended trial


def test_step_exceptions_of_a_running_trial(trial_url):
    w = Writer(trial_url)
    for s in (0, 1, 3):  # step 2 is never saved
        w.write_tensor("x", np.zeros(1, np.float32), step=s)
        w.end_step(s)
    w.flush()
    x = create_trial(trial_url).tensor("x")
    with pytest.raises(StepUnavailable) as ei:
        x.value(2)
    assert ei.value.step == 2
    with pytest.raises(StepNotYetAvailable) as ei:
        x.value(10)
    assert ei.value.step == 10
    w.close()
