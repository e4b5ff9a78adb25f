"""Trial: queries the tensors of one training job on a collector (smdebug's Trial API).

A Trial sees the newest complete steps at every call ("always fresh"); inside
``tensorkeep.analysis.no_refresh(trial)`` each listing (steps, tensor names,
modes, workers, collections) is fetched once and then served unchanged until
the block ends.

A trial can be created before its job writes anything (live analysis): until
the collector has seen the trial, listings are empty, ``has_passed_step`` says
NOT_YET_AVAILABLE, ``tensor(name)`` raises TensorUnavailable and
``wait_for_steps`` waits for the trial to appear.

Thread safety: a Trial may be used from several threads; ``no_refresh`` and
``refresh`` affect every thread using it.
"""

import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import grpc

from . import _channel, _errors, _names
from ._address import Address
from ._channel import pb
from .collection import Collection
from .exceptions import (
    CollectorUnavailable,
    NoMoreData,
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

# Retries of an idempotent query that failed for want of a collector.
_READ_RETRY_DELAYS = (0.1, 0.3, 1.0)
# How often wait_for_steps looks for a trial the collector has not seen yet.
_TRIAL_POLL_MAX = 1.0


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
        self.address = address
        self.trial = address.trial
        self.path = address.url
        self.name = name if name is not None else address.trial
        self.range_steps = _check_range(range_steps)
        begin, end = self.range_steps or (None, None)
        self._range_begin = begin or 0
        self._range_end = end or 0
        self._channel = _channel.open_channel(address.target)
        self._stub = _channel.pb_grpc.TensorKeepStub(self._channel)
        self._bulk_channel: Optional[grpc.Channel] = None  # for values; made on first use
        self._closed = False
        self._bulk_stub: Any = None
        self._tensors: Dict[str, Tensor] = {}
        self._step_maps: Dict[Tuple[int, int], Any] = {}
        # no_refresh/refresh: a stack of previous states, and the listings cache.
        self.dynamic_refresh = True
        self._refresh_stack: List[bool] = []
        self._cache: Dict[tuple, Any] = {}

    # ------------------------------------------------------------------
    # Names and steps
    # ------------------------------------------------------------------

    def tensor_names(
        self,
        step: Optional[int] = None,
        mode: Any = ModeKeys.GLOBAL,
        regex: Union[str, Iterable[str], None] = None,
        collection: Union[str, Collection, None] = None,
    ) -> List[str]:
        """Retrieves names of tensors saved.

        Args:
            step: only tensors saved at this step. The step number is treated as
                a step of ``mode`` (a global step by default).
            mode: only tensors saved in this mode (modes.GLOBAL: any).
            regex: a regex or list of regexes; names matching any (search
                semantics, as ``re.search``) are returned. The collector runs
                them with RE2: Python's syntax without backreferences or
                lookahead/lookbehind; a regex it refuses raises BadRequest.
            collection: a Collection or the name of one.

        You can only pass one of ``regex`` and ``collection`` (ValueError).
        Returns a sorted list of names, empty for a trial not seen yet.
        """
        mode = to_mode(mode, allow_none=True)
        if regex is not None and collection is not None:
            raise ValueError("tensor_names: pass only one of regex and collection")
        regexes: List[str] = []
        if regex is not None:
            regexes = [regex] if isinstance(regex, str) else list(regex)
            for r in regexes:
                if not isinstance(r, str):
                    raise TypeError(f"regex must be a str or a list of str, got {type(r).__name__}")
            _names.check_regexes(regexes)
        coll = ""
        if collection is not None:
            if isinstance(collection, Collection):
                coll = collection.name
            elif isinstance(collection, str):
                coll = collection
            else:
                raise TypeError(f"Invalid argument type for collection {collection.__class__}")
        req = pb.ListTensorNamesRequest(trial=self.trial, mode=int(mode), regex=regexes, collection=coll)
        if step is not None:
            req.has_step = True
            req.step = _names.check_step(step)

        def fetch() -> List[str]:
            try:
                names = sorted(self._unary("ListTensorNames", req, step=step, mode=mode).names)
            except TrialNotFound:
                return []
            return names

        return list(self._listing(("names", req.SerializeToString()), fetch))

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
                return []
            return sorted(ModeKeys(m) for m in summary.modes if m in ModeKeys._value2member_map_)

        return list(self._listing(("modes",), fetch))

    def mode(self, global_step: int) -> ModeKeys:
        """Returns the mode of a global step.

        Raises StepUnavailable (or StepNotYetAvailable) for a step that was not
        saved (smdebug returns None there).
        """
        return self._map(ModeKeys.GLOBAL, global_step).mode_k

    def mode_step(self, global_step: int) -> int:
        """Returns the mode step of a global step (see ``mode``)."""
        return self._map(ModeKeys.GLOBAL, global_step).mode_step

    def global_step(self, mode: Any, mode_step: int) -> int:
        """Returns the global step of step ``mode_step`` of ``mode``."""
        mode = to_mode(mode)
        if mode == ModeKeys.GLOBAL:
            return _names.check_step(mode_step, "mode_step")
        return self._map(mode, mode_step).global_step

    def workers(self) -> List[str]:
        """A sorted list of names of the workers from which data was saved."""

        def fetch() -> List[str]:
            try:
                return sorted(self._unary("ListWorkers", pb.TrialRef(trial=self.trial)).workers)
            except TrialNotFound:
                return []

        return list(self._listing(("workers",), fetch))

    def collections(self) -> Dict[str, Collection]:
        """A dictionary indexed by the name of the collection, with the Collection as value."""

        def fetch() -> Dict[str, Collection]:
            try:
                resp = self._unary("ListCollections", pb.TrialRef(trial=self.trial))
            except TrialNotFound:
                return {}
            return {c.name: Collection(c.name, c.tensor_names) for c in resp.collections}

        return dict(self._listing(("collections",), fetch))

    def collection(self, coll_name: str) -> Collection:
        """The Collection named ``coll_name``; KeyError if the trial has none so named."""
        if not isinstance(coll_name, str):
            raise TypeError(f"collection name must be a str, got {type(coll_name).__name__}")
        if not self.dynamic_refresh:
            return self.collections()[coll_name]
        try:
            c = self._unary("GetCollection", pb.CollectionRequest(trial=self.trial, name=coll_name))
        except TensorkeepError as e:
            if isinstance(e, TrialNotFound) or e.code == "NOT_FOUND":
                raise KeyError(coll_name) from None
            raise
        return Collection(c.name, c.tensor_names)

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
            return StepState.NOT_YET_AVAILABLE
        return {
            pb.AVAILABLE: StepState.AVAILABLE,
            pb.UNAVAILABLE: StepState.UNAVAILABLE,
        }.get(resp.state, StepState.NOT_YET_AVAILABLE)

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
            err = _errors.translate(e, trial=self.trial, step=step, mode=mode)
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

    def _set_refresh(self, on: bool) -> None:
        """Enters a refresh (``on``) or no_refresh block; see tensorkeep.analysis."""
        self._refresh_stack.append(self.dynamic_refresh)
        if self.dynamic_refresh != on:
            self._cache.clear()
        self.dynamic_refresh = on

    def _restore_refresh(self) -> None:
        """Leaves the innermost refresh/no_refresh block."""
        prev = self._refresh_stack.pop()
        if prev != self.dynamic_refresh:
            self._cache.clear()
        self.dynamic_refresh = prev

    def _listing(self, key: tuple, fetch: Callable[[], Any]) -> Any:
        if self.dynamic_refresh:
            return fetch()
        try:
            return self._cache[key]
        except KeyError:
            value = fetch()
            self._cache[key] = value
            return value

    def _list_steps(self, req: Any, mode: ModeKeys) -> List[int]:
        def fetch() -> List[int]:
            try:
                return list(self._unary("ListSteps", req, tname=req.tensor or None, mode=mode).steps)
            except TrialNotFound:
                return []

        return list(self._listing(("steps", req.SerializeToString()), fetch))

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
                raise _errors.translate(e, trial=self.trial, **context) from None

    def _stream(self, rpc: str, req: Any, bulk: bool = False) -> Any:
        """Starts a server-streaming call; ``bulk`` for value transfers (see _channel)."""
        self._check_open()
        if not bulk:
            return getattr(self._stub, rpc)(req)
        if self._bulk_stub is None:
            self._bulk_channel = _channel.open_channel(self.address.target, bulk=True)
            self._bulk_stub = _channel.pb_grpc.TensorKeepStub(self._bulk_channel)
        return getattr(self._bulk_stub, rpc)(req)


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
