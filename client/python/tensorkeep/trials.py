"""create_trial: the entry point of the analysis API, as smdebug.trials."""

from typing import Any, Dict, Optional, Tuple

from . import _address
from .exceptions import SMDebugNotImplementedError
from .step_state import StepState
from .trial import Trial

__all__ = ["create_trial", "delete_trial", "Trial", "StepState"]


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
            ``TENSORKEEP_SERVER`` (``HOST:PORT``).
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
    is sent to the collector until the first query.
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
