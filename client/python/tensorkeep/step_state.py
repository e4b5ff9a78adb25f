"""StepState: what a trial knows about a step (smdebug's enum and values)."""

import enum


class StepState(enum.Enum):
    """The answer of ``Trial.has_passed_step``.

    - AVAILABLE: the step was saved and is complete (every expected worker
      committed it, a later step is complete, or the trial ended).
    - NOT_YET_AVAILABLE: the step may still come (it was saved by some workers
      only, or it lies beyond every step saved so far while the job runs).
    - UNAVAILABLE: the step was not saved and never will be (a later step is
      complete, or the trial ended).
    """

    UNAVAILABLE = 0
    AVAILABLE = 1
    NOT_YET_AVAILABLE = 2
