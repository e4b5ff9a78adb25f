"""Rules: code evaluated at each step of a trial (smdebug.rules).

Writing a rule involves implementing the Rule interface::

    from tensorkeep.rules import Rule, invoke_rule

    class VanishingGradientRule(Rule):
        def __init__(self, base_trial, threshold="0.0000001"):
            super().__init__(base_trial, action_str="", other_trials=None)
            self.threshold = float(threshold)

        def invoke_at_step(self, step):
            for tname in self.base_trial.tensor_names(collection="gradients"):
                t = self.base_trial.tensor(tname)
                if t.reduction_value(step, "mean", abs=True) < self.threshold:
                    return True
            return False

    invoke_rule(VanishingGradientRule(trial), start_step=0, end_step=None)

``invoke_at_step`` returns True when the rule evaluation condition is met.
As in smdebug, every parameter besides the trials is given as a string.
"""

import json
import logging
import time
from abc import ABC, abstractmethod
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence

import grpc

from . import _errors, _names
from ._channel import pb
from .analysis import no_refresh
from .exceptions import (
    NoMoreData,
    RuleEvaluationConditionMet,
    StepUnavailable,
    TensorkeepError,
    TensorUnavailable,
    TensorUnavailableForStep,
    TrialNotFound,
)
from .trial import Trial

__all__ = ["Rule", "invoke_rule", "RequiredTensors", "RequiredTensorsForTrial"]

logger = logging.getLogger("tensorkeep")

# Seconds between InProgress reports of the last evaluated step.
_PROGRESS_INTERVAL = 1.0
_BACKOFF_MAX = 2.0


class RequiredTensorsForTrial:
    """The tensors (and steps) a rule declared it needs from one trial (smdebug's)."""

    def __init__(self, trial: Trial):
        self.trial = trial
        self._tensor_steps: Dict[str, List[int]] = {}
        self._tensors: Dict[str, Any] = {}
        self.logger = trial.logger

    def _add_steps_for_tensor(self, name: str, steps: Iterable[int]) -> None:
        self._tensor_steps.setdefault(name, []).extend(steps)
        if name not in self._tensors:
            self._tensors[name] = self.trial.tensor(name)

    def add(self, name: str, steps: Iterable[int], should_match_regex: bool = False) -> None:
        """Requires ``name`` (a regex when ``should_match_regex``) at ``steps``;
        TensorUnavailable for a name the trial has not saved."""
        steps = list(steps)
        if should_match_regex:
            for n in self.trial.tensor_names(regex=[name]):
                self._add_steps_for_tensor(n, steps)
        else:
            if not self.trial.has_tensor(name):
                raise TensorUnavailable(name)
            self._add_steps_for_tensor(name, steps)

    def get_tensor_steps(self, name: str) -> List[int]:
        return self._tensor_steps[name]

    def get_names(self) -> Iterable[str]:
        return self._tensor_steps.keys()

    def get(self) -> Iterable[Any]:
        """The required Tensor objects."""
        return self._tensors.values()

    def clear(self) -> None:
        self._tensor_steps.clear()
        self._tensors.clear()

    def fetch(self) -> None:
        """Waits for the required steps, then reads every required value: raises
        (StepUnavailable, TensorUnavailableForStep, ...) if one is missing."""
        required = sorted({s for steps in self._tensor_steps.values() for s in steps})
        if required:
            self.logger.debug("Waiting for required_steps: %s", required)
            self.trial.wait_for_steps(required)
        for name, steps in self._tensor_steps.items():
            t = self._tensors[name]
            for st in steps:
                t.value(st)


class RequiredTensors:
    """smdebug's ``rule.req_tensors``: what ``set_required_tensors`` declares,
    per trial (the base trial unless ``trial`` is given)."""

    def __init__(self, base_trial: Trial, other_trials: Optional[Sequence[Trial]]):
        self.base_trial = base_trial
        self._per_trial: Dict[Trial, RequiredTensorsForTrial] = {
            base_trial: RequiredTensorsForTrial(base_trial)
        }
        for t in other_trials or ():
            self._per_trial[t] = RequiredTensorsForTrial(t)

    def add(self, name: str, steps: Iterable[int], trial: Optional[Trial] = None, should_match_regex: bool = False) -> None:
        self._per_trial[trial or self.base_trial].add(name, steps, should_match_regex=should_match_regex)

    def get_tensor_steps(self, name: str, trial: Optional[Trial] = None) -> List[int]:
        return self._per_trial[trial or self.base_trial].get_tensor_steps(name)

    def get_names(self, trial: Optional[Trial] = None) -> Iterable[str]:
        return self._per_trial[trial or self.base_trial].get_names()

    def get(self, trial: Optional[Trial] = None) -> Iterable[Any]:
        return self._per_trial[trial or self.base_trial].get()

    def clear(self) -> None:
        for r in self._per_trial.values():
            r.clear()

    def fetch(self) -> None:
        for r in self._per_trial.values():
            r.fetch()


def _parse_action(action_str: str) -> str:
    """smdebug's ``action_str`` (a JSON action, or list of them) to tensorkeep's
    action: "stop" for StopTraining, "" for none. Email and SMS actions have
    no equivalent here: they are logged and ignored."""
    if not action_str:
        return ""
    if action_str in ("stop", ""):
        return action_str
    try:
        parsed = json.loads(action_str)
    except ValueError:
        raise ValueError(
            f"invalid rule action {action_str!r}: expected '', 'stop' or smdebug's JSON action "
            '(e.g. \'{"name": "StopTraining"}\')'
        ) from None
    actions = parsed if isinstance(parsed, list) else [parsed]
    out = ""
    for a in actions:
        name = str(a.get("name", "")).lower() if isinstance(a, dict) else ""
        if name == "stoptraining":
            out = "stop"
        else:
            logger.warning("rule action %r is not supported by tensorkeep; ignored", a)
    return out


class Rule(ABC):
    """A rule anchored to ``base_trial``, possibly comparing it with ``other_trials``.

    ``Rule(base_trial, action_str="", other_trials=None)`` as smdebug's.
    Subclasses implement ``invoke_at_step(step) -> bool`` and see
    ``self.base_trial``, ``self.other_trials``, ``self.trials`` (all of them),
    ``self.req_tensors`` (filled by ``set_required_tensors(step)`` before each
    evaluation and fetched, as smdebug), ``self.report`` (smdebug's report
    dict, for the rule to fill) and ``self.logger``.

    ``action_str``: "" (no action), "stop", or smdebug's JSON action
    (``{"name": "StopTraining", ...}`` maps to "stop"; Email/SMS are ignored
    with a warning).

    Keyword-only, all optional (they may also be set as attributes after
    construction):
        name: the rule configuration's name for status reports (default: the
            class name; smdebug's ``rule_name``).
        report_to_collector: when True, ``invoke_rule`` reports the rule's
            status to the collector (InProgress, IssuesFound, NoIssuesFound,
            Error), as the C++ rule worker does; ``base_trial.rule_statuses()``
            and ``tensorkeep rules TRIAL`` show it.
        action: "" or "stop" (overrides ``action_str``): with "stop", an
            IssuesFound report makes the collector ask the trial's writers to
            stop (``Writer.stop_requested``).
    """

    def __init__(
        self,
        base_trial: Trial,
        action_str: Any = "",
        other_trials: Optional[Sequence[Trial]] = None,
        *,
        name: Optional[str] = None,
        report_to_collector: bool = False,
        action: Optional[str] = None,
    ):
        if not isinstance(base_trial, Trial):
            raise TypeError(f"base_trial must be a Trial, got {type(base_trial).__name__}")
        if not isinstance(action_str, str) and action_str is not None:
            # Rule(base, [other trials]): tensorkeep's older order.
            if other_trials is not None:
                raise TypeError("action_str must be a str")
            action_str, other_trials = "", action_str
        self.base_trial = base_trial
        self.other_trials = other_trials
        self.trials: List[Trial] = [base_trial] + list(other_trials or [])
        self.req_tensors = RequiredTensors(base_trial, other_trials)
        self.logger = logger
        self.rule_name = name or type(self).__name__
        self.report: Dict[str, Any] = {
            "RuleTriggered": 0,
            "Violations": 0,
            "Details": {},
            "Datapoints": 0,
            "RuleParameters": "",
        }
        self.report_to_collector = report_to_collector
        self.action_str = action_str or ""
        action = _parse_action(self.action_str) if action is None else action
        if action not in ("", "stop"):
            raise ValueError(f"invalid rule action {action!r}: expected '' or 'stop'")
        self.action = action

    def set_required_tensors(self, step: int) -> None:
        """Declares, with ``self.req_tensors.add(name, steps)``, what the
        evaluation at ``step`` needs; fetched before ``invoke_at_step``."""

    @abstractmethod
    def invoke_at_step(self, step: int) -> bool:
        """Evaluates the rule at global step ``step``; True means the condition is met."""

    def invoke(self, step: int) -> None:
        """Waits until ``step`` is available, then evaluates the rule there.

        Raises RuleEvaluationConditionMet when ``invoke_at_step`` returns True,
        and StepUnavailable / NoMoreData as ``wait_for_steps`` does.
        """
        self.logger.debug("Invoking rule %s for step %s", self.rule_name, step)
        self.base_trial.wait_for_steps([step])
        self._evaluate(step)

    def _evaluate(self, step: int) -> None:
        # The trials show what they hold now, then do not refresh during
        # invoke_at_step: every query inside sees the same steps (smdebug).
        for t in self.trials:
            t.maybe_refresh()
        with no_refresh(self.trials):
            self.req_tensors.clear()
            self.set_required_tensors(step)
            self.req_tensors.fetch()
            val = self.invoke_at_step(step)
        if val:
            raise RuleEvaluationConditionMet(self.rule_name, step)


def invoke_rule(
    rule_obj: Rule, start_step: int = 0, end_step: Optional[int] = None, raise_eval_cond: bool = False
) -> None:
    """Invokes a rule at each complete step of its base trial, one after the other.

    Args:
        rule_obj: an instance of a subclass of Rule.
        start_step: global step to start invoking the rule from (default 0).
        end_step: global step to end the invocation of the rule before
            (exclusive); None runs till the end of the job.
        raise_eval_cond: when True, RuleEvaluationConditionMet escapes at the
            first step where the condition is met; when False (default) it is
            logged and evaluation moves on to the next step.

    Steps are taken from the collector's stream of newly complete steps
    (WatchSteps), so the rule waits without polling and never evaluates an
    incomplete step. Steps that were not saved are skipped, as are steps
    where the rule raises TensorUnavailableForStep, StepUnavailable or
    TensorUnavailable. The invocation ends cleanly at the end of the trial
    (NoMoreData does not escape). With ``report_to_collector`` set on the rule,
    its status is reported as it goes.
    """
    if not isinstance(rule_obj, Rule):
        raise TypeError(f"rule_obj must be a Rule, got {type(rule_obj).__name__}")
    start = _names.check_step(start_step if start_step is not None else 0, "start_step")
    end = None if end_step is None else _names.check_step(end_step, "end_step")
    trial = rule_obj.base_trial
    if trial.range_steps is not None:
        begin_r, end_r = trial.range_steps
        start = max(start, begin_r or 0)
        if end_r is not None:
            end = end_r if end is None else min(end, end_r)
    reporter = _Reporter(rule_obj)
    name = type(rule_obj).__name__
    logger.info("Started execution of rule %s at step %d", name, start)
    reporter.report("InProgress")
    step = start - 1
    try:
        for step in _complete_steps(trial, start, end):
            try:
                rule_obj._evaluate(step)
            except (TensorUnavailableForStep, StepUnavailable, TensorUnavailable) as e:
                logger.debug(str(e))
            except RuleEvaluationConditionMet as e:
                reporter.issue(step, str(e))
                if raise_eval_cond:
                    raise
                logger.info(str(e))
                if e.end_of_rule:
                    break
            except NoMoreData as e:
                logger.debug(str(e))
                break
            reporter.evaluated(step)
    except RuleEvaluationConditionMet:
        raise
    except Exception as e:
        reporter.report("Error", step=step, message=f"{type(e).__name__}: {e}")
        raise
    reporter.finish()
    logger.info("Ended execution of rule %s at end_step %d", name, step)


def _complete_steps(trial: Trial, start: int, end: Optional[int]) -> Iterator[int]:
    """Yields the complete global steps of ``trial`` in [start, end), in order, as
    they complete; returns at the end of the trial. Resumes after a lost connection."""
    next_step = start
    delay = 0.02
    while end is None or next_step < end:
        stream = trial._stream("WatchSteps", pb.WatchStepsRequest(trial=trial.trial, from_step=next_step))
        try:
            for ev in stream:
                delay = 0.02
                if ev.end_of_trial:
                    return
                if ev.step < next_step:
                    continue  # never evaluate a step twice
                if end is not None and ev.step >= end:
                    return
                next_step = ev.step + 1
                yield ev.step
            # Ended without an end-of-trial message (a collector shutting down):
            # resume from the next step once it is back.
            logger.debug("WatchSteps on %s ended early; resuming in %.2f s", trial.trial, delay)
        except grpc.RpcError as e:
            err = _errors.translate(e, trial=trial.trial, step=next_step)
            if isinstance(err, NoMoreData):
                return
            if not isinstance(err, TrialNotFound) and not _errors.is_transient(e):
                raise err from None
            # Not written yet, or the collector restarted: look again shortly.
            logger.debug("WatchSteps on %s: %s; retrying in %.2f s", trial.trial, err, delay)
        finally:
            stream.cancel()
        time.sleep(delay)
        delay = min(delay * 2, _BACKOFF_MAX)


class _Reporter:
    """Reports a rule's status to the collector when the rule asks for it."""

    def __init__(self, rule: Rule):
        self.rule = rule
        self.enabled = bool(rule.report_to_collector)
        self.issue_step = -1
        self.issue_message = ""
        self.last_step = -1
        self._last_report = 0.0

    def report(self, state: str, step: int = -1, message: str = "") -> None:
        if not self.enabled:
            return
        try:
            self.rule.base_trial.report_rule_status(
                self.rule.rule_name,
                state,
                step=step,
                message=message,
                action=self.rule.action,
                last_evaluated_step=self.last_step,
            )
        except TensorkeepError as e:  # a status report never breaks the rule
            logger.warning("could not report the status of rule %s: %s", self.rule.rule_name, e)
        self._last_report = time.monotonic()

    def evaluated(self, step: int) -> None:
        self.last_step = step
        if self.enabled and time.monotonic() - self._last_report >= _PROGRESS_INTERVAL:
            if self.issue_step >= 0:
                self.report("IssuesFound", self.issue_step, self.issue_message)
            else:
                self.report("InProgress")

    def issue(self, step: int, message: str) -> None:
        """Reports the first step where the condition was met; later ones only
        advance last_evaluated_step (no report per step)."""
        self.last_step = step
        if self.issue_step < 0:
            self.issue_step, self.issue_message = step, message
            self.report("IssuesFound", step, message)

    def finish(self) -> None:
        if self.issue_step >= 0:
            self.report("IssuesFound", self.issue_step, self.issue_message)
        else:
            self.report("NoIssuesFound")
