"""PushStream: the Push stream of one writer, behind a bounded queue.

The caller's thread enqueues encoded records and control items (end of step,
flush, close). Records wait in the queue until a control item, a message's
worth of bytes (``_send_bytes``) or ``_LINGER_S`` after the first of them, so
that a training step's tensors wake the sending side once or twice, not once
per tensor: each wake-up is a context switch that preempts the training
thread on a busy machine. gRPC's request thread pulls them through ``_requests()``, packs
consecutive records into PushRequests of up to MAX_BATCH_BYTES (a larger value
goes as a partial record followed by Chunk messages) and keeps every message
until the collector acknowledges it. A thread of its own reads the acks and,
when the stream breaks for want of a collector, opens a new stream (Open again)
and resends every unacknowledged message, in order, with new sequence numbers.

Memory: bytes enqueued plus bytes sent but unacknowledged are bounded by
``max_queue_bytes``; ``enqueue`` blocks above it.

Thread safety: every public method may be called from any thread. State is
guarded by ``_lock`` (``_cond`` is signalled on every change); ``_pack_lock``
keeps a single packer across a superseded stream and its successor.
"""

import atexit
import collections as _collections
import functools
import logging
import random
import threading
import time
import weakref
from typing import Any, Callable, Deque, Iterator, List, Optional

import grpc

from . import _channel, _errors, _names, _wire
from .exceptions import CollectorUnavailable, TensorkeepError, WaitTimeout, WriterClosed

logger = logging.getLogger("tensorkeep")

# Payload of one PushRequest. Below gRPC's default 4 MiB receive limit, so a
# collector with default limits accepts it; larger values go as Chunk messages.
MAX_BATCH_BYTES = (4 << 20) - (64 << 10)
assert MAX_BATCH_BYTES < _names.MAX_PUSH_MESSAGE_BYTES
# Ask the collector for an ack after this many unflushed bytes, so acks (and the
# memory they release) keep flowing even if the collector acks only on Flush.
_AUTO_FLUSH_BYTES = 16 << 20
# Fixed cost counted per record besides its data (bookkeeping, framing).
_RECORD_OVERHEAD = 64
# Reconnecting: the policy both writers share (proto/limits.proto,
# ReconnectPolicy; the table is in docs/architecture.md).
_BACKOFF_FIRST = _names.RECONNECT_BACKOFF_FIRST_MS / 1000
_BACKOFF_MAX = _names.RECONNECT_BACKOFF_MAX_MS / 1000
_JITTER = _names.RECONNECT_JITTER_PERCENT / 100
# Records not followed by a control item or a message's worth of bytes are
# sent this long after the first of them was queued.
_LINGER_S = 0.1

# Queue item kinds.
_REC, _END, _FLUSH, _CLOSE = range(4)


_EXIT_TIMEOUT = float(_names.RECONNECT_EXIT_CLOSE_SECONDS)


def _backoff_wait(backoff: float) -> float:
    """The wait before the next reconnection attempt: ``backoff`` less up to
    _JITTER of it, at random (writers of a restarted collector spread out)."""
    return backoff * random.uniform(1.0 - _JITTER, 1.0)


def _step_ranges(steps: List[int], max_ranges: int = 8) -> str:
    """``[0, 1, 2, 4]`` -> ``"0-2, 4"`` (at most ``max_ranges`` ranges, then "...")."""
    out: List[str] = []
    it = iter(sorted(set(steps)))
    first = last = next(it, None)
    while first is not None:
        nxt = next(it, None)
        if nxt is not None and nxt == last + 1:
            last = nxt
            continue
        if len(out) == max_ranges:
            out.append("...")
            break
        out.append(str(first) if first == last else f"{first}-{last}")
        first = last = nxt
    return ", ".join(out)


def _close_at_exit(ref: "weakref.ReferenceType[PushStream]") -> None:
    """Closes a stream still open at interpreter exit, without ending the trial."""
    stream = ref()
    if stream is None or stream.closed:
        return
    logger.warning(
        "tensorkeep writer %s was not closed: sending what it queued (the trial is not ended)",
        stream.worker,
    )
    try:
        stream.close(end_of_training=False, timeout=_EXIT_TIMEOUT)
    except TensorkeepError as e:
        logger.error("tensorkeep writer %s: closing at exit failed: %s", stream.worker, e)


def _wire_size(item: tuple) -> int:
    """An upper bound of a queued record's size inside a RecordBatch."""
    return len(item[1]) + len(item[2]) + len(item[3]) + len(item[4]) + 24


class _Pending:
    """One PushRequest built and not yet acknowledged.

    ``body`` is the encoded message, ending with its seq field (``seq``);
    ``gen`` is the stream it was last sent on (-1: not sent yet).
    """

    __slots__ = ("gid", "kind", "body", "nbytes", "seq", "gen", "ticket", "saves")

    def __init__(self, kind: int, parts: List[Any], nbytes: int, seq: int, ticket: int = 0, saves: Any = None):
        parts.append(_wire.seq_field(seq))
        self.gid = 0
        self.kind = kind
        self.body = b"".join(parts)
        self.nbytes = nbytes
        self.seq = seq
        self.gen = -1
        self.ticket = ticket
        # What it saves, to name it if it is never acknowledged: [(name, step)]
        # of a record message, the step of an EndStep.
        self.saves = saves

    def restamp(self, seq: int) -> None:
        """Re-encodes the message with another seq (resending on a new stream)."""
        old = len(_wire.seq_field(self.seq))
        self.body = self.body[:-old] + _wire.seq_field(seq)
        self.seq = seq


class PushStream:
    """The Push stream of one worker; see the module docstring.

    Args:
        target: the collector's HOST:PORT.
        trial, worker, num_workers: what Open declares.
        max_queue_bytes: the memory bound.
        retry_timeout: seconds of failed reconnection before failing for good
            (None: forever).
    """

    def __init__(
        self,
        target: str,
        trial: str,
        worker: str,
        num_workers: int,
        max_queue_bytes: int,
        retry_timeout: Optional[float],
    ):
        self.target = target
        self.trial = trial
        self.worker = worker
        self.max_queue_bytes = max_queue_bytes
        self.retry_timeout = retry_timeout
        self._open_body = _wire.open_message(trial, worker, num_workers)
        # Later streams resume: the collector takes their resend even into a
        # trial this writer's own close ended (its acknowledgement lost).
        self._resume_body = _wire.open_message(trial, worker, num_workers, resume=True)

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # signalled on every state change
        self._pack_lock = threading.Lock()  # one packer at a time, across streams
        # Guarded by _lock:
        self._queue: Deque[tuple] = _collections.deque()
        self._queued_bytes = 0
        self._queued_since = 0.0  # when the queue last became non-empty
        self._queued_controls = 0  # control items in the queue
        self._send_all = False  # a caller waits for room: send without lingering
        self._send_bytes = min(MAX_BATCH_BYTES, max(1, max_queue_bytes // 2))
        self._pending: Deque[_Pending] = _collections.deque()
        self._pending_bytes = 0
        self._unflushed_bytes = 0
        self._next_gid = 1
        self._gen = 0  # stream generation; -1 once stopped for good
        self._flush_tickets = 0  # flush requests enqueued
        self._flushed_ticket = 0  # highest flush request acknowledged
        self._close_acked = False
        self._closing = False
        self._error: Optional[TensorkeepError] = None
        self.stop_requested = False
        self.stop_reason = ""
        self.committed_through = -1
        self._call: Optional[Any] = None

        self._abandon = threading.Event()
        self._channel = _channel.open_channel(target)
        self._push = self._channel.stream_stream(
            _channel.method("Push"),
            request_serializer=None,  # messages are encoded by _wire
            response_deserializer=_channel.pb.PushResponse.FromString,
        )
        self._thread = threading.Thread(target=self._run, name=f"tensorkeep-writer-{worker}", daemon=True)
        self._thread.start()
        # A writer left open at interpreter exit still sends what it has queued.
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)

    # ------------------------------------------------------------------
    # Caller side
    # ------------------------------------------------------------------

    def add_record(self, head: bytes, steps: bytes, data: bytes, tail: bytes, name: str = "", step: int = -1) -> None:
        """Enqueues one encoded record (see _wire.record_parts); blocks while full.
        ``name`` and ``step`` name it in an error if it is never saved."""
        self._enqueue((_REC, head, steps, data, tail, name, step), len(data) + len(head) + len(tail) + _RECORD_OVERHEAD)

    def end_step(self, step: int) -> None:
        """Enqueues EndStep(step)."""
        self._enqueue((_END, step), _RECORD_OVERHEAD)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Returns once everything enqueued so far is acknowledged (durable)."""
        with self._lock:
            self._check_usable()
            self._flush_tickets += 1
            ticket = self._flush_tickets
        self._enqueue((_FLUSH, ticket), 0)
        self._wait(lambda: self._flushed_ticket >= ticket, timeout, "flush")

    @property
    def closed(self) -> bool:
        """True once close() was called."""
        return self._closing

    def close(self, end_of_training: bool, timeout: Optional[float] = None) -> None:
        """Sends what is queued and Close, waits for its ack, releases the connection.

        Raises the stream's error if it failed for good; a second call does nothing.
        """
        with self._lock:
            already = self._closing
            self._closing = True
            if not already and self._error is None:
                self._queue.append((_CLOSE, bool(end_of_training)))
                self._queued_controls += 1
                self._cond.notify_all()
        if already:
            return
        atexit.unregister(self._atexit)
        try:
            self._wait(lambda: self._close_acked, timeout, "close")
        finally:
            self._shutdown()

    def _check_usable(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise WriterClosed(f"the writer {self.worker} of trial {self.trial} is closed")

    def _enqueue(self, item: tuple, nbytes: int) -> None:
        with self._lock:  # the lock of _cond
            if self._error is not None or self._closing:
                self._check_usable()
            limit = self.max_queue_bytes
            while (
                self._queued_bytes + self._pending_bytes + nbytes > limit
                and self._queued_bytes + self._pending_bytes > 0
            ):
                if self._queue and not self._send_all:
                    self._send_all = True  # full: send what waits without lingering
                    self._cond.notify_all()
                self._cond.wait()
                self._check_usable()
            was_empty = not self._queue
            self._queue.append(item)
            self._queued_bytes += nbytes
            if was_empty:
                self._queued_since = time.monotonic()
            if item[0] != _REC:
                self._queued_controls += 1
                self._cond.notify_all()
            elif was_empty or (
                self._queued_bytes >= self._send_bytes and self._queued_bytes - nbytes < self._send_bytes
            ):
                self._cond.notify_all()  # the packer starts its linger timer, or sends

    def _wait(self, predicate: Callable[[], bool], timeout: Optional[float], what: str) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not predicate():
                if self._error is not None:
                    raise self._error
                if self._gen < 0 and not predicate():
                    raise WriterClosed(f"the writer {self.worker} stopped before {what} completed")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise WaitTimeout(f"{what} did not complete within {timeout} s")
                self._cond.wait(remaining)

    def _shutdown(self) -> None:
        self._abandon.set()
        with self._cond:
            if self._gen >= 0:
                self._gen = -1
            self._cond.notify_all()
            call = self._call
        if call is not None and self._thread.is_alive():
            call.cancel()
        self._thread.join(timeout=10)
        self._channel.close()

    # ------------------------------------------------------------------
    # Stream side: a thread that opens streams and reads acks; gRPC's own
    # thread pulls requests from _requests().
    # ------------------------------------------------------------------

    def _run(self) -> None:
        backoff = _BACKOFF_FIRST
        failing_since: Optional[float] = None
        while not self._abandon.is_set():
            with self._cond:
                if self._gen < 0:
                    return
                self._gen += 1
                gen = self._gen
                self._cond.notify_all()  # wakes a previous stream's packer
            call = self._push(self._requests(gen))
            with self._cond:
                self._call = call
            try:
                for resp in call:
                    self._on_ack(gen, resp)
                    backoff, failing_since = _BACKOFF_FIRST, None
                if self._close_acked:
                    return
                err: Optional[TensorkeepError] = CollectorUnavailable(
                    "the collector ended the Push stream before the writer closed"
                )
            except grpc.RpcError as e:
                if self._abandon.is_set():
                    return
                if not _errors.is_transient(e):
                    self._fail(
                        _errors.translate(e, trial=self.trial, worker=self.worker, target=self.target)
                    )
                    return
                err = _errors.translate(e, trial=self.trial, target=self.target)
            now = time.monotonic()
            failing_since = failing_since or now
            wait = _backoff_wait(backoff)
            if self.retry_timeout is not None:
                left = self.retry_timeout - (now - failing_since)
                if left <= 0:
                    self._fail(
                        CollectorUnavailable(
                            f"gave up reconnecting to {self.target} after "
                            f"{self.retry_timeout} s (retry_timeout): {err}"
                        )
                    )
                    return
                wait = min(wait, left)
            logger.warning("tensorkeep writer %s: %s; reconnecting in %.2f s", self.worker, err, wait)
            if self._abandon.wait(wait):
                return
            backoff = min(backoff * 2, _BACKOFF_MAX)

    def _unsaved(self) -> str:
        """Names what was not acknowledged (requires _lock): "N tensors at steps
        ... ('a', 'b'), and the end of step S"; empty when nothing is unsaved."""
        saved: List[Any] = []
        end_step = -1
        for p in self._pending:
            if p.kind == _REC and p.saves:
                saved.extend(p.saves)
            elif p.kind == _END and p.saves is not None:
                end_step = max(end_step, p.saves)
        for item in self._queue:
            if item[0] == _REC:
                saved.append((item[5], item[6]))
            elif item[0] == _END:
                end_step = max(end_step, item[1])
        parts = []
        if saved:
            names = list(dict.fromkeys(n for n, _ in saved))
            shown = ", ".join(_names.quote(n, 60) for n in names[:6])
            more = f" and {len(names) - 6} more names" if len(names) > 6 else ""
            steps = [s for _, s in saved]
            parts.append(
                f"{len(saved)} tensor{'s' if len(saved) != 1 else ''} at "
                f"step{'s' if len(set(steps)) != 1 else ''} {_step_ranges(steps)} ({shown}{more})"
            )
        if end_step >= 0:
            parts.append(f"the end of step {end_step}")
        return ", and ".join(parts)

    def _fail(self, err: TensorkeepError) -> None:
        with self._cond:
            unsaved = self._unsaved()
        if unsaved:
            if isinstance(err, CollectorUnavailable):
                err = CollectorUnavailable(f"{err}; not saved: {unsaved}")
            else:
                logger.error("tensorkeep writer %s: not saved: %s", self.worker, unsaved)
        logger.error("tensorkeep writer %s failed: %s", self.worker, err)
        with self._cond:
            self._error = err
            self._gen = -1
            self._cond.notify_all()

    def _on_ack(self, gen: int, resp: Any) -> None:
        with self._cond:
            if gen != self._gen:
                return
            acked = resp.acked_seq
            pending = self._pending
            while pending and pending[0].gen == gen and pending[0].seq <= acked:
                p = pending.popleft()
                self._pending_bytes -= p.nbytes
                if p.kind == _FLUSH:
                    self._flushed_ticket = max(self._flushed_ticket, p.ticket)
                elif p.kind == _CLOSE:
                    self._close_acked = True
            self.committed_through = resp.committed_through
            if resp.stop_requested and not self.stop_requested:
                self.stop_reason = resp.stop_reason
                self.stop_requested = True
                logger.warning(
                    "tensorkeep: the collector asks trial %s to stop: %s", self.trial, resp.stop_reason
                )
            self._cond.notify_all()

    def _requests(self, gen: int) -> Iterator[bytes]:
        """The messages of one stream: Open, then every unacknowledged message
        again, then new messages as they are packed. Ends after Close, or when
        the stream is superseded."""
        yield (self._open_body if gen == 1 else self._resume_body) + _wire.seq_field(1)
        # A Flush: its ack tells that the stream reached a collector (which
        # restarts the retry_timeout clock even if nothing else is sent).
        yield _wire.flush_message() + _wire.seq_field(2)
        seq = 2
        with self._cond:
            next_gid = self._pending[0].gid if self._pending else self._next_gid
        while True:
            p = self._next_message(gen, next_gid, seq + 1)
            if p is None:
                return
            seq += 1
            with self._cond:
                if gen != self._gen:
                    return
                if p.seq != seq:
                    p.restamp(seq)
                p.gen = gen
                body = p.body
            yield body
            next_gid = p.gid + 1
            if p.kind == _CLOSE:
                return

    def _next_message(self, gen: int, gid: int, seq: int) -> Optional[_Pending]:
        """Returns the pending message ``gid``, packing new ones from the queue as
        needed (numbered from ``seq``, the seq they will be sent with); None once
        stream ``gen`` is superseded."""
        with self._pack_lock:
            with self._cond:
                while True:
                    if gen != self._gen:
                        return None
                    if self._pending and self._pending[-1].gid >= gid:
                        return self._pending[gid - self._pending[0].gid]
                    if not self._queue:
                        self._cond.wait()
                        continue
                    if self._queued_controls or self._send_all or self._queued_bytes >= self._send_bytes:
                        break
                    left = self._queued_since + _LINGER_S - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                items = self._take_batch()
            built = self._build(items, seq)
            with self._cond:
                for p in built:
                    p.gid = self._next_gid
                    self._next_gid += 1
                    self._pending.append(p)
                    self._pending_bytes += p.nbytes
                    self._queued_bytes -= p.nbytes
                return built[0]

    def _take_batch(self) -> List[tuple]:
        """Pops the next message's worth of items (requires _lock): consecutive
        records up to MAX_BATCH_BYTES on the wire, or one control item.

        Whole queued steps are coalesced: after a step's records and its
        end_step, the next step's records join the message when that step's
        end_step is queued too (a step still being written is never sent
        early), and the last end_step follows the records as one EndStep. The
        collector's outcome is the same: a record of a later step commits the
        steps before it, and end_step(s) every step <= s. A writer that fell
        behind then sends many small steps as one message and one EndStep, not
        two messages a step."""
        q = self._queue
        first = q.popleft()
        if first[0] != _REC:
            self._queued_controls -= 1
            if not q:
                self._send_all = False
            return [first]
        items = [first]
        size = _wire_size(first)
        while q and q[0][0] == _REC:
            n = _wire_size(q[0])
            if size + n > MAX_BATCH_BYTES:
                break
            items.append(q.popleft())
            size += n
        end_step, ends = -1, 0
        while q and q[0][0] == _END and size <= MAX_BATCH_BYTES:
            end_step = max(end_step, q.popleft()[1])
            ends += 1
            self._queued_controls -= 1
            # The next step's records: only all of them, with their end_step queued.
            k, extra = 0, 0
            for item in q:
                if item[0] != _REC:
                    break
                extra += _wire_size(item)
                k += 1
            if k == 0 or k >= len(q) or q[k][0] != _END or size + extra > MAX_BATCH_BYTES:
                continue  # (a following end_step is still taken; records are not)
            for _ in range(k):
                items.append(q.popleft())
            size += extra
        if ends:
            items.append((_END, end_step, ends))  # (kind, step, end_steps it stands for)
        if not q:
            self._send_all = False
        return items

    def _build(self, items: List[tuple], seq: int) -> List[_Pending]:
        """Encodes popped items into messages numbered from ``seq``, each with its
        share of the queued bytes."""
        kind = items[0][0]
        if kind == _END:
            return [_Pending(_END, [_wire.end_step_message(items[0][1])], _RECORD_OVERHEAD, seq, saves=items[0][1])]
        if kind == _FLUSH:
            self._unflushed_bytes = 0
            return [_Pending(_FLUSH, [_wire.flush_message()], 0, seq, ticket=items[0][1])]
        if kind == _CLOSE:
            return [_Pending(_CLOSE, [_wire.close_message(items[0][1])], 0, seq)]
        # Coalesced end_steps (see _take_batch) follow the records: one EndStep
        # carrying the queued bytes of every end_step it stands for.
        end = None
        if items[-1][0] == _END:
            end = items.pop()
        out: List[_Pending] = []
        first = items[0]
        nbytes_of = lambda it: len(it[1]) + len(it[3]) + len(it[4]) + _RECORD_OVERHEAD  # noqa: E731
        if len(items) == 1 and len(first[3]) > MAX_BATCH_BYTES:
            # One large value: the record carries the first bytes, Chunks the rest.
            data = memoryview(first[3])
            parts: List[Any] = []
            n = _wire.record_parts(first[1], first[2], data[:MAX_BATCH_BYTES], len(data), first[4], parts)
            total = nbytes_of(first)
            out.append(
                _Pending(
                    _REC,
                    _wire.records_message(parts, n),
                    total - (len(data) - MAX_BATCH_BYTES),
                    seq,
                    saves=[(first[5], first[6])],
                )
            )
            for off in range(MAX_BATCH_BYTES, len(data), MAX_BATCH_BYTES):
                piece = data[off : off + MAX_BATCH_BYTES]
                out.append(_Pending(_REC, _wire.chunk_message(piece), len(piece), seq + len(out)))
        else:
            parts = []
            n = 0
            nbytes = 0
            for it in items:
                n += _wire.record_parts(it[1], it[2], it[3], len(it[3]), it[4], parts)
                nbytes += nbytes_of(it)
            out.append(_Pending(_REC, _wire.records_message(parts, n), nbytes, seq, saves=[(it[5], it[6]) for it in items]))
        if end is not None:
            out.append(
                _Pending(_END, [_wire.end_step_message(end[1])], _RECORD_OVERHEAD * end[2], seq + len(out), saves=end[1])
            )
        self._unflushed_bytes += sum(p.nbytes for p in out)
        if self._unflushed_bytes >= min(_AUTO_FLUSH_BYTES, self.max_queue_bytes // 2):
            self._unflushed_bytes = 0
            out.append(_Pending(_FLUSH, [_wire.flush_message()], 0, seq + len(out)))
        return out
