"""no_refresh / refresh: control whether trials look for new data (smdebug.analysis.utils).

By default a trial refreshes each time you query it: it asks the collector and
sees the newest complete steps. If you know the saved data will not change, or
are not interested in the latest data, stop the refreshing::

    with no_refresh(trials) as trials:
        ...  # the trials show what they held at their last refresh before
             # the block: steps, tensor names, a tensor's steps and values,
             # step mappings and has_passed_step keep to it

Similarly ``with refresh(trials):`` turns refreshing back on inside a
``no_refresh`` block. Blocks nest.
"""

from contextlib import contextmanager
from typing import Any, Iterable, Iterator, List, Union

from ..trial import Trial

__all__ = ["no_refresh", "refresh"]


def _as_list(trials: Union[Trial, Iterable[Trial]]) -> List[Trial]:
    if isinstance(trials, Trial):
        return [trials]
    out = list(trials)
    for t in out:
        if not isinstance(t, Trial):
            raise TypeError(f"expected a Trial or a list of Trials, got {type(t).__name__}")
    return out


@contextmanager
def _refresh_block(trials: Union[Trial, Iterable[Trial]], on: bool) -> Iterator[Any]:
    ts = _as_list(trials)
    for t in ts:
        t._set_refresh(on)
    try:
        yield trials  # smdebug's: `with no_refresh([tr]) as [tr]:`
    finally:
        for t in reversed(ts):
            t._restore_refresh()


def no_refresh(trials: Union[Trial, Iterable[Trial]]):
    """Inside the block, the trials do not look for new data."""
    return _refresh_block(trials, False)


def refresh(trials: Union[Trial, Iterable[Trial]]):
    """Inside the block, the trials look for new data at each query (the default)."""
    return _refresh_block(trials, True)
