"""Writer: pushes the tensors of one worker of a training job to a collector.

    from tensorkeep import Writer, modes
    w = Writer("tensorkeep://127.0.0.1:PORT/my-trial", worker="worker_0", num_workers=1)
    w.write_tensor("layer1.weight", array, step=10, mode=modes.TRAIN, mode_step=7,
                   collections=("weights",))
    w.end_step(10)
    w.flush()
    w.close(end_of_training=True)

Writes are asynchronous: ``write_tensor`` validates its arguments and copies
the value once, into memory shared with the node's ``tensorkeep-agent``
(started on first use; tensorkeep._agent, tensorkeep._handover), which pushes
it to the collector with the C++ writer (client/writer.cc: batching, flow
control, acks, reconnect and resend), off this process's threads and GIL.
What was handed over is pushed even if this process is killed. Memory is
bounded by ``max_queue_bytes`` (the shared ring plus the agent's push buffer):
a full one blocks ``write_tensor`` until the collector acknowledges earlier
records, but for ``max_stall_seconds`` at most: then the agent journals what
the collector does not take to local disk and pushes it, in order, once the
collector takes data again (docs/python.md, "When the collector is away").

A lost connection is retried with backoff: a new stream is opened and every
message the collector has not acknowledged is sent again, in order. The
collector treats an identical rewrite of a committed record as a no-op, so
nothing is lost and nothing is duplicated.

Thread safety: every method may be called from any thread.
"""

import logging
import os
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import numpy as np

from . import _address, _dtypes, _names, _wire
from ._handover import MAX_BATCH_BYTES, AgentStream
from .exceptions import TensorkeepError
from .modes import ModeKeys, to_mode

logger = logging.getLogger("tensorkeep")

__all__ = [
    "Writer",
    "REDUCTION_NAMES",
    "DEFAULT_MAX_QUEUE_BYTES",
    "MAX_BATCH_BYTES",
    "DEFAULT_MAX_STALL_SECONDS",
    "max_stall_from",
]


def max_stall_from(value: Optional[float]) -> float:
    """``value``, else $TENSORKEEP_MAX_STALL_SECONDS, else the default; a number >= 0
    (``math.inf``: never journal, wait as long as the collector takes)."""
    if value is None:
        env = os.environ.get(MAX_STALL_ENV, "").strip()
        if not env:
            return DEFAULT_MAX_STALL_SECONDS
        try:
            value = float(env)
        except ValueError:
            raise ValueError(f"{MAX_STALL_ENV}={env!r} is not a number of seconds") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"max_stall_seconds must be a number, got {type(value).__name__}")
    value = float(value)
    if not value >= 0:
        raise ValueError(f"max_stall_seconds must be >= 0 (inf: never journal), got {value}")
    return value

# The reductions a record may carry (smdebug's ALLOWED_REDUCTIONS + ALLOWED_NORMS).
REDUCTION_NAMES = frozenset({"min", "max", "mean", "std", "variance", "sum", "prod", "l1", "l2"})

# Bytes enqueued plus sent-but-unacknowledged before write_tensor blocks.
DEFAULT_MAX_QUEUE_BYTES = 64 << 20
# How long write_tensor/end_step may wait for the collector before the agent
# journals what it hands over (TENSORKEEP_MAX_STALL_SECONDS overrides).
DEFAULT_MAX_STALL_SECONDS = 5.0
MAX_STALL_ENV = "TENSORKEEP_MAX_STALL_SECONDS"
# Entries kept in each of the writer's small caches of encoded headers.
_CACHE_LIMIT = 100_000


def job_attempt() -> int:
    """The attempt of this process's job from its environment: ``TENSORKEEP_ATTEMPT``,
    else torchrun's ``TORCHELASTIC_RESTART_COUNT`` (0 at the first run, one more at
    each restart of the job), else 0."""
    for var in ("TENSORKEEP_ATTEMPT", "TORCHELASTIC_RESTART_COUNT"):
        text = os.environ.get(var, "").strip()
        if text:
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"{var}={text!r} is not an attempt number (0, 1, 2, ...)") from None
            if not 0 <= value <= _names.MAX_ATTEMPT:
                raise ValueError(f"{var}={value} is out of range (0 to {_names.MAX_ATTEMPT})")
            return value
    return 0


class Writer:
    """Writes tensors of one worker of a trial to a tensorkeep collector.

    Args:
        out_dir: ``tensorkeep://HOST:PORT/TRIAL``, or a bare trial name with the
            collector in the environment variable ``TENSORKEEP_SERVER``.
        worker: this worker's name, e.g. ``worker_0`` (the rank of the process).
        num_workers: how many workers write to the trial (>= 1). A step is
            complete once every expected worker committed it.
        max_queue_bytes: bytes buffered (enqueued or unacknowledged) before
            ``write_tensor`` blocks.
        retry_timeout: the longest ``flush()`` and ``close()`` wait for a
            collector that is away (None: forever; the default is
            RECONNECT_GIVE_UP_SECONDS of proto/limits.proto, 300). Past it they
            raise CollectorUnavailable naming what is not yet durable; the
            node's agent keeps that (in memory and in its journal), keeps
            reconnecting and pushes it once the collector is back, and the
            writer stays usable: saving never stops for an outage. (An agent
            with no journal gives up after retry_timeout instead, and the
            writer fails naming what was not saved.)
        server: ``HOST:PORT`` of the collector for a bare trial name, or a
            cluster's ``HOST:PORT,HOST:PORT,...`` (overrides
            ``TENSORKEEP_SERVERS`` and ``TENSORKEEP_SERVER``). With a cluster
            the trial goes to the collector that holds it, else its owner
            (docs/scaling-out.md).
        attempt: the attempt of the job this writer belongs to: 0 for a first
            run, one more at each restart of the job by its launcher. A higher
            attempt than the worker's last one may write again the steps that
            attempt committed (docs/semantics.md, "Restarted jobs"). None (the
            default): ``TENSORKEEP_ATTEMPT``, else torchrun's
            ``TORCHELASTIC_RESTART_COUNT``, else 0.
        max_stall_seconds: the longest ``write_tensor``/``end_step`` waits for
            the collector (its buffer full: the collector away or slower than
            training) before the node's agent journals what it hands over to
            local disk, to push it in order once the collector takes data again
            (default: ``$TENSORKEEP_MAX_STALL_SECONDS``, else 5; ``math.inf``:
            never journal). ``flush()`` and ``close()`` still wait until
            everything, journaled or not, is durable on the collector.

    Raises ValueError/TypeError for bad arguments. The connection is opened in
    the background: an unreachable collector does not fail the constructor.
    """

    def __init__(
        self,
        out_dir: str,
        worker: str = "worker_0",
        num_workers: int = 1,
        *,
        max_queue_bytes: int = DEFAULT_MAX_QUEUE_BYTES,
        retry_timeout: Optional[float] = float(_names.RECONNECT_GIVE_UP_SECONDS),
        server: Optional[str] = None,
        attempt: Optional[int] = None,
        max_stall_seconds: Optional[float] = None,
    ):
        addr = _address.parse(out_dir, server, write=True)
        attempt = job_attempt() if attempt is None else attempt
        if isinstance(attempt, bool) or not isinstance(attempt, int):
            raise TypeError(f"attempt must be an int, got {type(attempt).__name__}")
        if not 0 <= attempt <= _names.MAX_ATTEMPT:
            raise ValueError(f"attempt must be from 0 to {_names.MAX_ATTEMPT}, got {attempt}")
        max_stall = max_stall_from(max_stall_seconds)
        _names.check_worker(worker)
        if isinstance(num_workers, bool) or not isinstance(num_workers, int):
            raise TypeError(f"num_workers must be an int, got {type(num_workers).__name__}")
        if not 1 <= num_workers <= _names.MAX_WORKERS:
            raise ValueError(f"num_workers must be from 1 to {_names.MAX_WORKERS}, got {num_workers}")
        if not isinstance(max_queue_bytes, int) or max_queue_bytes <= 0:
            raise ValueError(f"max_queue_bytes must be a positive int, got {max_queue_bytes!r}")
        self.address = addr
        self.trial = addr.trial
        self.worker = worker
        self.num_workers = num_workers
        self.max_queue_bytes = max_queue_bytes
        self.retry_timeout = retry_timeout
        self.attempt = attempt
        self.max_stall_seconds = max_stall

        # Caches keyed by what the caller passes, so repeated writes of the same
        # tensor skip validation and header encoding.
        self._checked: Dict[Tuple[Any, ...], Tuple[int, bytes, Tuple[bytes, ...]]] = {}
        self._heads: Dict[Tuple[Any, ...], bytes] = {}
        self._tails: Dict[Tuple[Any, ...], bytes] = {}
        self._steps: Tuple[int, int, bytes] = (-1, -1, b"")  # the last step's encoded step fields
        self._stream = AgentStream(
            addr.target,
            addr.trial,
            worker,
            num_workers,
            max_queue_bytes,
            retry_timeout,
            attempt=attempt,
            max_stall_seconds=max_stall,
        )

    # ------------------------------------------------------------------
    # Public API
    # ------------------------------------------------------------------

    def write_tensor(
        self,
        name: str,
        value: Any,
        step: int,
        mode: Any = ModeKeys.TRAIN,
        mode_step: Optional[int] = None,
        collections: Iterable[str] = (),
        reductions: Optional[Mapping[Tuple[str, bool], float]] = None,
    ) -> None:
        """Enqueues one tensor of this worker at global step ``step``.

        Args:
            name: the tensor's name (a non-empty printable str, <= 256 bytes UTF-8).
            value: a numpy array (float16/32/64, int8/16/32/64, uint8 or bool; any
                layout and byte order), a torch.bfloat16 tensor (stored as
                bfloat16, read back as float32), a Python or numpy scalar (a
                Python float is saved as float32, an int as int64), anything with
                ``__array__``, or None when only reductions are saved.
            step: the global step (>= 0).
            mode: modes.TRAIN (default), EVAL, PREDICT, or GLOBAL for a writer
                without modes.
            mode_step: the step within ``mode``; defaults to ``step``.
            collections: names of the collections the tensor belongs to
                (each a non-empty printable str, <= 128 bytes UTF-8).
            reductions: saved reductions ``{(reduction_name, abs): value}``;
                names are min, max, mean, std, variance, sum, prod, l1, l2.

        Blocks while the queue is full. Raises ValueError/TypeError for a bad
        argument (nothing is enqueued then), WriterClosed after close(), and the
        writer's error if it failed for good.
        """
        # The fast path (a tensor written before, a numpy array of a native
        # dtype) costs a few dict lookups besides the copy of the data.
        try:
            checked = self._checked[(name, mode, mode.__class__, collections)]
        except (KeyError, TypeError):  # new, or an unhashable argument
            checked = self._check_names(name, mode, collections)
        mode_i, name_b, coll = checked
        if step.__class__ is not int or not 0 <= step <= _names.MAX_STEP:
            step = _names.check_step(step)
        if mode_step is None:
            mode_step = step
        elif mode_step.__class__ is not int or not 0 <= mode_step <= _names.MAX_STEP:
            mode_step = _names.check_step(mode_step, "mode_step")
        if value is None:
            if not reductions:
                raise ValueError(f"tensor {name!r}: value is None and no reductions are given")
            code, shape, data, has_value = 0, (), b"", False
        else:
            code = _dtypes.NATIVE_CODES.get(value.dtype) if value.__class__ is np.ndarray else None
            if code is not None:
                shape, data = value.shape, value  # copied once, into the shared ring
            else:
                code, shape, data = _dtypes.to_wire(value, f"tensor {name!r}")
            has_value = True
        head_key = (name_b, mode_i, code, shape)
        head = self._heads.get(head_key)
        if head is None:
            head = _wire.record_head(name_b, mode_i, code, shape)
            if len(self._heads) < _CACHE_LIMIT:
                self._heads[head_key] = head
        if reductions:
            tail = _wire.record_tail(has_value, self._check_reductions(name, reductions), coll)
        else:
            tail_key = (has_value, coll)
            tail = self._tails.get(tail_key)
            if tail is None:
                tail = _wire.record_tail(has_value, (), coll)
                if len(self._tails) < _CACHE_LIMIT:
                    self._tails[tail_key] = tail
        self._stream.add_record(head, self._steps_field(step, mode_step), data, tail)

    def _array_writer(self, name: str, mode: Any, collections: Tuple[str, ...]) -> Callable[[Any, int, int], None]:
        """The PyTorch hook's hot path: a function ``write(value, step,
        mode_step)`` that writes tensor ``name`` as write_tensor would, with the
        name, mode and collections checked once, here (ValueError/TypeError),
        and the record's encoded fields kept between calls. A numpy array of a
        native dtype and the same shape as last time costs a comparison and the
        hand-over; anything else goes through write_tensor. ``step`` and
        ``mode_step`` must be valid (the hook's own counters)."""
        mode_i, name_b, coll = self._check_names(name, mode, collections)
        tail = _wire.record_tail(True, (), coll)
        # The last value's (dtype, shape, record head), replaced as a whole
        # (two threads writing one name see one or the other, never a mix).
        last = [(None, None, b"")]

        def write(value: Any, step: int, mode_step: int) -> None:
            if value.__class__ is not np.ndarray:
                return self.write_tensor(name, value, step, mode, mode_step, collections)
            kept = last[0]
            if value.shape != kept[1] or value.dtype != kept[0]:
                code = _dtypes.NATIVE_CODES.get(value.dtype)
                if code is None:
                    return self.write_tensor(name, value, step, mode, mode_step, collections)
                kept = last[0] = (value.dtype, value.shape, _wire.record_head(name_b, mode_i, code, value.shape))
            self._stream.add_record(kept[2], self._steps_field(step, mode_step), value, tail)

        return write

    def _hold_writes_until_end_step(self) -> None:
        """For a caller that ends every step it writes in (the PyTorch hook):
        a write after a quiet spell waits for the step's end_step too, instead
        of going to the agent at once (one wake-up of the agent a step)."""
        self._stream.hold_writes = True

    def _steps_field(self, step: int, mode_step: int) -> bytes:
        """The encoded step fields of a record, made once a step (every tensor
        of a step has the same)."""
        steps = self._steps
        if steps[0] != step or steps[1] != mode_step:
            steps = self._steps = (step, mode_step, _wire.steps_field(step, mode_step))
        return steps[2]

    def _check_names(self, name: Any, mode: Any, collections: Any) -> Tuple[int, bytes, Tuple[bytes, ...]]:
        """Validates name, mode and collections; caches the result when hashable."""
        checked = (int(to_mode(mode)), _names.check_tensor_name(name), self._check_collections(collections))
        try:
            if len(self._checked) < _CACHE_LIMIT:
                self._checked[(name, mode, mode.__class__, collections)] = checked
        except TypeError:
            pass
        return checked

    def end_step(self, step: int) -> None:
        """Tells the collector this worker is done with every global step <= ``step``.

        Ending a step is optional: writing a later step, or closing, ends the
        earlier ones too.
        """
        self._stream.end_step(_names.check_step(step))

    def flush(self, timeout: Optional[float] = None) -> None:
        """Returns once everything written so far is durable on the collector,
        including what the agent journaled while the collector was away.

        Raises WaitTimeout after ``timeout`` seconds, CollectorUnavailable after
        ``retry_timeout`` with the collector away (naming what is not yet
        durable; the agent keeps it and the writer stays usable), and the
        writer's error if it failed for good.
        """
        self._stream.flush(timeout)

    @property
    def stop_requested(self) -> bool:
        """True once a rule with the ``stop`` action fired for this trial."""
        return self._stream.stop_requested

    @property
    def stop_reason(self) -> str:
        """Why the collector asked to stop ('' if it did not)."""
        return self._stream.stop_reason

    @property
    def committed_through(self) -> int:
        """This worker's highest step the collector acknowledged as committed (-1: none)."""
        return self._stream.committed_through

    @property
    def journaled_bytes(self) -> int:
        """Bytes the agent journaled to local disk so far because the collector did
        not take them within ``max_stall_seconds`` (0: it never had to)."""
        return self._stream.journaled_bytes

    @property
    def journaling(self) -> bool:
        """True while written records wait in the agent's journal, not yet sent."""
        return self._stream.journaling

    @property
    def dropped_records(self) -> int:
        """Records lost because neither the collector nor the journal (full or
        unwritable) took them; each is logged by the agent and here."""
        return self._stream.dropped_records

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._stream.closed

    def close(self, end_of_training: bool = True, timeout: Optional[float] = None) -> None:
        """Sends everything still queued, ends the stream and releases the connection.

        ``end_of_training`` says this worker will write no more to the trial; the
        trial ends once every expected worker closed so. Blocks until the
        collector acknowledged the close (at most ``timeout`` seconds: WaitTimeout).
        With the collector away for ``retry_timeout``, raises CollectorUnavailable
        naming what is not yet durable: the node's agent goes on pushing it after
        this process exits (until the agent stops, which journals it for the
        next agent). Raises the writer's error if it failed for good (unsent
        data was lost).
        Calling close() again does nothing.
        """
        self._stream.close(end_of_training, timeout)

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # On an exception, still send what was written, but do not end the trial.
        if exc_type is None:
            self.close(end_of_training=True)
            return
        try:
            self.close(end_of_training=False)
        except TensorkeepError as e:  # do not hide the exception in flight
            logger.error("tensorkeep writer %s: close failed: %s", self.worker, e)

    def __repr__(self) -> str:
        return f"<tensorkeep.Writer {self.address.url} worker={self.worker}>"

    # ------------------------------------------------------------------
    # Validation
    # ------------------------------------------------------------------

    @staticmethod
    def _check_collections(collections: Iterable[str]) -> Tuple[bytes, ...]:
        if isinstance(collections, str):
            collections = (collections,)
        if collections is None:
            return ()
        try:
            items = list(collections)
        except TypeError:
            raise TypeError("collections must be an iterable of str") from None
        return tuple(sorted({_names.check_collection_name(c) for c in items}))

    @staticmethod
    def _check_reductions(name: str, reductions: Mapping) -> List[Tuple[str, bool, float]]:
        if not isinstance(reductions, Mapping):
            raise TypeError("reductions must be a dict {(reduction_name, abs): value}")
        for k, v in reductions.items():
            if not (isinstance(k, tuple) and len(k) == 2):
                raise TypeError(f"tensor {name!r}: reduction key {k!r} is not (reduction_name, abs)")
            if k[0] not in REDUCTION_NAMES:
                raise ValueError(
                    f"tensor {name!r}: unknown reduction {k[0]!r} "
                    f"(allowed: {', '.join(sorted(REDUCTION_NAMES))})"
                )
            if not isinstance(k[1], (bool, int)):
                raise TypeError(f"tensor {name!r}: abs of reduction {k[0]!r} must be a bool")
            try:
                float(v)
            except (TypeError, ValueError):
                raise TypeError(
                    f"tensor {name!r}: value of reduction {k!r} must be a number, got {v!r}"
                ) from None
        return _wire.reductions_items(reductions)
