"""RuleStatus: the state a rule evaluation reported for a trial."""

from dataclasses import dataclass

# SageMaker's RuleEvaluationStatus words, by tensorkeep.v1.RuleStatus.State.
STATE_NAMES = {1: "InProgress", 2: "NoIssuesFound", 3: "IssuesFound", 4: "Error"}
STATE_NUMBERS = {v: k for k, v in STATE_NAMES.items()}


@dataclass(frozen=True)
class RuleStatus:
    """One rule's latest status on a trial, like SageMaker's DebugRuleEvaluationStatuses.

    Attributes:
        rule: the rule configuration's name (unique within the trial).
        state: "InProgress", "NoIssuesFound", "IssuesFound" or "Error".
        step: the step the state refers to (-1: none).
        message: details (what was found, or the error).
        action: "" or "stop" (the rule asks the training job to stop).
        last_evaluated_step: the last step the rule evaluated (-1: none).
        updated: when the collector received it (seconds since the epoch).
    """

    rule: str
    state: str
    step: int = -1
    message: str = ""
    action: str = ""
    last_evaluated_step: int = -1
    updated: float = 0.0

    @classmethod
    def from_proto(cls, m) -> "RuleStatus":
        return cls(
            rule=m.rule,
            state=STATE_NAMES.get(m.state, "Unknown"),
            step=m.step,
            message=m.message,
            action=m.action,
            last_evaluated_step=m.last_evaluated_step,
            updated=m.updated_unix,
        )
