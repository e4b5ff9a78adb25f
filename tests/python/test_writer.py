"""The Writer against a real collector: what a flush promises, idempotent rewrites,
conflicts, closing without ending the trial, modes and collections on the wire."""

import numpy as np
import pytest

from tensorkeep import Writer, modes
from tensorkeep.exceptions import Conflict
from tensorkeep.trials import StepState, create_trial


def test_flush_makes_everything_visible(trial_url):
    w = Writer(trial_url)
    for s in range(50):
        w.write_tensor("x", np.full(4, s, np.int32), step=s)
    w.end_step(49)
    w.flush()
    t = create_trial(trial_url)
    assert t.steps() == list(range(50))
    assert w.committed_through == 49
    w.close()


def test_identical_rewrite_of_a_committed_step_is_a_no_op(trial_url):
    a = np.arange(5, dtype=np.float32)
    w = Writer(trial_url)
    w.write_tensor("x", a, step=0)
    w.end_step(0)
    w.flush()
    w.close(end_of_training=False)  # the process dies and is restarted
    w2 = Writer(trial_url)  # same worker: the restarted process resending
    w2.write_tensor("x", a, step=0)
    w2.end_step(0)
    w2.flush()
    w2.close(end_of_training=False)
    t = create_trial(trial_url)
    assert t.tensor("x").workers(0) == ["worker_0"]
    assert np.array_equal(t.tensor("x").value(0), a)


def test_rewriting_a_committed_step_with_other_data_is_a_conflict(trial_url):
    w = Writer(trial_url)
    w.write_tensor("x", np.zeros(2, np.float32), step=0)
    w.end_step(0)
    w.flush()
    w.close(end_of_training=False)
    w2 = Writer(trial_url)
    w2.write_tensor("x", np.ones(2, np.float32), step=0)
    with pytest.raises(Conflict):
        w2.flush(timeout=30)
    with pytest.raises(Conflict):  # the writer stays failed
        w2.write_tensor("y", np.ones(2, np.float32), step=1)
    with pytest.raises(Conflict):
        w2.close()
    assert np.array_equal(create_trial(trial_url).tensor("x").value(0), np.zeros(2, np.float32))
    w.close()


def test_close_without_end_of_training_keeps_the_trial_running(trial_url):
    w = Writer(trial_url)
    w.write_tensor("x", np.zeros(1), step=0)
    w.close(end_of_training=False)
    t = create_trial(trial_url)
    assert t.steps() == [0]  # closing commits the step
    assert not t.loaded_all_steps
    assert t.has_passed_step(5) == StepState.NOT_YET_AVAILABLE
    with Writer(trial_url) as w:  # a context manager ends the trial on a clean exit
        w.write_tensor("x", np.zeros(1), step=1)
    assert t.loaded_all_steps
    assert t.has_passed_step(5) == StepState.UNAVAILABLE


def test_global_mode_writer_and_collections(trial_url):
    with Writer(trial_url) as w:
        w.write_tensor("g", np.zeros(1), step=0, mode=modes.GLOBAL)
        w.write_tensor("g", np.zeros(1), step=1, mode=modes.GLOBAL, collections=["c1", "c2"])
    t = create_trial(trial_url)
    assert t.steps() == [0, 1]
    assert t.tensor("g").steps() == [0, 1]
    assert set(t.collections()) >= {"c1", "c2"}
    assert t.tensor_names(collection="c2") == ["g"]
