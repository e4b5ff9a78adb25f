"""WorkerStatus: a worker's state as the collector tracks it (tensorkeep's own).

smdebug has no worker states; tensorkeep adds them so that a dead rank does not
stall a multi-worker trial (docs/semantics.md, "Workers").
"""

import dataclasses
import enum
from typing import Any, Tuple


class WorkerState(enum.Enum):
    """ACTIVE: writing, or gone for less than the collector's --worker-timeout.
    CLOSED: closed with end of training. LOST: gone without that close for
    longer than the timeout, or declared lost; steps complete without it, and
    it is ACTIVE again when it reconnects."""

    ACTIVE = 1
    CLOSED = 2
    LOST = 3


@dataclasses.dataclass(frozen=True)
class WorkerRestart:
    """A restart of a worker's job (a new attempt, e.g. by torchrun
    --max_restarts): the attempt that started, when (Unix time), and the step
    the attempt before had committed through (-1: none)."""

    attempt: int
    started: float
    previous_committed_through: int


@dataclasses.dataclass(frozen=True)
class WorkerStatus:
    """One worker of a trial: its state, the highest step it saved a tensor at
    and the highest step its current attempt committed (-1 if none), whether it
    has a live stream, why and since when (Unix time) it is LOST, its current
    attempt (0 unless its job was restarted) and its restarts, oldest first
    (docs/semantics.md, "Restarted jobs")."""

    worker: str
    state: WorkerState
    last_step: int
    committed_through: int
    connected: bool
    reason: str = ""
    since: float = 0.0
    attempt: int = 0
    restarts: Tuple[WorkerRestart, ...] = ()

    @classmethod
    def from_proto(cls, m: Any) -> "WorkerStatus":
        return cls(
            worker=m.worker,
            state=WorkerState(m.state) if m.state in (1, 2, 3) else WorkerState.ACTIVE,
            last_step=m.last_step,
            committed_through=m.committed_through,
            connected=m.connected,
            reason=m.reason,
            since=m.since_unix,
            attempt=m.attempt,
            restarts=tuple(
                WorkerRestart(r.attempt, r.started_unix, r.previous_committed_through) for r in m.restarts
            ),
        )
