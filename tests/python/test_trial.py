"""Trial's listings against a real collector: steps, modes, step mappings, tensor
names, collections, workers, range_steps, no_refresh/refresh, a trial not yet written."""

import numpy as np
import pytest

import tkdata
from tensorkeep import Writer, modes
from tensorkeep.analysis import no_refresh, refresh
from tensorkeep.collection import Collection
from tensorkeep.exceptions import NoMoreData, StepUnavailable, TensorUnavailable
from tensorkeep.trials import StepState, create_trial


@pytest.fixture
def job(trial_url):
    tkdata.write_job(trial_url)
    with create_trial(trial_url) as t:
        yield t


def test_steps_global_and_per_mode(job):
    assert job.steps() == list(range(10))
    assert job.steps(mode=modes.GLOBAL) == list(range(10))
    assert job.steps(mode=modes.TRAIN) == [0, 1, 2, 3, 4, 5, 6]
    assert job.steps(modes.EVAL) == [0, 1]
    assert job.steps(modes.PREDICT) == [0]
    assert job.steps(show_incomplete_steps=True) == list(range(10))


def test_modes_and_step_mappings(job):
    assert set(job.modes()) - {modes.GLOBAL} == {modes.TRAIN, modes.EVAL, modes.PREDICT}
    for g, mode, ms in tkdata.MODES:
        assert job.mode(g) == mode
        assert job.mode_step(g) == ms
        assert job.global_step(mode, ms) == g
    assert job.global_step(modes.GLOBAL, 7) == 7


def test_mapping_an_unsaved_step_is_none(job):
    # smdebug answers None for a step it has not seen (here beyond the end).
    assert job.mode(100) is None and job.mode_step(100) is None
    assert job.mode_modestep(100) == (None, None)
    assert job.global_step(modes.EVAL, 9) is None


def test_tensor_names(job):
    assert job.tensor_names() == tkdata.NAMES
    at5 = ["acts", "gradient/layer1.weight", "layer1.bias", "layer1.weight", "loss"]
    assert job.tensor_names(step=5) == [n for n in at5 if n not in ("acts", "gradient/layer1.weight")]
    # A step with a mode is a mode step: EVAL step 0 is global step 5.
    assert job.tensor_names(step=0, mode=modes.EVAL) == job.tensor_names(step=5)
    assert job.tensor_names(step=0, mode=modes.TRAIN) == at5
    assert job.tensor_names(mode=modes.EVAL) == ["layer1.bias", "layer1.weight", "loss"]
    assert job.tensor_names(regex="layer1") == ["gradient/layer1.weight", "layer1.bias", "layer1.weight"]
    assert job.tensor_names(regex=["^loss$", "bias"]) == ["layer1.bias", "loss"]
    assert job.tensor_names(regex="^layer1\\.w") == ["layer1.weight"]
    assert job.tensor_names(collection="weights") == ["layer1.weight"]
    assert job.tensor_names(collection=job.collection("gradients")) == ["gradient/layer1.weight"]
    assert job.tensor_names(step=5, mode=modes.GLOBAL, regex="grad") == []
    with pytest.raises(ValueError):
        job.tensor_names(regex="a", collection="weights")


def test_tensor_and_has_tensor(job):
    assert job.has_tensor("loss")
    assert job.tensor("loss").name == "loss"
    assert not job.has_tensor("nope")
    with pytest.raises(TensorUnavailable) as ei:
        job.tensor("nope")
    assert ei.value.tname == "nope"


def test_workers_and_collections(job):
    assert job.workers() == ["worker_0"]
    cs = job.collections()
    for name, tname in [("weights", "layer1.weight"), ("biases", "layer1.bias"), ("losses", "loss"),
                        ("gradients", "gradient/layer1.weight"), ("activations", "acts")]:
        assert isinstance(cs[name], Collection)
        assert cs[name].name == name and tname in cs[name].tensor_names
        assert job.collection(name).tensor_names == cs[name].tensor_names
    # smdebug makes an unknown collection on demand: empty, and the same object each time.
    made = job.collection("no-such-collection")
    assert made.name == "no-such-collection" and made.tensor_names == set()
    assert job.collection("no-such-collection") is made


def test_name_defaults_to_the_trial(trial_url, trial_name):
    assert create_trial(trial_url).name == trial_name
    assert create_trial(trial_url, name="resnet_training_run").name == "resnet_training_run"


def test_bare_name_with_server_from_environment(server, trial_name, monkeypatch):
    tkdata.write_job(server.url(trial_name))
    monkeypatch.setenv("TENSORKEEP_SERVER", server.address)
    assert create_trial(trial_name).steps() == list(range(10))


@pytest.mark.parametrize(
    "rng,expected",
    [((3, 7), [3, 4, 5, 6]), ((None, 4), [0, 1, 2, 3]), ((8, None), [8, 9]), ((100, None), [])],
)
def test_range_steps(trial_url, rng, expected):
    tkdata.write_job(trial_url)
    t = create_trial(trial_url, range_steps=rng)
    assert t.steps() == expected
    if not expected:  # smdebug loads no step out of range: no tensor either
        assert t.tensor_names() == []
        with pytest.raises(TensorUnavailable):
            t.tensor("layer1.weight")
        return
    assert t.tensor("layer1.weight").steps() == expected
    assert sorted(t.tensor("layer1.weight").values()) == expected
    train = [ms for g, m, ms in tkdata.MODES if m == modes.TRAIN and g in expected]
    assert t.steps(modes.TRAIN) == train
    assert sorted(t.tensor("loss").values(mode=modes.TRAIN)) == train
    if expected:
        assert t.tensor("loss").prev_steps(expected[-1], 2) == expected[-2:]


def test_trial_not_yet_written_is_empty_not_an_error(trial_url):
    t = create_trial(trial_url)
    assert t.steps() == [] and t.steps(modes.TRAIN, show_incomplete_steps=True) == []
    assert t.tensor_names() == [] and t.tensor_names(regex="x") == []
    assert t.workers() == [] and t.collections() == {} and t.modes() == []
    assert t.rule_statuses() == []
    assert t.has_passed_step(0) == StepState.NOT_YET_AVAILABLE
    assert not t.has_tensor("x")
    with pytest.raises(TensorUnavailable):
        t.tensor("x")
    assert t.collection("weights").tensor_names == set()  # made on demand, as smdebug
    # ... and it sees the job once the job writes.
    with Writer(trial_url) as w:
        w.write_tensor("x", np.ones(2, np.float32), step=0)
    assert t.steps() == [0] and t.tensor_names() == ["x"]


def _write_steps(w, steps):
    for s in steps:
        w.write_tensor("x", np.full(2, s, np.float32), step=s)
        w.end_step(s)
    w.flush()


def test_no_refresh_freezes_listings_and_refresh_unfreezes(trial_url):
    w = Writer(trial_url)
    _write_steps(w, [0, 1, 2])
    t = create_trial(trial_url)
    assert t.steps() == [0, 1, 2]
    x = t.tensor("x")
    with no_refresh(t):
        assert t.steps() == [0, 1, 2]
        assert x.steps() == [0, 1, 2]
        names = t.tensor_names()
        _write_steps(w, [3, 4])
        w.write_tensor("y", np.ones(1, np.float32), step=5)
        w.end_step(5)
        w.flush()
        assert t.steps() == [0, 1, 2]
        assert x.steps() == [0, 1, 2]
        assert sorted(x.values()) == [0, 1, 2]
        assert t.tensor_names() == names == ["x"]
        with refresh(t):
            assert t.steps() == [0, 1, 2, 3, 4, 5]
        # Back to frozen, with what the refresh block loaded (as smdebug).
        assert x.steps() == [0, 1, 2, 3, 4]
        with no_refresh([t]):  # nested
            assert x.steps() == [0, 1, 2, 3, 4]
    # Default: always fresh.
    assert t.steps() == [0, 1, 2, 3, 4, 5]
    assert sorted(x.values()) == [0, 1, 2, 3, 4]
    assert t.tensor_names() == ["x", "y"]
    w.close()


def test_a_trial_left_open_is_closed_at_exit_before_the_interpreter_tears_down(trial_url, tmp_path):
    """A script that reads a trial and ends without closing it: its channels
    (the trial's and the one values() opened) are closed by an atexit
    handler, while the interpreter is whole, not by Trial.__del__ during
    finalization, where gRPC can deadlock. The script records each channel
    close and whether the interpreter was finalizing then."""
    import subprocess
    import sys

    tkdata.write_job(trial_url)
    log = tmp_path / "closes.txt"
    script = f"""
import sys, grpc, grpc._channel
from tensorkeep.trials import create_trial
closes = open({str(log)!r}, "w")
orig = grpc._channel.Channel.close
def close(self):
    closes.write(f"finalizing={{sys.is_finalizing()}}\\n"); closes.flush()
    return orig(self)
grpc._channel.Channel.close = close
t = create_trial({trial_url!r})
assert "layer1.weight" in t.tensor_names()
assert len(t.tensor("layer1.weight").values()) > 0
kept = [t]  # still referenced when the script ends
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert log.read_text().splitlines() == ["finalizing=False", "finalizing=False"]
