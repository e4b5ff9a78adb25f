"""create_trial: the entry point of the analysis API, as smdebug.trials; and
list_trials, the trials of every collector."""

import logging
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from . import _address
from .exceptions import CollectorUnavailable, SMDebugNotImplementedError
from .step_state import StepState
from .trial import Trial

__all__ = ["create_trial", "delete_trial", "list_trials", "TrialInfo", "TrialList", "Trial", "StepState"]

logger = logging.getLogger("tensorkeep")


@dataclass(frozen=True)
class TrialInfo:
    """One trial of a listing, and the collector that holds it."""

    name: str
    collector: str
    ended: bool
    num_workers: int
    num_steps: int
    last_step: int
    num_tensors: int
    stop_requested: bool

    @property
    def url(self) -> str:
        return f"{_address.SCHEME}{self.collector}/{self.name}"


class TrialList(list):
    """A list of TrialInfo sorted by name; ``unavailable`` maps each collector
    that did not answer to why (its trials are missing from the list)."""

    unavailable: Dict[str, str]


def list_trials(server: Optional[str] = None, *, strict: bool = False, timeout: float = 10.0) -> TrialList:
    """The trials of every collector (``server``: ``HOST:PORT`` or a comma list;
    default ``TENSORKEEP_SERVERS``, else ``TENSORKEEP_SERVER``), asked in parallel.

    A collector that does not answer makes only its trials missing: it is named
    in a warning (logger ``tensorkeep``) and in the result's ``unavailable``;
    ``strict=True`` raises CollectorUnavailable naming them instead.
    """
    from . import _cluster

    servers = _address.resolve_servers(server)
    found, failures = _cluster.list_all(servers, timeout=timeout)
    if failures and (strict or len(failures) == len(servers)):
        raise CollectorUnavailable(
            "; ".join(f"the trials of the collector at {c} are not listed: {why}" for c, why in failures.items())
        )
    for collector, why in failures.items():
        logger.warning("the trials of the collector at %s are not listed: %s", collector, why)
    out = TrialList(
        TrialInfo(
            name=t.name,
            collector=collector,
            ended=t.ended,
            num_workers=t.num_workers,
            num_steps=t.num_steps,
            last_step=t.last_step,
            num_tensors=t.num_tensors,
            stop_requested=t.stop_requested,
        )
        for collector, t in found
    )
    out.unavailable = failures
    return out


def create_trial(
    path: str,
    name: Optional[str] = None,
    profiler: bool = False,
    output_dir: Optional[str] = None,
    *,
    range_steps: Optional[Tuple[Optional[int], Optional[int]]] = None,
    parallel: bool = True,
    check: bool = False,
    index_mode: bool = True,
    cache: bool = False,
    server: Optional[str] = None,
) -> Trial:
    """Creates a Trial over the tensors a training job saved (or is saving) to a collector.

    Args:
        path: ``tensorkeep://HOST:PORT/TRIAL``, or a bare trial name with the
            collector taken from ``server`` or the environment variable
            ``TENSORKEEP_SERVERS`` / ``TENSORKEEP_SERVER``. With a cluster's
            collectors (``tensorkeep://H1:P1,H2:P2/TRIAL``, a comma list) the
            trial is read from the collector that holds it (docs/scaling-out.md).
        name: any string to help you manage different trials; defaults to the
            trial's name.
        range_steps: ``(begin, end)`` restricts the analysis to global steps
            ``begin <= step < end``; either may be None. ``(100, None)`` loads
            all steps from 100, ``(None, 100)`` all steps before 100.

    ``profiler``, ``output_dir``, ``parallel``, ``check``, ``index_mode`` and
    ``cache`` are smdebug's arguments (its signature), accepted so its calls port unchanged: the collector
    answers every query (nothing is read in parallel or cached here), and
    ``profiler=True`` (smdebug's profiler trial) is refused with
    NotImplementedError, as tensorkeep stores no profiler data. A
    ``(begin, end)`` pair passed third is taken as ``range_steps`` (this
    function's older signature).

    The trial need not exist yet: a Trial made before the job writes anything
    sees no steps until the job's first steps complete (live analysis). Nothing
    is sent to the collector until the first query (with a cluster's
    collectors, they are asked here which one holds the trial).
    """
    if isinstance(profiler, (tuple, list)) and range_steps is None:
        # create_trial(path, name, (begin, end)): tensorkeep's older order.
        profiler, range_steps = False, profiler
    if profiler:
        raise SMDebugNotImplementedError(
            "create_trial(profiler=True): tensorkeep stores no profiler data; "
            "create the trial without profiler=True to analyse the saved tensors"
        )
    return Trial(_address.parse(path, server), name=name, range_steps=range_steps)


def delete_trial(path: str, server: Optional[str] = None, *, wait_reclaimed: bool = True) -> Dict[str, Any]:
    """Deletes a trial and everything stored of it from its collector (needs an admin token).

    ``path`` and ``server`` are as for create_trial. Returns what was deleted
    (see Trial.delete). Raises TrialNotFound when there is no such trial.
    """
    trial = Trial(_address.parse(path, server))
    try:
        return trial.delete(wait_reclaimed=wait_reclaimed)
    finally:
        trial.close()
