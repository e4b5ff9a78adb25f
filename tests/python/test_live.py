"""Live trials against a real collector: multi-worker completeness, has_passed_step,
wait_for_steps waking on commits, the end of a trial, rule statuses and the stop action.

No sleeps are used to synchronise: waiters are threads whose completion is
awaited with Event/join timeouts that only bound a failure.
"""

import threading

import numpy as np
import pytest

from tensorkeep import Writer, _names, modes
from tensorkeep.exceptions import NoMoreData, StepUnavailable, WaitTimeout
from tensorkeep.trials import StepState, create_trial


def commit(w, step, mode=modes.TRAIN, mode_step=None, name="x"):
    w.write_tensor(name, np.full(3, step, np.float32), step=step, mode=mode, mode_step=mode_step)
    w.end_step(step)
    w.flush()


def test_step_is_complete_only_when_every_worker_committed_it(trial_url):
    a = Writer(trial_url, worker="worker_0", num_workers=2)
    b = Writer(trial_url, worker="worker_1", num_workers=2)
    t = create_trial(trial_url)
    commit(a, 0)
    assert t.steps() == []
    assert t.steps(show_incomplete_steps=True) == [0]
    assert t.tensor("x").steps() == []
    assert t.tensor("x").steps(show_incomplete_steps=True) == [0]
    assert t.has_passed_step(0) == StepState.NOT_YET_AVAILABLE
    commit(b, 0)
    assert t.steps() == [0]
    assert t.has_passed_step(0) == StepState.AVAILABLE
    assert t.workers() == ["worker_0", "worker_1"]
    assert t.tensor("x").workers(0) == ["worker_0", "worker_1"]
    # value() with several workers: the lexically first, unless one is named.
    assert np.array_equal(t.tensor("x").value(0, worker="worker_1"), np.zeros(3, np.float32))
    # Steps beyond everything while running: not yet available.
    assert t.has_passed_step(5) == StepState.NOT_YET_AVAILABLE
    # Step 1 skipped, step 2 complete: step 1 is unavailable.
    commit(a, 2)
    assert t.has_passed_step(1) == StepState.NOT_YET_AVAILABLE  # only a later *partial* step
    commit(b, 2)
    assert t.has_passed_step(1) == StepState.UNAVAILABLE
    assert t.steps() == [0, 2]
    a.close()
    b.close()
    assert t.has_passed_step(10) == StepState.UNAVAILABLE  # beyond the end of an ended trial
    assert t.loaded_all_steps


def test_a_later_complete_step_completes_a_partial_one(trial_url):
    a = Writer(trial_url, worker="worker_0", num_workers=2)
    b = Writer(trial_url, worker="worker_1", num_workers=2)
    t = create_trial(trial_url)
    commit(a, 0)  # worker_1 never saves step 0
    commit(a, 1)
    commit(b, 1)
    assert t.steps() == [0, 1]
    assert t.has_passed_step(0) == StepState.AVAILABLE
    a.close()
    b.close()


def _waiter(target, *args, **kwargs):
    box = {}
    done = threading.Event()

    def run():
        try:
            box["result"] = target(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e
        done.set()

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return box, done


def test_wait_for_steps_wakes_up_when_the_step_completes(trial_url):
    w = Writer(trial_url)
    commit(w, 0)
    t = create_trial(trial_url)
    t.wait_for_steps([0])  # already there: returns at once
    box, done = _waiter(t.wait_for_steps, [2, 3])
    commit(w, 1)
    commit(w, 2)
    assert not done.is_set() or "error" in box, "returned before step 3 was complete"
    commit(w, 3)
    assert done.wait(30), "wait_for_steps did not wake up"
    assert "error" not in box, box.get("error")
    w.close()


def test_wait_for_mode_steps(trial_url):
    w = Writer(trial_url)
    commit(w, 0, modes.TRAIN, 0)
    t = create_trial(trial_url)
    box, done = _waiter(t.wait_for_steps, [0], mode=modes.EVAL)
    commit(w, 1, modes.EVAL, 0)
    assert done.wait(30) and "error" not in box, box.get("error")
    w.close()


def test_wait_for_steps_of_a_trial_not_written_yet(trial_url):
    t = create_trial(trial_url)
    box, done = _waiter(t.wait_for_steps, [0])
    w = Writer(trial_url)
    commit(w, 0)
    assert done.wait(30) and "error" not in box, box.get("error")
    w.close()


def test_wait_for_steps_times_out(trial_url):
    w = Writer(trial_url)
    commit(w, 0)
    t = create_trial(trial_url)
    with pytest.raises(WaitTimeout):
        t.wait_for_steps([5], timeout=0.2)
    with pytest.raises(TimeoutError):  # WaitTimeout is a TimeoutError
        create_trial(trial_url + "-never").wait_for_steps([0], timeout=0.2)
    w.close()


def test_wait_after_the_end(trial_url):
    w = Writer(trial_url)
    for s in (0, 1, 3):
        commit(w, s)
    w.close(end_of_training=True)
    t = create_trial(trial_url)
    t.wait_for_steps([0, 1, 3])
    with pytest.raises(StepUnavailable) as ei:
        t.wait_for_steps([2])
    assert ei.value.step == 2
    with pytest.raises(NoMoreData) as ei:
        t.wait_for_steps([10])
    assert ei.value.step == 10 and ei.value.last_step == 3
    with pytest.raises(StepUnavailable) as ei:
        t.wait_for_steps([0, 2, 3])
    assert ei.value.step == 2


def test_wait_past_the_last_mode_step_of_an_ended_trial_is_no_more_data(trial_url):
    # Issue 17: smdebug's "skip on StepUnavailable, stop on NoMoreData" loop
    # over mode steps must end for TRAIN and EVAL as it does for GLOBAL.
    w = Writer(trial_url)
    commit(w, 0, modes.TRAIN, 0)
    commit(w, 1, modes.TRAIN, 2)  # TRAIN step 1 skipped
    for s in range(3):
        commit(w, 2 + s, modes.EVAL, s)
    w.close(end_of_training=True)
    t = create_trial(trial_url)
    for mode, expected, last in ((modes.TRAIN, [0, 2], 2), (modes.EVAL, [0, 1, 2], 2)):
        seen = []
        for step in range(1000):  # bounded: the bug made this loop endless
            try:
                t.wait_for_steps([step], mode=mode)
            except StepUnavailable:
                continue
            except NoMoreData as e:
                assert (e.step, e.mode, e.last_step) == (step, mode, last)
                assert f"Max step available is {last}" in str(e)
                break
            seen.append(step)
        assert seen == expected, mode
    with pytest.raises(StepUnavailable) as ei:
        t.wait_for_steps([1], mode=modes.TRAIN)
    assert ei.value.step == 1
    with pytest.raises(NoMoreData) as ei:
        t.wait_for_steps([0, 7], mode=modes.EVAL)
    assert ei.value.step == 7 and ei.value.last_step == 2
    with pytest.raises(NoMoreData) as ei:  # a mode that saved nothing
        t.wait_for_steps([0], mode=modes.PREDICT)
    assert ei.value.last_step == -1 and "-1" not in str(ei.value), str(ei.value)
    # (the trial's name may hold "-1": look at the rest of the message)
    assert "-1" not in ei.value.details.replace(t.trial, ""), ei.value.details


def test_wait_for_more_steps_than_one_call_takes(trial_url):
    # The collector takes at most MAX_WAIT_STEPS steps a call (BAD_REQUEST
    # beyond); the client splits a longer list, so smdebug code still works.
    w = Writer(trial_url)
    for s in (0, 1):
        commit(w, s)
    w.close(end_of_training=True)
    t = create_trial(trial_url)
    n = _names.MAX_WAIT_STEPS
    t.wait_for_steps([1, 0] * (n // 2 + 1))  # more than n, repeated, out of order
    with pytest.raises(NoMoreData) as ei:
        t.wait_for_steps(range(n + 5))
    assert ei.value.step == 2


def test_waiting_wakes_up_at_the_end_of_the_trial(trial_url):
    w = Writer(trial_url)
    commit(w, 0)
    t = create_trial(trial_url)
    box, done = _waiter(t.wait_for_steps, [7])
    w.close(end_of_training=True)
    assert done.wait(30)
    assert isinstance(box.get("error"), NoMoreData)


def test_end_trial_explicitly(trial_url):
    w = Writer(trial_url)
    commit(w, 0)
    t = create_trial(trial_url)
    assert not t.loaded_all_steps
    assert t.end() is True
    assert t.end() is False
    assert t.loaded_all_steps
    with pytest.raises(NoMoreData):
        t.wait_for_steps([1])
    w.close(end_of_training=False)


def test_rule_statuses_and_the_stop_action(trial_url):
    w = Writer(trial_url)
    commit(w, 0)
    t = create_trial(trial_url)
    assert t.rule_statuses() == []
    t.report_rule_status("Watcher", "InProgress")
    t.report_rule_status("Loss", "NoIssuesFound", last_evaluated_step=0)
    st = {s.rule: s for s in t.rule_statuses()}
    assert st["Watcher"].state == "InProgress" and st["Loss"].state == "NoIssuesFound"
    assert st["Loss"].last_evaluated_step == 0 and st["Loss"].updated > 0
    assert not w.stop_requested
    t.report_rule_status("Exploding", "IssuesFound", step=0, message="NaN in x", action="stop")
    st = {s.rule: s for s in t.rule_statuses()}
    assert st["Exploding"].state == "IssuesFound" and st["Exploding"].step == 0
    assert st["Exploding"].message == "NaN in x" and st["Exploding"].action == "stop"
    commit(w, 1)  # the next ack carries the stop request
    assert w.stop_requested
    assert w.stop_reason
    w.close()
    with pytest.raises(ValueError):
        t.report_rule_status("R", "Done")
