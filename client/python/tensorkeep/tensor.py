"""Tensor: one saved tensor of a trial, across steps and workers (smdebug's Tensor API).

Retrieve it with ``trial.tensor(name)``. Steps passed with a mode other than
GLOBAL are mode steps of that mode.
"""

from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Tuple

import grpc
import numpy as np

from . import _dtypes, _errors, _malloc, _names
from ._channel import pb
from .exceptions import (
    ShapeUnavailableForStep,
    SMDebugNotImplementedError,
    TensorkeepError,
    TensorUnavailable,
    TensorUnavailableForStep,
    TrialNotFound,
)
from .modes import ModeKeys, to_mode

if TYPE_CHECKING:  # pragma: no cover
    from .trial import Trial

REDUCTION_NAMES = ("min", "max", "mean", "std", "variance", "sum", "prod", "l1", "l2")

# Values of at least this many bytes (a packed message of them, or one large
# value) are carved out of a heap block faulted in huge pages (_malloc.reserve):
# smaller reads do not make the process fault in a block of 16 MiB.
_RESERVE_FROM = 256 << 10


class Tensor:
    """A tensor saved by a training job, uniquely identified by its name.

    Attributes: ``name``, ``trial`` (the Trial it belongs to).
    """

    def __init__(self, name: str, trial: "Trial"):
        self.name = name
        self.trial = trial

    def __repr__(self) -> str:
        return f"<tensorkeep.Tensor {self.name} of trial {self.trial.name}>"

    # ------------------------------------------------------------------

    def steps(self, mode: Any = ModeKeys.GLOBAL, show_incomplete_steps: bool = False) -> List[int]:
        """Queries the steps for which the tensor was saved.

        By default only the steps which have been received from all workers
        (complete steps); with ``show_incomplete_steps``, steps received from at
        least one worker. With a mode other than GLOBAL, mode steps of that mode.
        """
        mode = to_mode(mode, allow_none=True)
        t = self.trial
        req = pb.ListStepsRequest(
            trial=t.trial,
            mode=int(mode),
            show_incomplete_steps=bool(show_incomplete_steps),
            tensor=self.name,
            range_begin=t._range_begin,
            range_end=t._range_end,
        )
        return t._list_steps(req, mode)

    def value(self, step_num: int, mode: Any = ModeKeys.GLOBAL, worker: Optional[str] = None) -> np.ndarray:
        """Gets the value of the tensor at a given step as a numpy array.

        The array has the dtype and shape that were saved, and is writable. With
        several workers and ``worker=None``, the lexically first worker that saved
        it is used. Raises TensorUnavailableForStep (not saved at this step, or
        only its reductions were), StepUnavailable, StepNotYetAvailable,
        NoMoreData, InvalidWorker as smdebug does.
        """
        mode = to_mode(mode, allow_none=True)
        step_num = _names.check_step(step_num)
        self.trial._check_step_visible(step_num, mode, self.name)
        req = self._request(step_num, mode, worker)
        ctx = dict(step=step_num, mode=mode, worker=worker)
        value = None
        # Read the stream to its end (one value), so the call completes rather
        # than being cancelled half-way.
        for _, _, arr in self._decode(self.trial._stream("GetValue", req, bulk=True), ctx):
            if value is None:
                value = arr
        if value is None:
            raise TensorkeepError(f"the collector sent no value for {self.name} at step {step_num}")
        return value

    def values(self, mode: Any = ModeKeys.GLOBAL, worker: Optional[str] = None) -> Dict[int, np.ndarray]:
        """Gets the values of the tensor for all (complete) steps of a given mode.

        Returns a dict from step (a mode step when ``mode`` is not GLOBAL) to
        numpy array, fetched in one streamed call. Restricted to ``range_steps``.
        """
        mode = to_mode(mode, allow_none=True)
        t = self.trial
        req = pb.TensorValuesRequest(
            trial=t.trial,
            tensor=self.name,
            mode=int(mode),
            worker=_check_worker(worker),
            range_begin=t._range_begin,
            range_end=t._range_end,
            packed=True,
        )
        by_mode_step = mode != ModeKeys.GLOBAL
        out: Dict[int, np.ndarray] = {}
        ctx = dict(mode=mode, worker=worker)
        for step, mode_step, arr in self._decode(t._stream("GetValues", req, bulk=True), ctx):
            out[mode_step if by_mode_step else step] = arr
        if not t.dynamic_refresh:  # inside no_refresh: the steps seen at the last refresh
            frozen = set(self.steps(mode))
            out = {s: v for s, v in out.items() if s in frozen}
        return out

    def shape(self, step_num: int, mode: Any = ModeKeys.GLOBAL, worker: Optional[str] = None) -> Tuple[int, ...]:
        """The shape of the tensor saved at a step, as a tuple (smdebug's method).

        Raises ShapeUnavailableForStep when only reductions were saved there,
        and what ``value`` raises for a step that was not saved.
        """
        mode = to_mode(mode, allow_none=True)
        step_num = _names.check_step(step_num)
        self.trial._check_step_visible(step_num, mode, self.name)
        req = self._request(step_num, mode, worker)
        ctx = dict(step=step_num, mode=mode, worker=worker)
        stream = self.trial._stream("GetValue", req, bulk=True)
        try:
            for m in _unpack(stream):
                if m.header:  # the header carries the shape: no need for the data
                    return tuple(int(d) for d in m.shape)
        except grpc.RpcError as e:
            err = _errors.translate(e, trial=self.trial.trial, tname=self.name, **ctx)
            if isinstance(err, TrialNotFound):
                err = TensorUnavailable(self.name)
            if isinstance(err, TensorUnavailableForStep) and self._has_saved_reductions(step_num, mode, worker):
                err = ShapeUnavailableForStep(self.name, step_num, mode)
            raise err from None
        finally:
            stream.cancel()
        raise ShapeUnavailableForStep(self.name, step_num, mode)

    def shapes(self, mode: Any = ModeKeys.GLOBAL, worker: Optional[str] = None) -> Dict[int, Tuple[int, ...]]:
        """``{step: shape}`` for every (complete) step of ``mode`` (smdebug's method)."""
        return {s: self.shape(s, mode=mode, worker=worker) for s in self.steps(mode)}

    def step(self, step_num: int, mode: Any = ModeKeys.GLOBAL, worker: Optional[str] = None) -> None:
        raise SMDebugNotImplementedError(
            "step method has been removed. Please use tensor.value or tensor.reduction_value methods"
        )

    def _has_saved_reductions(self, step_num: int, mode: ModeKeys, worker: Optional[str]) -> bool:
        try:
            return bool(self.reduction_values(step_num, mode=mode, worker=worker))
        except TensorkeepError:
            return False

    def reduction_value(
        self,
        step_num: int,
        reduction_name: str,
        mode: Any = ModeKeys.GLOBAL,
        worker: Optional[str] = None,
        abs: bool = False,
    ) -> Any:
        """Gets the reduction value of the tensor at a particular step.

        ``reduction_name`` is one of min, max, mean, std, variance, sum, prod and
        the norms l1, l2 (of the flattened tensor); with ``abs`` the reduction is
        taken of the absolute value. As smdebug: a reduction saved by the
        training job is returned as saved, a float64 array of shape ``(1,)``;
        otherwise it is computed (on the collector) from the saved tensor and
        returned as a numpy float64 scalar. If neither is available, raises
        TensorUnavailableForStep. A computed ``std``/``variance`` is the
        population statistic (ddof=0, numpy's, as smdebug computes it).
        """
        if reduction_name not in REDUCTION_NAMES:
            raise ValueError(
                f"invalid reduction {reduction_name!r}: expected one of {', '.join(REDUCTION_NAMES)}"
            )
        mode = to_mode(mode, allow_none=True)
        step_num = _names.check_step(step_num)
        self.trial._check_step_visible(step_num, mode, self.name)
        saved = self.reduction_values(step_num, mode=mode, worker=worker)
        key = (reduction_name, bool(abs))
        if key in saved:
            return saved[key]
        req = pb.ReductionsRequest(
            tensor=self._request(step_num, mode, worker),
            reductions=[pb.ReductionSpec(name=reduction_name, abs=bool(abs))],
        )
        resp = self._unary("GetReductions", req, step_num, mode, worker)
        for r in resp.reductions:
            if r.name == reduction_name and r.abs == bool(abs):
                return np.float64(r.value)
        raise TensorkeepError(f"the collector did not return {reduction_name} of {self.name}")

    def reduction_values(
        self, step_num: int, mode: Any = ModeKeys.GLOBAL, worker: Optional[str] = None
    ) -> Dict[Tuple[str, bool], np.ndarray]:
        """Gets all reduction values saved for the tensor at a particular step.

        Returns ``{(reduction_name, abs): value}``, each value a float64 array of
        shape ``(1,)`` as smdebug returns them. Only the reductions which were
        saved from the training job are returned; none are computed.
        """
        mode = to_mode(mode, allow_none=True)
        step_num = _names.check_step(step_num)
        req = pb.ReductionsRequest(tensor=self._request(step_num, mode, worker), saved_only=True)
        resp = self._unary("GetReductions", req, step_num, mode, worker)
        return {(r.name, bool(r.abs)): np.array([r.value], dtype=np.float64) for r in resp.reductions}

    def workers(self, step_num: int, mode: Any = ModeKeys.GLOBAL) -> List[str]:
        """Gets all the workers for which this tensor was saved at a given step (sorted)."""
        mode = to_mode(mode, allow_none=True)
        step_num = _names.check_step(step_num)
        req = pb.TensorWorkersRequest(trial=self.trial.trial, tensor=self.name, step=step_num, mode=int(mode))
        return sorted(self._unary("TensorWorkers", req, step_num, mode, None).workers)

    def prev_steps(self, step: int, n: Optional[int] = None, mode: Any = ModeKeys.GLOBAL) -> List[int]:
        """Gets the last ``n`` steps (of ``mode``) at which the tensor was saved, up to and
        including ``step``, in ascending order. Fewer if fewer were saved. ``n``
        None (or 0, as smdebug's ``if n:``) gives every such step."""
        mode = to_mode(mode, allow_none=True)
        step = _names.check_step(step)
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise ValueError(f"n must be a non-negative int or None, got {n!r}")
        t = self.trial
        if not n or t.range_steps is not None or not t.dynamic_refresh:
            # Honour range_steps / a frozen view: from the steps this trial sees.
            steps = [s for s in self.steps(mode) if s <= step]
            return steps[-n:] if n else steps
        req = pb.PrevStepsRequest(trial=t.trial, tensor=self.name, step=step, n=n, mode=int(mode))
        return list(self._unary("PrevSteps", req, step, mode, None).steps)

    def histogram(
        self,
        step_num: int,
        bins: int = 30,
        range: Optional[Tuple[float, float]] = None,
        mode: Any = ModeKeys.GLOBAL,
        worker: Optional[str] = None,
    ) -> Tuple[np.ndarray, np.ndarray]:
        """Computes a histogram of the tensor's value at a step, on the collector.

        Returns ``(edges, counts)`` as ``numpy.histogram`` would return
        ``(counts, edges)``: ``edges`` has ``bins + 1`` float64 values, ``counts``
        ``bins`` int64 values. ``range=(lo, hi)`` fixes the edges; by default they
        span the finite values. NaN and values outside the range are left out.
        """
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise ValueError(f"bins must be a positive int, got {bins!r}")
        mode = to_mode(mode, allow_none=True)
        step_num = _names.check_step(step_num)
        req = pb.HistogramRequest(tensor=self._request(step_num, mode, worker), bins=bins)
        if range is not None:
            lo, hi = (float(x) for x in range)
            if not lo <= hi:
                raise ValueError(f"range must be (min, max) with min <= max, got {range!r}")
            req.has_range, req.range_min, req.range_max = True, lo, hi
        resp = self._unary("GetHistogram", req, step_num, mode, worker)
        return np.array(resp.edges, dtype=np.float64), np.array(resp.counts, dtype=np.int64)

    # ------------------------------------------------------------------

    def _request(self, step: int, mode: ModeKeys, worker: Optional[str]) -> Any:
        return pb.TensorRequest(
            trial=self.trial.trial, tensor=self.name, step=step, mode=int(mode), worker=_check_worker(worker)
        )

    def _unary(self, rpc: str, req: Any, step: Optional[int], mode: ModeKeys, worker: Optional[str]) -> Any:
        try:
            return self.trial._unary(rpc, req, tname=self.name, step=step, mode=mode, worker=worker)
        except TrialNotFound:
            raise TensorUnavailable(self.name) from None

    def _decode(self, stream: Any, ctx: Dict[str, Any]) -> Iterator[Tuple[int, int, np.ndarray]]:
        """Yields (step, mode step, array) for each value of a GetValue/GetValues stream.

        A value is a header message with its first bytes, followed by messages
        carrying only data until ``value_size`` bytes have arrived; or a
        complete value with further ones packed after it (``packed_steps``).
        """
        from_wire = _dtypes.from_wire
        head = None
        buf: Optional[bytearray] = None
        filled = 0
        try:
            for m in _unpack(stream):
                data = m.data
                if m.header:
                    if head is not None:
                        raise TensorkeepError(f"truncated value of {self.name} at step {head.step}")
                    size = m.value_size
                    packed = m.packed_steps
                    if packed:
                        count = 1 + len(packed)
                        if len(data) != count * size or len(m.packed_mode_steps) != len(packed):
                            raise TensorkeepError(
                                f"corrupt packed values of {self.name} from step {m.step}: "
                                f"{len(data)} bytes for {count} values of {size}"
                            )
                        if len(data) >= _RESERVE_FROM:
                            _malloc.reserve(len(data))
                        arrays = _dtypes.split_wire(m.dtype, m.shape, data, count)
                        yield m.step, m.mode_step, arrays[0]
                        yield from zip(packed, m.packed_mode_steps, arrays[1:])
                        continue
                    if size >= _RESERVE_FROM:
                        _malloc.reserve(size)
                    if len(data) >= size:
                        yield m.step, m.mode_step, from_wire(m.dtype, m.shape, data)
                        continue
                    head, buf, filled = m, bytearray(size), len(data)
                    buf[:filled] = data
                else:
                    if head is None:
                        raise TensorkeepError(f"value data without a header for {self.name}")
                    end = filled + len(data)
                    if end > len(buf):
                        raise TensorkeepError(f"oversized value of {self.name} at step {head.step}")
                    buf[filled:end] = data
                    filled = end
                if head is not None and filled == len(buf):
                    yield head.step, head.mode_step, from_wire(head.dtype, head.shape, buf)
                    head, buf = None, None
        except grpc.RpcError as e:
            err = _errors.translate(
                e, trial=self.trial.trial, tname=self.name, target=self.trial.address.target, **ctx
            )
            if isinstance(err, TrialNotFound):
                err = TensorUnavailable(self.name)
            raise err from None
        finally:
            if hasattr(stream, "cancel"):
                stream.cancel()  # no-op when the stream completed
        if head is not None:
            raise TensorkeepError(f"truncated value of {self.name} at step {head.step}")


def _unpack(stream: Any) -> Iterator[Any]:
    """The TensorValue messages of a stream, each followed by the further small,
    complete values the collector packed into it (``batched``)."""
    for message in stream:
        yield message
        if message.batched:
            yield from message.batched


def _check_worker(worker: Optional[str]) -> str:
    if worker is None:
        return ""
    if not isinstance(worker, str):
        raise TypeError(f"worker must be a str, got {type(worker).__name__}")
    return worker
