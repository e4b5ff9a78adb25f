"""Trial: queries the tensors of one training job on a collector (smdebug's Trial API).

A Trial sees the newest complete steps at every call ("always fresh"); inside
``tensorkeep.analysis.utils.no_refresh(trial)`` it shows the trial as of the
last refresh before the block (the last query made while refreshing), as
smdebug does: steps, tensor names and values of later steps stay hidden.

A trial can be created before its job writes anything (live analysis): until
the collector has seen the trial, listings are empty, ``has_passed_step`` says
NOT_YET_AVAILABLE, ``tensor(name)`` raises TensorUnavailable and
``wait_for_steps`` waits for the trial to appear.

Thread safety: a Trial may be used from several threads; ``no_refresh`` and
``refresh`` affect every thread using it.
"""

import atexit
import difflib
import logging
import re
import time
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import grpc

from . import _channel, _collection_wire, _errors, _malloc, _names
from ._address import Address
from ._channel import pb
from .core.collection import Collection, CollectionKeys
from .exceptions import (
    CollectorUnavailable,
    InvalidWorker,
    NoMoreData,
    SMDebugNotImplementedError,
    StepNotYetAvailable,
    StepUnavailable,
    TensorkeepError,
    TensorUnavailable,
    TrialNotFound,
    WaitTimeout,
)
from .modes import ModeKeys, to_mode
from .rule_status import STATE_NUMBERS, RuleStatus
from .step_state import StepState
from .tensor import Tensor
from .worker_status import WorkerStatus

# Retries of an idempotent query that failed for want of a collector.
_READ_RETRY_DELAYS = (0.1, 0.3, 1.0)
# How often wait_for_steps looks for a trial the collector has not seen yet.
_TRIAL_POLL_MAX = 1.0
# A global step no trial reaches: "no limit" for the view's watermarks.
_NO_LIMIT = 1 << 63

logger = logging.getLogger("tensorkeep")


def _name_order(tname: str) -> int:
    """smdebug's order of inputs/labels/predictions: by the name's numeric suffix."""
    if not re.match(r".+_\d+", tname):
        tname = f"{tname}_0"
    try:
        return int(tname.split("_")[-1])
    except ValueError:
        return 0


class _View:
    """The trial as the collector described it at the last refresh."""

    __slots__ = ("complete_through", "last_step", "ended", "num_workers", "workers")

    def __init__(self, summary: Any = None):
        if summary is None:  # the collector has not seen the trial
            self.complete_through, self.last_step, self.ended = -1, -1, False
            self.num_workers, self.workers = 0, []
            return
        self.complete_through = int(summary.complete_through)
        self.last_step = int(summary.last_step)
        self.ended = bool(summary.ended)
        self.num_workers = int(summary.num_workers)
        self.workers = list(summary.workers)


class Trial:
    """The saved tensors of one training job, as smdebug's Trial.

    Use ``tensorkeep.trials.create_trial`` to make one. Attributes: ``name``
    (given to create_trial, defaults to the trial's name on the collector),
    ``trial`` (the trial's name on the collector), ``path`` (its URL),
    ``range_steps``.
    """

    def __init__(
        self,
        address: Address,
        name: Optional[str] = None,
        range_steps: Optional[Tuple[Optional[int], Optional[int]]] = None,
    ):
        self.logger = logger  # smdebug's attribute (its Rule reads trial.logger)
        self.address = address
        self.trial = address.trial
        self.path = address.url
        self.name = name if name is not None else address.trial
        self.range_steps = _check_range(range_steps)
        begin, end = self.range_steps or (None, None)
        self._range_begin = begin or 0
        self._range_end = end or 0
        # So that reading values (a fresh block of up to ~1 MB a message) does
        # not fault every page in again (see _malloc).
        _malloc.pin()
        self._channel = _channel.open_channel(address.target)
        self._stub = _channel.pb_grpc.TensorKeepStub(self._channel)
        self._bulk_channel: Optional[grpc.Channel] = None  # for values; made on first use
        self._closed = False
        self._bulk_stub: Any = None
        _open_trials[id(self)] = self
        self._tensors: Dict[str, Tensor] = {}
        self._step_maps: Dict[Tuple[int, int], Any] = {}
        # no_refresh/refresh: a stack of previous states; the trial as of the
        # last refresh (_view, numbered _view_gen); listings seen at that
        # refresh (_seen: key -> (gen, value)); listings answered inside the
        # current no_refresh block (_cache).
        self.dynamic_refresh = True
        self._refresh_stack: List[bool] = []
        self._cache: Dict[tuple, Any] = {}
        self._view: Optional[_View] = None
        self._view_gen = 0
        self._seen: Dict[tuple, Tuple[int, Any]] = {}
        # Collections handed out by collection(): the caller may edit them
        # (include, add_tensor_name), and queries use the edits, as smdebug.
        self._local_collections: Dict[str, Collection] = {}
        self._warned_not_found = False

    # ------------------------------------------------------------------
    # Names and steps
    # ------------------------------------------------------------------

    def tensor_names(
        self,
        show_prefixed_tensors: bool = False,
        *,
        step: Optional[int] = None,
        mode: Any = ModeKeys.GLOBAL,
        regex: Union[str, Iterable[str], None] = None,
        collection: Union[str, Collection, None] = None,
    ) -> List[str]:
        """Retrieves names of tensors saved (smdebug's signature).

        Args:
            show_prefixed_tensors: accepted for smdebug's signature; tensorkeep
                stores no prefixed (TF2 internal) tensors, so it changes nothing.
            step: only tensors saved at this step. The step number is treated as
                a step of ``mode`` (a global step by default).
            mode: only tensors saved in this mode (modes.GLOBAL: any).
            regex: a regex or list of regexes; names matching any (search
                semantics, as ``re.search``) are returned. The collector runs
                them with RE2: Python's syntax without backreferences or
                lookahead/lookbehind; a regex it refuses raises BadRequest.
            collection: a Collection or the name of one: the tensors saved as
                part of it, and those its ``include_regex`` matches (a
                collection edited locally with ``include``/``add_tensor_name``
                counts with its edits, as in smdebug).

        You can only pass one of ``regex`` and ``collection`` (ValueError).
        Returns a sorted list of names, empty for a trial not seen yet.
        Restricted to ``range_steps`` and, inside ``no_refresh``, to the steps
        seen at the last refresh.
        """
        mode = to_mode(mode, allow_none=True)
        if regex is not None and collection is not None:
            raise ValueError("Only one of `regex` or `collection` can be passed to this method")
        regexes: List[str] = []
        if regex is not None:
            regexes = [regex] if isinstance(regex, str) else list(regex)
            for r in regexes:
                if not isinstance(r, str):
                    raise TypeError(f"regex must be a str or a list of str, got {type(r).__name__}")
            _names.check_regexes(regexes)
        if collection is not None:
            if isinstance(collection, Collection):
                coll = collection.name
            elif isinstance(collection, str):
                coll = collection
            else:
                raise TypeError(f"Invalid argument type for collection {collection.__class__}")
            return self._collection_tensor_names(coll, step, mode)
        return self._names(step, mode, regexes, "")

    def _names(self, step: Optional[int], mode: ModeKeys, regexes: List[str], coll: str) -> List[str]:
        req = pb.ListTensorNamesRequest(trial=self.trial, mode=int(mode), regex=regexes, collection=coll)
        if step is not None:
            req.has_step = True
            req.step = _names.check_step(step)

        def fetch() -> List[str]:
            try:
                names = sorted(self._unary("ListTensorNames", req, step=step, mode=mode).names)
            except TrialNotFound:
                self._warn_not_found()
                return []
            return self._names_in_view(names, step, mode)

        return list(self._listing(("names", req.SerializeToString()), fetch, names=True))

    def _names_in_view(self, names: List[str], step: Optional[int], mode: ModeKeys) -> List[str]:
        """Keeps the names saved within range_steps (and, inside no_refresh, at
        steps seen at the last refresh), as smdebug loads only those steps."""
        begin, end = self._step_bounds(show_incomplete=True)
        if begin == 0 and end >= _NO_LIMIT:
            return names
        if step is not None:
            try:
                g = step if mode == ModeKeys.GLOBAL else self._map(mode, step).global_step
            except TensorkeepError:
                return []
            return names if begin <= g < end else []
        if end <= begin:
            return []
        if not self.dynamic_refresh and self.range_steps is None:
            # Nothing new since the last refresh: no name to hide.
            try:
                now = self._unary("GetTrial", pb.TrialRef(trial=self.trial))
                if int(now.last_step) < end:
                    return names
            except TensorkeepError:
                pass
        out = []
        for n in names:
            req = pb.ListStepsRequest(
                trial=self.trial, mode=int(mode), show_incomplete_steps=True, tensor=n,
                range_begin=begin, range_end=0 if end >= _NO_LIMIT else end,
            )
            try:
                if self._unary("ListSteps", req, tname=n, mode=mode).steps:
                    out.append(n)
            except TensorkeepError:
                pass
        return out

    def _collection_tensor_names(self, coll: str, step: Optional[int], mode: ModeKeys) -> List[str]:
        saved = set(self._names(step, mode, [], coll))
        local = self._local_collections.get(coll)
        if local is None:
            local = self._merge_collection(coll, self._stored_collection(coll))
        # smdebug: names of saved tensors matching any regex of the collection
        # (the collector ran those RE2 can; Python's re runs them all, with
        # the caller's edits), and the names it lists that were saved.
        everything = self._names(step, mode, [], "")
        known = set(everything)
        saved.update(n for n in local.tensor_names if n in known)
        pats = []
        for r in local.include_regex:
            try:
                pats.append(re.compile(r))
            except re.error as e:
                raise ValueError(f"collection {coll!r}: invalid include_regex {r!r}: {e}") from None
        if pats:
            saved.update(n for n in everything if any(p.search(n) for p in pats))
        if not saved:
            self.logger.warning("No tensors from the collection %s were saved", coll)
        return sorted(saved)

    def tensor(self, tname: str) -> Tensor:
        """Retrieves the Tensor object named ``tname``; TensorUnavailable if it was not saved."""
        if self.has_tensor(tname):
            return self._tensors[tname]
        raise TensorUnavailable(tname)

    def has_tensor(self, tname: str) -> bool:
        """True if the tensor is seen by the trial so far, else False."""
        if tname in self._tensors:
            return True
        if not isinstance(tname, str):
            raise TypeError(f"tensor name must be a str, got {type(tname).__name__}")
        if tname in self.tensor_names():
            self._tensors.setdefault(tname, Tensor(tname, self))
            return True
        return False

    def steps(self, mode: Any = None, show_incomplete_steps: bool = False) -> List[int]:
        """Retrieves a list of steps seen by the trial.

        Without a mode, global steps; with a mode, the mode steps of that mode.
        Only complete steps (saved by every expected worker, or followed by a
        complete step, or in an ended trial) unless ``show_incomplete_steps``.
        Steps are restricted to ``range_steps``.
        """
        mode = to_mode(mode, allow_none=True)
        req = pb.ListStepsRequest(
            trial=self.trial,
            mode=int(mode),
            show_incomplete_steps=bool(show_incomplete_steps),
            range_begin=self._range_begin,
            range_end=self._range_end,
        )
        return self._list_steps(req, mode)

    def modes(self) -> List[ModeKeys]:
        """Retrieves the modes for which data was saved."""

        def fetch() -> List[ModeKeys]:
            try:
                summary = self._unary("GetTrial", pb.TrialRef(trial=self.trial))
            except TrialNotFound:
                self._warn_not_found()
                return []
            return sorted(ModeKeys(m) for m in summary.modes if m in ModeKeys._value2member_map_)

        return list(self._listing(("modes",), fetch, names=True))

    def mode_modestep(self, global_step: int) -> Tuple[Optional[ModeKeys], Optional[int]]:
        """Returns ``(mode, mode_step)`` of a global step; ``(None, None)`` for a
        step the trial has not saved (or outside range_steps), as smdebug."""
        m = self._map_or_none(ModeKeys.GLOBAL, global_step)
        if m is None:
            return None, None
        return m.mode_k, m.mode_step

    def mode(self, global_step: int) -> Optional[ModeKeys]:
        """Returns the mode of a global step; None if it was not saved (smdebug)."""
        return self.mode_modestep(global_step)[0]

    def mode_step(self, global_step: int) -> Optional[int]:
        """Returns the mode step of a global step; None if it was not saved (smdebug)."""
        return self.mode_modestep(global_step)[1]

    def global_step(self, mode: Any, mode_step: int) -> Optional[int]:
        """Returns the global step of step ``mode_step`` of ``mode``; None if that
        mode step was not saved (smdebug). For GLOBAL, ``mode_step`` itself."""
        mode = to_mode(mode)
        if mode == ModeKeys.GLOBAL:
            return _names.check_step(mode_step, "mode_step")
        m = self._map_or_none(mode, mode_step)
        return None if m is None else m.global_step

    def _map_or_none(self, mode: ModeKeys, step: int) -> Optional["_StepMap"]:
        try:
            m = self._map(mode, step)
        except (StepUnavailable, StepNotYetAvailable, NoMoreData):
            return None
        begin, end = self._step_bounds(show_incomplete=True)
        return m if begin <= m.global_step < end else None

    def workers(self) -> List[str]:
        """A sorted list of names of the workers from which data was saved."""

        def fetch() -> List[str]:
            try:
                return sorted(self._unary("ListWorkers", pb.TrialRef(trial=self.trial)).workers)
            except TrialNotFound:
                self._warn_not_found()
                return []

        return list(self._listing(("workers",), fetch, names=True))

    @property
    def worker_set(self) -> set:
        """The set of workers from which data was saved (smdebug's attribute)."""
        return set(self.workers())

    @property
    def num_workers(self) -> int:
        """How many workers the trial expects (smdebug's attribute; 0 before any write)."""
        return self._current_view().num_workers

    @property
    def last_complete_step(self) -> int:
        """The highest global step every expected worker finished, -1 if none
        (smdebug's attribute; after the end, the last step saved)."""
        v = self._current_view()
        if v.complete_through < 0:
            return -1
        return min(v.complete_through, v.last_step) if v.last_step >= 0 else -1

    def worker_states(self) -> Dict[str, WorkerStatus]:
        """Each worker's status by name: its state (ACTIVE, CLOSED, LOST), the last
        step it saved a tensor at and the last it committed, whether it is
        connected (tensorkeep's own; smdebug has no worker states)."""
        resp = self._unary("ListWorkers", pb.TrialRef(trial=self.trial))
        return {s.worker: WorkerStatus.from_proto(s) for s in resp.statuses}

    def declare_worker_lost(self, worker: str) -> WorkerStatus:
        """Declares ``worker`` lost (as ``tensorkeep worker-lost``): later steps
        complete without it until it reconnects. Returns its status."""
        req = pb.DeclareWorkerLostRequest(trial=self.trial, worker=worker)
        return WorkerStatus.from_proto(self._unary("DeclareWorkerLost", req, retry=False, worker=worker))

    def collections(self) -> Dict[str, Collection]:
        """A dictionary indexed by the name of the collection, with the Collection as value.

        Every collection the training's hook configured (empty ones included,
        with their ``include_regex``, ``save_config`` and ``reduction_config``)
        and every collection tensors were saved under, as smdebug reads them
        from the collection files. Collections made or edited with
        ``collection(name)`` are included, with their edits.
        """

        def fetch() -> Dict[str, Any]:
            try:
                resp = self._unary("ListCollections", pb.TrialRef(trial=self.trial))
            except TrialNotFound:
                self._warn_not_found()
                return {}
            return {c.name: c for c in resp.collections}

        saved = dict(self._listing(("collections",), fetch, names=True))
        out: Dict[str, Collection] = {}
        for name in sorted(set(saved) | set(self._local_collections)):
            out[name] = self._merge_collection(name, saved.get(name))
        return out

    def collection(self, coll_name: str) -> Collection:
        """The Collection named ``coll_name``, made on demand as smdebug does.

        A collection the hook configured carries its configuration; a name
        the trial knows nothing of gives an empty Collection. The same object
        is returned each time: edit it (``include``, ``add_tensor_name``) and
        ``tensor_names(collection=...)`` follows the edits. The edits stay in
        this Trial; the collector is not changed.
        """
        if not isinstance(coll_name, str):
            raise TypeError(f"collection name must be a str, got {type(coll_name).__name__}")
        if not self.dynamic_refresh:
            return self.collections().get(coll_name) or self._merge_collection(coll_name, None)
        return self._merge_collection(coll_name, self._stored_collection(coll_name))

    def _stored_collection(self, coll_name: str) -> Any:
        """The collector's CollectionInfo of ``coll_name``, or None."""
        try:
            return self._unary("GetCollection", pb.CollectionRequest(trial=self.trial, name=coll_name))
        except TensorkeepError as e:
            if not (isinstance(e, TrialNotFound) or e.code == "NOT_FOUND"):
                raise
            return None

    def _merge_collection(self, name: str, info: Any) -> Collection:
        """The Collection object of ``name``, updated with what the collector
        has (``info``: a CollectionInfo or None). The caller's edits stay: a
        config the caller set is not replaced; names and regexes are added."""
        c = self._local_collections.get(name)
        if c is None:
            c = Collection(name)
            c._stored_configs = (None, None)  # type: ignore[attr-defined]
            self._local_collections[name] = c
        if info is None:
            return c
        if info.configured:
            cfg = info.config
            _collection_wire.add_regexes(c, cfg.include_regex)
            sc = _collection_wire.save_config_of(cfg)
            rc = _collection_wire.reduction_config_of(cfg)
            last_sc, last_rc = getattr(c, "_stored_configs", (None, None))
            if c.save_config is last_sc or c.save_config is None:
                c.save_config = sc
            if c.reduction_config is last_rc or c.reduction_config is None:
                c.reduction_config = rc
            c._stored_configs = (c.save_config, c.reduction_config)  # type: ignore[attr-defined]
            c.save_histogram = bool(cfg.save_histogram)
        for n in info.tensor_names:  # what the job saved since; the caller's edits stay
            c.add_tensor_name(n)
        return c

    # ------------------------------------------------------------------
    # smdebug's shortcuts to inputs, labels and predictions
    # ------------------------------------------------------------------

    def inputs(self, step: int, mode: Any = ModeKeys.GLOBAL) -> List[Any]:
        """The values of the ``inputs`` collection's tensors at ``step``, ordered by
        the number that ends their names (smdebug's order)."""
        names = sorted(
            self.tensor_names(step=step, mode=mode, collection=CollectionKeys.INPUTS), key=_name_order
        )
        return [self.tensor(n).value(step, mode=mode) for n in names]

    def labels(self, step: int, mode: Any = ModeKeys.GLOBAL) -> List[Any]:
        """The values of the tensors matching ``labels*`` at ``step`` (smdebug)."""
        return self._outputs(step, mode, "labels*")

    def predictions(self, step: int, mode: Any = ModeKeys.GLOBAL) -> List[Any]:
        """The values of the tensors matching ``predictions*`` at ``step`` (smdebug)."""
        return self._outputs(step, mode, "predictions*")

    def _outputs(self, step: int, mode: Any, regex: str) -> List[Any]:
        names = sorted(self.tensor_names(step=step, mode=mode, regex=regex), key=_name_order)
        return [self.tensor(n).value(step, mode=mode) for n in names]

    # ------------------------------------------------------------------
    # Live trials
    # ------------------------------------------------------------------

    def has_passed_step(self, step: int, mode: Any = ModeKeys.GLOBAL) -> StepState:
        """Whether the trial has passed ``step`` of ``mode``: AVAILABLE, NOT_YET_AVAILABLE or UNAVAILABLE.

        AVAILABLE: saved and complete. NOT_YET_AVAILABLE: saved by some workers
        only, or beyond everything saved while the job runs. UNAVAILABLE: not
        saved while a later step is complete, or beyond the end of an ended job.
        """
        mode = to_mode(mode, allow_none=True)
        step = _names.check_step(step)
        try:
            resp = self._unary(
                "HasPassedStep",
                pb.HasPassedStepRequest(trial=self.trial, step=step, mode=int(mode)),
                step=step,
                mode=mode,
            )
        except TrialNotFound:
            self._warn_not_found()
            return StepState.NOT_YET_AVAILABLE
        state = {
            pb.AVAILABLE: StepState.AVAILABLE,
            pb.UNAVAILABLE: StepState.UNAVAILABLE,
        }.get(resp.state, StepState.NOT_YET_AVAILABLE)
        if state == StepState.AVAILABLE and (self.range_steps is not None or not self.dynamic_refresh):
            try:
                self._check_step_visible(step, mode)
            except StepUnavailable:
                return StepState.UNAVAILABLE
            except (StepNotYetAvailable, NoMoreData):
                return StepState.NOT_YET_AVAILABLE
        elif self.dynamic_refresh:
            self._refresh_view()
        return state

    def wait_for_steps(
        self, required_steps: Iterable[int], mode: Any = ModeKeys.GLOBAL, timeout: Optional[float] = None
    ) -> None:
        """Waits till the requested steps are available, then returns.

        It only returns after we know definitely whether we have seen the steps:
        raises StepUnavailable for a step that was not saved and never will be,
        NoMoreData for a step beyond the last one of an ended trial, and
        WaitTimeout after ``timeout`` seconds (None: wait without limit).
        The collector wakes the call when steps complete; nothing polls, except
        that a trial the collector has not seen yet is looked for with backoff.
        """
        mode = to_mode(mode, allow_none=True)
        steps = [_names.check_step(s) for s in required_steps]
        if timeout is not None:
            if timeout != timeout:
                raise ValueError("timeout must be a number of seconds or None, got nan")
            if timeout > _names.MAX_WAIT_SECONDS:  # infinity too: no limit, as on the collector
                timeout = None
        if not steps:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.02
        failures = 0
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                self._wait_once(steps, mode, remaining)
                self.refresh_data()  # smdebug waits inside refresh(): the trial now shows them
                return
            except TrialNotFound:
                pass
            except CollectorUnavailable:
                # A restarting collector: retried like any query, then raised.
                if failures >= len(_READ_RETRY_DELAYS):
                    raise
                failures += 1
            except (StepUnavailable, NoMoreData):
                if len(steps) == 1:
                    raise
                for s in sorted(steps):  # find which step it is, as smdebug reports
                    remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                    self._wait_once([s], mode, remaining)
                self.refresh_data()
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"trial {self.trial} did not appear within {timeout} s")
            time.sleep(delay if deadline is None else min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, _TRIAL_POLL_MAX)

    def _wait_once(self, steps: List[int], mode: ModeKeys, timeout: Optional[float]) -> None:
        if len(steps) > _names.MAX_WAIT_STEPS:
            # The collector takes at most MAX_WAIT_STEPS steps a call: wait for
            # them in ascending slices (a step is AVAILABLE once complete, and
            # completeness only grows, so the answer is the same).
            steps = sorted(set(steps))
            deadline = None if timeout is None else time.monotonic() + timeout
            for i in range(0, len(steps), _names.MAX_WAIT_STEPS):
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                self._wait_once(steps[i : i + _names.MAX_WAIT_STEPS], mode, remaining)
            return
        req = pb.WaitForStepsRequest(
            trial=self.trial, steps=steps, mode=int(mode), timeout_seconds=timeout or 0.0
        )
        if timeout is not None and timeout <= 0:
            req.timeout_seconds = 1e-3
        step = steps[0] if len(steps) == 1 else None
        self._check_open()
        fut = self._stub.WaitForSteps.future(req, timeout=None if timeout is None else timeout + 5.0)
        try:
            fut.result()
        except KeyboardInterrupt:
            fut.cancel()
            raise
        except grpc.RpcError as e:
            err = _errors.translate(
                e, trial=self.trial, step=step, mode=mode, target=self.address.target
            )
            if isinstance(err, NoMoreData) and err.last_step is None and step is not None:
                filled = NoMoreData(step, mode, self._last_step(mode))
                filled.reason, filled.details, filled.code = err.reason, err.details, err.code
                err = filled
            raise err from None

    def _last_step(self, mode: ModeKeys) -> int:
        try:
            steps = self.steps(mode, show_incomplete_steps=True)
        except TensorkeepError:
            return -1
        return steps[-1] if steps else -1

    def rule_statuses(self) -> List[RuleStatus]:
        """The latest status of every rule evaluated on this trial (by rule name)."""
        try:
            resp = self._unary("ListRuleStatuses", pb.TrialRef(trial=self.trial))
        except TrialNotFound:
            return []
        return sorted((RuleStatus.from_proto(s) for s in resp.statuses), key=lambda s: s.rule)

    def report_rule_status(
        self,
        rule: str,
        state: str,
        *,
        step: int = -1,
        message: str = "",
        action: str = "",
        last_evaluated_step: int = -1,
    ) -> RuleStatus:
        """Reports a rule's status on this trial to the collector, as a rule worker does.

        ``state`` is "InProgress", "NoIssuesFound", "IssuesFound" or "Error".
        With ``action="stop"``, "IssuesFound" asks the trial's writers to stop.
        """
        if state not in STATE_NUMBERS:
            raise ValueError(f"invalid rule state {state!r}: expected one of {', '.join(STATE_NUMBERS)}")
        if action not in ("", "stop"):
            raise ValueError(f"invalid rule action {action!r}: expected '' or 'stop'")
        msg = pb.RuleStatus(
            trial=self.trial,
            rule=rule,
            state=STATE_NUMBERS[state],
            step=step,
            message=message,
            action=action,
            last_evaluated_step=last_evaluated_step,
        )
        return RuleStatus.from_proto(self._unary("ReportRuleStatus", msg, retry=False))

    def end(self) -> bool:
        """Ends the trial (as if every worker closed with end of training).

        Returns True if it was running.
        """
        return self._unary("EndTrial", pb.TrialRef(trial=self.trial), retry=False).was_running

    def delete(self, wait_reclaimed: bool = True) -> Dict[str, Any]:
        """Deletes the trial and everything stored of it (needs an admin token).

        Afterwards its readers get TrialNotFound, its writers an error naming
        who deleted it, and a writer opening the name starts a new, empty
        trial. With ``wait_reclaimed`` (the default) this returns once the
        collector has reclaimed the trial's space. Returns what was deleted:
        ``trial``, ``deleted_by``, ``deleted_unix``, ``steps``, ``workers``,
        ``tensor_names``, ``reclaimed`` and, when reclaimed, ``index_bytes``,
        ``value_bytes`` and ``value_files_freed_bytes``. Not retried (a repeat
        raises TrialNotFound).
        """
        r = self._unary(
            "DeleteTrial",
            pb.DeleteTrialRequest(trial=self.trial, wait_reclaimed=wait_reclaimed),
            retry=False,
        )
        return {
            "trial": r.trial,
            "deleted_by": r.deleted_by,
            "deleted_unix": r.deleted_unix,
            "steps": r.steps,
            "workers": r.workers,
            "tensor_names": r.tensor_names,
            "reclaimed": r.reclaimed,
            "index_bytes": r.index_bytes,
            "value_bytes": r.value_bytes,
            "value_files_freed_bytes": r.value_files_freed_bytes,
        }

    @property
    def loaded_all_steps(self) -> bool:
        """True once the trial ended: no more steps will come (smdebug's attribute)."""
        try:
            return self._unary("GetTrial", pb.TrialRef(trial=self.trial)).ended
        except TrialNotFound:
            return False

    # ------------------------------------------------------------------
    # Lifetime
    # ------------------------------------------------------------------

    def close(self) -> None:
        """Releases the connections to the collector. The Trial is unusable afterwards."""
        self._closed = True
        _open_trials.pop(id(self), None)
        for ch in (self.__dict__.pop("_channel", None), self.__dict__.pop("_bulk_channel", None)):
            if ch is not None:
                ch.close()

    def __del__(self) -> None:
        # gRPC does not close a channel that is garbage-collected; a Trial owns
        # its channels (its Tensors keep it alive), so it closes them.
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __enter__(self) -> "Trial":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tensorkeep.Trial name={self.name} path={self.path}>"

    def __hash__(self) -> int:
        return hash((self.name, self.path))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trial):
            return NotImplemented
        return (self.name, self.path) == (other.name, other.path)

    # ------------------------------------------------------------------
    # Internals shared with Tensor
    # ------------------------------------------------------------------

    def maybe_refresh(self, name: Optional[str] = None) -> None:
        """Looks for new data unless inside ``no_refresh`` (smdebug's method)."""
        if self.dynamic_refresh:
            self.refresh_data()

    def refresh_data(self) -> None:
        """Looks for new data now, even inside ``no_refresh`` (smdebug's method):
        the trial then shows the collector's current state."""
        self._refresh_view()
        self._cache.clear()

    def _set_refresh(self, on: bool) -> None:
        """Enters a refresh (``on``) or no_refresh block; see tensorkeep.analysis."""
        self._refresh_stack.append(self.dynamic_refresh)
        self._cache.clear()
        self.dynamic_refresh = on

    def _restore_refresh(self) -> None:
        """Leaves the innermost refresh/no_refresh block."""
        self._cache.clear()
        self.dynamic_refresh = self._refresh_stack.pop()

    def _refresh_view(self) -> "_View":
        """Asks the collector for the trial's state: the view no_refresh keeps."""
        try:
            view = _View(self._unary("GetTrial", pb.TrialRef(trial=self.trial)))
        except TrialNotFound:
            self._warn_not_found()
            view = _View(None)
        self._view = view
        self._view_gen += 1
        return view

    def _current_view(self) -> "_View":
        """While refreshing, the collector's state now; inside no_refresh, at the
        last refresh (or, if there was none, when the block's first query ran)."""
        if self.dynamic_refresh or self._view is None:
            return self._refresh_view()
        return self._view

    def _step_bounds(self, show_incomplete: bool = False) -> Tuple[int, int]:
        """[begin, end) of the global steps this trial shows now: range_steps, and
        inside no_refresh the steps complete (or, with show_incomplete, saved)
        at the last refresh."""
        begin = self._range_begin
        end = self._range_end or _NO_LIMIT
        if not self.dynamic_refresh:
            v = self._current_view()
            through = v.last_step if show_incomplete else v.complete_through
            end = min(end, through + 1 if through >= 0 else 0)
        return begin, end

    def _listing(self, key: tuple, fetch: Callable[[], Any], names: bool = False) -> Any:
        """Answers a listing. While refreshing, fresh (and, for the listings that
        steps cannot bound — names, modes, workers, collections — remembered as
        seen at this refresh); inside no_refresh, as seen at the last refresh,
        once per block."""
        if self.dynamic_refresh:
            if names:
                self._refresh_view()
                value = fetch()
                self._seen[key] = (self._view_gen, value)
                return value
            return fetch()
        try:
            return self._cache[key]
        except KeyError:
            pass
        self._current_view()
        seen = self._seen.get(key)
        value = seen[1] if seen is not None and seen[0] == self._view_gen else fetch()
        self._cache[key] = value
        return value

    def _list_steps(self, req: Any, mode: ModeKeys) -> List[int]:
        if not self.dynamic_refresh:
            begin, end = self._step_bounds(req.show_incomplete_steps)
            if end <= begin:
                return []
            req.range_begin = begin
            req.range_end = 0 if end >= _NO_LIMIT else end
        else:
            self._refresh_view()

        def fetch() -> List[int]:
            try:
                return list(self._unary("ListSteps", req, tname=req.tensor or None, mode=mode).steps)
            except TrialNotFound:
                self._warn_not_found()
                return []

        return list(self._listing(("steps", req.SerializeToString()), fetch))

    def _check_step_visible(self, step: int, mode: ModeKeys, tname: Optional[str] = None) -> None:
        """Raises what smdebug raises for a step outside range_steps or, inside
        no_refresh, beyond the last refresh: it has not loaded that step."""
        if self.range_steps is None and self.dynamic_refresh:
            return
        begin, end = self._step_bounds(show_incomplete=True)
        if mode == ModeKeys.GLOBAL:
            g = step
        else:
            m = self._map(mode, step)  # raises for a step never saved
            g = m.global_step
        if g < begin:
            raise StepUnavailable(step, mode)
        if g >= end:
            ended = self._current_view().ended
            if self._range_end and g >= self._range_end:  # never loaded: outside the range
                raise StepUnavailable(step, mode) if ended else StepNotYetAvailable(step, mode)
            if not ended:  # beyond the last refresh (no_refresh)
                raise StepNotYetAvailable(step, mode)

    def _warn_not_found(self) -> None:
        """Warns once that the collector has no such trial (a typo?), naming the
        nearest trial names it has; the trial may still come (live analysis)."""
        if self._warned_not_found:
            return
        self._warned_not_found = True
        try:
            names = [t.name for t in self._stub.ListTrials(pb.ListTrialsRequest(), timeout=10).trials]
        except Exception:  # the warning must not fail the query
            names = []
        near = difflib.get_close_matches(self.trial, names, n=3, cutoff=0.6)
        hint = (
            "; nearest trial names there: " + ", ".join(repr(n) for n in near)
            if near
            else f"; it has {len(names)} other trial(s)" if names else "; it has no trials yet"
        )
        self.logger.warning(
            "trial %r is not on the collector %s (yet): listings are empty until its "
            "job writes%s",
            self.trial,
            self.address.target,
            hint,
        )

    def _check_open(self) -> None:
        if self._closed:
            raise TensorkeepError(f"{self!r} is closed")

    def _map(self, mode: ModeKeys, step: int) -> Any:
        step = _names.check_step(step)
        key = (int(mode), step)
        m = self._step_maps.get(key)
        if m is None:
            try:
                m = self._unary(
                    "MapStep", pb.StepMappingRequest(trial=self.trial, mode=int(mode), step=step), step=step, mode=mode
                )
            except TrialNotFound:
                self._warn_not_found()
                raise StepNotYetAvailable(step, mode) from None
            m = _StepMap(m.global_step, ModeKeys(m.mode) if m.mode in ModeKeys._value2member_map_ else ModeKeys.GLOBAL, m.mode_step)
            self._step_maps[key] = m  # a step's mode never changes once saved
        return m

    def _unary(self, rpc: str, req: Any, *, retry: bool = True, **context: Any) -> Any:
        """Calls a unary RPC; translates failures to tensorkeep exceptions.

        Idempotent queries are retried a few times when the collector is unreachable.
        """
        self._check_open()
        fn = getattr(self._stub, rpc)
        delays = _READ_RETRY_DELAYS if retry else ()
        attempt = 0
        while True:
            try:
                return fn(req)
            except grpc.RpcError as e:
                if attempt < len(delays) and _errors.is_transient(e):
                    time.sleep(delays[attempt])
                    attempt += 1
                    continue
                raise _errors.translate(
                    e, trial=self.trial, target=self.address.target, **context
                ) from None

    def _stream(self, rpc: str, req: Any, bulk: bool = False) -> Any:
        """Starts a server-streaming call; ``bulk`` for value transfers (see _channel)."""
        self._check_open()
        if not bulk:
            return getattr(self._stub, rpc)(req)
        if self._bulk_stub is None:
            self._bulk_channel = _channel.open_channel(self.address.target, bulk=True)
            self._bulk_stub = _channel.pb_grpc.TensorKeepStub(self._bulk_channel)
        return getattr(self._bulk_stub, rpc)(req)


# Trials not closed yet, closed at interpreter exit by _close_open_trials.
# Keyed by id: a WeakSet would use Trial's __eq__, and keep one of two
# Trials of the same name and path.
_open_trials: "weakref.WeakValueDictionary[int, Trial]" = weakref.WeakValueDictionary()


@atexit.register
def _close_open_trials() -> None:
    """Closes, at interpreter exit, the channels of the Trials still open (a
    script that reads a trial and ends without closing it). Left open, they
    were torn down with the interpreter (by Trial.__del__ or gRPC's own
    finalizers), and gRPC can deadlock there: a script that read 40 MB and
    exited hung in Py_FinalizeEx, in gRPC's Cython layer calling back into
    Python and waiting on a lock, twice in ~20 runs (grpc/grpc#17001 and
    #42247 describe deadlocks of that kind). atexit runs before that, with
    the interpreter and gRPC's threads still whole."""
    for trial in list(_open_trials.values()):
        try:
            trial.close()
        except Exception:  # noqa: BLE001 - one Trial's failure must not keep the others open
            logger.debug("tensorkeep: closing %s at exit failed", trial, exc_info=True)


class _StepMap:
    __slots__ = ("global_step", "mode_k", "mode_step")

    def __init__(self, global_step: int, mode_k: ModeKeys, mode_step: int):
        self.global_step = global_step
        self.mode_k = mode_k
        self.mode_step = mode_step


def _check_range(range_steps: Any) -> Optional[Tuple[Optional[int], Optional[int]]]:
    if range_steps is None:
        return None
    if not isinstance(range_steps, (tuple, list)) or len(range_steps) != 2:
        raise TypeError("range_steps must be a (begin, end) pair")
    begin, end = range_steps
    begin = None if begin is None else _names.check_step(begin, "range_steps begin")
    end = None if end is None else _names.check_step(end, "range_steps end")
    if begin is not None and end is not None and end <= begin:
        raise ValueError("range_steps should be of the form (begin, end) where begin is less than end")
    if end == 0:
        raise ValueError("range_steps end must be > 0 (the range is empty)")
    return (begin, end)
