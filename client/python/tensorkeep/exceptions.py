"""The exceptions of tensorkeep, with smdebug's names, arguments and messages.

smdebug is designed to be aware that tensors required to evaluate a rule may not
be available at every step. Hence, it raises a few exceptions which allow us to
control what happens when a tensor is missing:

- ``TensorUnavailableForStep``: the tensor requested is not available for the
  step. It may have been or will be saved for a different step number. This
  tensor will never become available for this step in the future.
- ``TensorUnavailable``: this tensor has not been saved from the training job.
- ``StepUnavailable``: the step was not saved from the training job. No tensor
  will be available for this step.
- ``StepNotYetAvailable``: the step has not yet been seen from the training job.
  It may become available in the future if the training is still going on.
- ``NoMoreData``: the training has ended and the step asked for lies beyond its
  last step. There will be no more steps and no more tensors saved.
- ``RuleEvaluationConditionMet``: raised when the rule invocation returns True
  for some step.
- ``InvalidWorker``: no data of the given worker at that step.

Every exception here derives from :class:`TensorkeepError`, which is also
exported as smdebug's base class ``SMDebugError`` (with smdebug's subclasses
``SMDebugValueError`` & co), so ``except SMDebugError`` ports unchanged. The
ones that are not smdebug's describe collector-level failures (an unreachable
collector, a timeout, a rejected request).
"""

from typing import Any, Optional


def _mode_name(mode: Any) -> str:
    return getattr(mode, "name", str(mode))


class TensorkeepError(Exception):
    """Base class of every exception raised by tensorkeep.

    Attributes:
        reason: the collector's machine-readable reason (``tk-reason``), if any.
        details: the collector's human-readable message, if any.
        code: the gRPC status code's name (e.g. "NOT_FOUND"), if any.
    """

    reason: Optional[str] = None
    details: Optional[str] = None
    code: Optional[str] = None


# smdebug's base class and its typed subclasses.
SMDebugError = TensorkeepError


class SMDebugCustomerError(SMDebugError):
    """An error the user can fix (smdebug's class)."""


class SMDebugTypeError(SMDebugError, TypeError):
    """A TypeError of tensorkeep (smdebug's class)."""


class SMDebugRuntimeError(SMDebugError, RuntimeError):
    """A RuntimeError of tensorkeep (smdebug's class)."""


class SMDebugNotImplementedError(SMDebugError, NotImplementedError):
    """A NotImplementedError of tensorkeep (smdebug's class)."""


class SMDebugValueError(SMDebugError, ValueError):
    """A ValueError of tensorkeep (smdebug's class)."""


class InvalidCollectionConfiguration(SMDebugError):
    """A collection with neither tensor names nor regexes (smdebug's class)."""

    def __init__(self, c_name: str):
        super().__init__(c_name)
        self.c_name = c_name

    def __str__(self) -> str:
        return (
            f"Collection {self.c_name} has not been configured. "
            "Please fill in tensor_name or include_regex"
        )


class MissingCollectionFiles(SMDebugError):
    """smdebug's class; tensorkeep keeps collections on the collector and never raises it."""

    def __init__(self) -> None:
        super().__init__()

    def __str__(self) -> str:
        return "Training job has ended. All the collection files could not be loaded"


class IndexReaderException(SMDebugError):
    """smdebug's class; tensorkeep has no index files and never raises it."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ShapeUnavailableForStep(SMDebugError):
    """Neither the shape nor the value of the tensor was saved for the step."""

    def __init__(self, tname: str, step: int, mode: Any = None):
        super().__init__(tname, step, mode)
        from .modes import ModeKeys

        self.tname = tname
        self.step = step
        self.mode = ModeKeys.GLOBAL if mode is None else mode

    def __str__(self) -> str:
        return (
            f"Shape for tensor {self.tname} is not available for step {self.step} "
            f"with mode {_mode_name(self.mode)} as it was not saved."
        )


class NoMoreProfilerData(SMDebugError):
    """smdebug's profiler class; tensorkeep has no profiler data and never raises it."""

    def __init__(self, timestamp: Any):
        super().__init__(timestamp)
        self.timestamp = timestamp
        self.msg = f"Looking for timestamp {timestamp} and reached end of training."

    def __str__(self) -> str:
        return self.msg


class InsufficientInformationForRuleInvocation(SMDebugError):
    """A rule cannot be evaluated with what the trial holds (smdebug's class)."""

    def __init__(self, rule_name: str, message: str):
        super().__init__(rule_name, message)
        self.rule_name = rule_name
        self.message = message

    def __str__(self) -> str:
        return f"Insufficient information to invoke rule {self.rule_name}: {self.message}"


class TrialNotFound(TensorkeepError):
    """The collector has never seen the trial (nothing was written to it yet)."""

    def __init__(self, trial: str):
        super().__init__(trial)
        self.trial = trial

    def __str__(self) -> str:
        return f"Trial {self.trial} not found on the collector"


class StepNotYetAvailable(TensorkeepError):
    """The step has not yet been seen from the training job."""

    def __init__(self, step: int, mode: Any):
        super().__init__(step, mode)
        self.step = step
        self.mode = mode

    def __str__(self) -> str:
        return f"Step {self.step} of mode {_mode_name(self.mode)} not yet available"


class StepUnavailable(TensorkeepError):
    """The step was not saved from the training job."""

    def __init__(self, step: int, mode: Any):
        super().__init__(step, mode)
        self.step = step
        self.mode = mode

    def __str__(self) -> str:
        return f"Step {self.step} of mode {_mode_name(self.mode)} is not available as it was not saved"


class TensorUnavailableForStep(TensorkeepError):
    """The tensor was not saved for the step (it never will be)."""

    def __init__(self, tname: str, step: int, mode: Any = None, has_reductions: bool = False):
        super().__init__(tname, step, mode)
        from .modes import ModeKeys  # local import: modes has no dependencies

        self.tname = tname
        self.step = step
        self.mode = ModeKeys.GLOBAL if mode is None else mode
        self.has_reductions = has_reductions

    def __str__(self) -> str:
        msg = (
            f"Value for tensor {self.tname} is not available for step {self.step} "
            f"with mode {_mode_name(self.mode)} as it was not saved."
        )
        if self.has_reductions:
            msg += (
                " This tensor has reductions saved for this step. "
                "You might want to query for the reductions."
            )
        return msg


class TensorUnavailable(TensorkeepError):
    """The tensor has not been saved from the training job."""

    def __init__(self, tname: str):
        super().__init__(tname)
        self.tname = tname

    def __str__(self) -> str:
        return f"Tensor {self.tname} was not saved."


class InvalidWorker(TensorkeepError):
    """The worker did not save the tensor at the step asked for."""

    def __init__(self, worker: str):
        super().__init__(worker)
        self.worker = worker

    def __str__(self) -> str:
        return f"Invalid Worker: {self.worker}"


class NoMoreData(TensorkeepError):
    """The training has ended: the step asked for will never be saved."""

    def __init__(self, step: int, mode: Any, last_step: Optional[int] = None):
        super().__init__(step, mode, last_step)
        self.step = step
        self.mode = mode
        self.last_step = last_step
        if last_step is None:
            last = "Max step available is unknown"
        elif last_step < 0:
            last = f"No step of mode {_mode_name(mode)} was saved"
        else:
            last = f"Max step available is {last_step}"
        self.msg = (
            f"Looking for step {step} of mode {_mode_name(mode)} and reached end of training. {last}"
        )

    def __str__(self) -> str:
        return self.msg


class RuleEvaluationConditionMet(TensorkeepError):
    """The rule's ``invoke_at_step`` returned True at ``step``."""

    def __init__(self, rule_name: str, step: int, end_of_rule: bool = False):
        super().__init__(rule_name, step)
        self.rule_name = rule_name
        self.step = step
        self.end_of_rule = end_of_rule

    def __str__(self) -> str:
        return (
            f"Evaluation of the rule {self.rule_name} at step {self.step} "
            "resulted in the condition being met"
        )


class CollectorUnavailable(TensorkeepError, ConnectionError):
    """The collector could not be reached (or stopped answering)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.details = message


class WaitTimeout(TensorkeepError, TimeoutError):
    """``wait_for_steps`` (or another bounded wait) ran out of time."""

    def __init__(self, message: str):
        super().__init__(message)
        self.details = message


class Conflict(TensorkeepError):
    """A committed step was rewritten with other data (reason ``CONFLICT``)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.details = message


class WrongCollector(TensorkeepError):
    """A collector of a cluster refused a trial that belongs to another one
    (reason ``WRONG_COLLECTOR``); ``owner`` is the collector its message names."""

    def __init__(self, message: str, owner: Optional[str] = None):
        super().__init__(message)
        self.details = message
        self.owner = owner


class BadRequest(TensorkeepError, ValueError):
    """The collector rejected a malformed request (reason ``BAD_REQUEST``)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.details = message


class WriterClosed(TensorkeepError):
    """A Writer was used after ``close()``."""
