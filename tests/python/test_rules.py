"""Rules and invoke_rule against a real collector: smdebug's loop semantics (skips,
end_step exclusive, raise_eval_cond, a clean end), live evaluation as steps
complete, status reports and the stop action."""

import threading

import numpy as np
import pytest

import tkdata
from tensorkeep import Writer, modes
from tensorkeep.exceptions import RuleEvaluationConditionMet
from tensorkeep.rules import Rule, invoke_rule
from tensorkeep.trials import create_trial


class RecordingRule(Rule):
    """Fires where the loss is below ``threshold``; records the steps it saw."""

    def __init__(self, base_trial, threshold="0.0", **kw):
        super().__init__(base_trial, other_trials=None, **kw)
        self.threshold = float(threshold)
        self.seen = []

    def invoke_at_step(self, step):
        self.seen.append(step)
        loss = self.base_trial.tensor("loss").value(step)
        return float(loss) < self.threshold


class GradientRule(Rule):
    """Reads the gradient, which is missing at EVAL/PREDICT steps (TensorUnavailableForStep)."""

    def __init__(self, base_trial):
        super().__init__(base_trial)
        self.evaluated = []

    def invoke_at_step(self, step):
        self.base_trial.tensor("gradient/layer1.weight").reduction_value(step, "mean", abs=True)
        self.evaluated.append(step)
        return False


@pytest.fixture
def job(trial_url):
    tkdata.write_job(trial_url)
    return create_trial(trial_url)


def test_invokes_every_step_and_ends_cleanly(job):
    r = RecordingRule(job)
    invoke_rule(r)
    assert r.seen == list(range(10))


def test_start_and_exclusive_end_step(job):
    r = RecordingRule(job)
    invoke_rule(r, start_step=2, end_step=6)
    assert r.seen == [2, 3, 4, 5]


def test_range_steps_of_the_base_trial_bound_the_invocation(trial_url):
    tkdata.write_job(trial_url)
    r = RecordingRule(create_trial(trial_url, range_steps=(4, 8)))
    invoke_rule(r)
    assert r.seen == [4, 5, 6, 7]


def test_skips_steps_where_a_tensor_is_unavailable(job):
    r = GradientRule(job)
    invoke_rule(r)
    assert r.evaluated == [0, 1, 2, 3, 4, 7, 8]


def test_condition_met_is_logged_or_raised(job):
    # loss = 1/(step+1) < 0.3 from step 3 on.
    r = RecordingRule(job, threshold="0.3")
    invoke_rule(r, raise_eval_cond=False)
    assert r.seen == list(range(10))
    r = RecordingRule(job, threshold="0.3")
    with pytest.raises(RuleEvaluationConditionMet) as ei:
        invoke_rule(r, raise_eval_cond=True)
    assert ei.value.step == 3 and ei.value.rule_name == "RecordingRule"
    assert r.seen == [0, 1, 2, 3]


def test_invoke_waits_for_the_step_like_smdebug(job):
    r = RecordingRule(job, threshold="0.3")
    r.invoke(0)
    with pytest.raises(RuleEvaluationConditionMet):
        r.invoke(4)


def test_other_trials(trial_url, server):
    tkdata.write_job(trial_url)
    other_url = server.url("other-" + trial_url.rsplit("/", 1)[1])
    tkdata.write_job(other_url)

    class Similar(Rule):
        def invoke_at_step(self, step):
            a = self.base_trial.tensor("layer1.weight").value(step)
            b = self.other_trials[0].tensor("layer1.weight").value(step)
            return not np.array_equal(a, b)

    r = Similar(create_trial(trial_url), other_trials=[create_trial(other_url)])
    assert len(r.trials) == 2
    invoke_rule(r, raise_eval_cond=True)  # identical runs: never fires


def test_live_rule_follows_the_job_and_stops_it(trial_url):
    """A rule with action stop runs while the job writes; the job sees the stop."""
    w = Writer(trial_url)
    t = create_trial(trial_url)
    r = RecordingRule(t, threshold="0.1", name="LowLoss", report_to_collector=True, action="stop")
    errors = []

    def run():
        try:
            invoke_rule(r)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    th = threading.Thread(target=run, daemon=True)
    th.start()  # before anything is written: the rule waits for the trial
    step = 0
    while not w.stop_requested and step < 1000:
        w.write_tensor("loss", np.float32(1.0 / (step + 1)), step=step, mode=modes.TRAIN)
        w.end_step(step)
        w.flush()
        step += 1
    assert w.stop_requested, "the stop request did not reach the writer"
    # loss < 0.1 first at step 10; the writer learns of it within a few acks.
    assert 10 <= step <= 1000
    w.close(end_of_training=True)
    th.join(60)
    assert not th.is_alive() and not errors, errors
    assert r.seen == list(range(step))
    st = {s.rule: s for s in t.rule_statuses()}["LowLoss"]
    assert st.state == "IssuesFound" and st.step == 10 and st.action == "stop"
    assert st.last_evaluated_step == step - 1


def test_reports_no_issues_found(job):
    r = RecordingRule(job, name="Quiet", report_to_collector=True)
    invoke_rule(r)
    st = {s.rule: s for s in job.rule_statuses()}["Quiet"]
    assert st.state == "NoIssuesFound" and st.last_evaluated_step == 9


def test_reports_an_error_and_raises_it(job):
    class Broken(Rule):
        def invoke_at_step(self, step):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        invoke_rule(Broken(job, report_to_collector=True))
    st = {s.rule: s for s in job.rule_statuses()}["Broken"]
    assert st.state == "Error" and "boom" in st.message


def test_rule_arguments_are_checked(job):
    with pytest.raises(TypeError):
        RecordingRule("not a trial")
    with pytest.raises(ValueError):
        RecordingRule(job, action="explode")
    with pytest.raises(TypeError):
        invoke_rule(object())
