"""AgentStream: one writer's tensors handed over to the node's tensorkeep-agent.

The training process only copies each tensor once, into a shared memory ring
(a sealed memfd the agent maps), and sends a small message on a Unix socket;
the agent (agent/session.cc) pushes it to the collector with the C++ writer,
which batches, reconnects and resends. No thread of this process works for
the writer, and what was handed over is pushed even if this process is
killed. The protocol is described in agent/handover.h; the constants below
mirror it.

Batching: a step's Write messages wait in the process and go with its
EndStep as one Batch message (one system call, one wake-up of the agent);
see add_record and _send_batch.

Backpressure: when the ring has no room, the writer sleeps until the agent
has taken enough (a futex on the consumed position, which the agent wakes),
at most 50 ms; then it asks the agent to take what it was sent (Sync) and
waits; the agent's writer in turn waits while its
own buffer is full, but at most ``max_stall_seconds`` a record: then the
agent journals it (and what follows) to local disk, to push later, so a
training step is not blocked longer (agent/session.h). Errors: the agent
marks the writer failed in the ring's header; the next call fetches the
error (Sync) and raises it.

Thread safety: every public method may be called from any thread.
"""

import atexit
import ctypes
import errno
import fcntl
import functools
import logging
import math
import mmap
import os
import platform
import socket
import struct
import sys
import threading
import time
import weakref
from typing import Any, Optional

import grpc
import numpy as np

from . import _agent, _credentials, _errors, _names
from .exceptions import TensorkeepError, WaitTimeout, WriterClosed

logger = logging.getLogger("tensorkeep")

PROTOCOL_VERSION = _agent.PROTOCOL_VERSION
_OPEN, _WRITE, _WRITE_FD, _END_STEP, _FLUSH, _CLOSE, _SYNC, _BATCH = 1, 2, 3, 4, 5, 6, 7, 8
_REPLY = 100
HEADER_BYTES = 4096
_CONSUMED, _FLAGS, _COMMITTED, _STREAMS, _JOURNALED, _DROPPED, _ROOM_WANTED, _STOP_REASON = 8, 16, 24, 32, 40, 48, 56, 64
_FAILED, _STOP, _JOURNALING, _WAKES_ROOM_WAITERS = 1, 2, 4, 8
MIN_RING_BYTES = 64 << 10
MAX_RING_BYTES = 64 << 20

_U32 = struct.Struct("<I")
_Q = struct.Struct("<Q")
_q = struct.Struct("<q")
_CONTROL = struct.Struct("<IIQ")
_WRITE_HEAD = struct.Struct("<IIQQ")
# In a Batch each message follows its length.
_BATCH_HEAD = struct.Struct("<II")
_LEN_WRITE_HEAD = struct.Struct("<IIIQQ")
_LEN_CONTROL = struct.Struct("<IIIQ")
_OPEN_HEAD = struct.Struct("<IIIQQd")
_REPLY_HEAD = struct.Struct("<IIQ")
_EXIT_TIMEOUT = float(_names.RECONNECT_EXIT_CLOSE_SECONDS)
# Write messages wait in the process, to go as one Batch at the end of the
# step (one system call and one wake-up of the agent a step, not one a
# tensor); a Write after this long without sending goes at once (an isolated
# tensor is not held back; not for a caller that ends every step it writes in,
# AgentStream.hold_writes), and a batch is sent at this many bytes of
# messages, or once its values add up to a push message's worth (which the
# agent's writer sends without waiting for the step either).
_BATCH_IDLE_S = 0.02
_BATCH_BYTES = 48 << 10  # below agent/handover.h kMaxMessageBytes (64 KiB)
_CODES = {c.value[0]: c for c in grpc.StatusCode}
# Waiting for room in the ring: for at most 50 ms, sleeping on the agent's
# consumed position (a futex the agent wakes, at most 10 ms at a time), or,
# with an agent that does not wake waiters, reading it after pauses from
# 50 us doubling to 1 ms; then a Sync waits (see AgentStream._wait_for_room).
_ROOM_PAUSE_FIRST_S = 50e-6
_ROOM_PAUSE_MAX_S = 1e-3
_ROOM_POLL_S = 0.05
_ROOM_SLEEP_MAX_S = 0.01
# The agent's writer sends values larger than this in chunks, each message
# below gRPC's default 4 MiB receive limit (agent/session.cc, chunk_bytes).
MAX_BATCH_BYTES = (4 << 20) - (64 << 10)
assert MAX_BATCH_BYTES < _names.MAX_PUSH_MESSAGE_BYTES


class _AgentError(grpc.RpcError):
    """A failure the agent reported, shaped as a gRPC error for _errors.translate."""

    def __init__(self, code: int, reason: str, message: str):
        self._code = _CODES.get(code, grpc.StatusCode.UNKNOWN)
        self._reason = reason
        self._message = message

    def code(self):
        return self._code

    def details(self):
        return self._message

    def trailing_metadata(self):
        return (("tk-reason", self._reason),) if self._reason else ()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


# SYS_futex of a 64-bit little-endian process by machine (the generic table's
# 98 for the newer architectures). platform.machine() is the kernel's: a
# 32-bit process on a 64-bit kernel (another table) polls instead, and so does
# a big-endian one (the futex word is the low half of a u64).
_SYS_FUTEX = (
    {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "riscv64": 98, "loongarch64": 98,
     "ppc64le": 221}.get(platform.machine())
    if struct.calcsize("P") == 8 and sys.byteorder == "little"
    else None
)
_FUTEX_WAIT = 0  # shared (the waker is another process): no FUTEX_PRIVATE_FLAG
# What FUTEX_WAIT may answer besides a wake-up; anything else (ENOSYS, EPERM
# from a seccomp filter, ...) turns the waits of that stream to polling.
_FUTEX_OK_ERRORS = (errno.EAGAIN, errno.ETIMEDOUT, errno.EINTR)


@functools.lru_cache(maxsize=None)
def _futex() -> Optional[Any]:
    """libc's syscall() set up for FUTEX_WAIT, or None where there is none
    (another OS or machine: the room wait then polls)."""
    if _SYS_FUTEX is None or not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    fn.argtypes = (ctypes.c_long, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_Timespec),
                   ctypes.c_void_p, ctypes.c_int)
    return fn


def _strings(*values: str) -> bytes:
    out = []
    for v in values:
        b = (v or "").encode()
        out.append(_U32.pack(len(b)))
        out.append(b)
    return b"".join(out)


def _sealed_memfd(size: int) -> int:
    fd = os.memfd_create("tensorkeep", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _close_at_exit(ref: "weakref.ReferenceType[AgentStream]") -> None:
    """Closes a stream still open at interpreter exit, without ending the trial."""
    stream = ref()
    if stream is None or stream.closed:
        return
    logger.warning(
        "tensorkeep writer %s was not closed: sending what it queued (the trial is not ended)", stream.worker
    )
    try:
        stream.close(end_of_training=False, timeout=_EXIT_TIMEOUT)
    except TensorkeepError as e:
        logger.error("tensorkeep writer %s: closing at exit failed: %s", stream.worker, e)


def ring_bytes_for(max_queue_bytes: int) -> int:
    """The shared ring of a writer: half its memory bound (the agent's writer
    buffers the other half), within [MIN_RING_BYTES, MAX_RING_BYTES], whole pages."""
    ring = min(MAX_RING_BYTES, max(MIN_RING_BYTES, max_queue_bytes // 2))
    return (ring + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


class AgentStream:
    """The hand-over of one worker's tensors; the interface of the Writer's stream.

    Args as the Writer's. Raises AgentUnavailable when no
    agent can be reached or started, and the agent's refusal (e.g. its memory
    budget is used up) as the matching TensorkeepError.
    """

    def __init__(
        self,
        target: str,
        trial: str,
        worker: str,
        num_workers: int,
        max_queue_bytes: int,
        retry_timeout: Optional[float],
        attempt: int = 0,
        max_stall_seconds: float = 5.0,
    ):
        self.target = target
        self.trial = trial
        self.worker = worker
        self.max_queue_bytes = max_queue_bytes
        self.retry_timeout = retry_timeout
        self._ring = ring_bytes_for(max_queue_bytes)
        self._lock = threading.RLock()  # the ring, the batch and the order of messages
        # Write / EndStep messages not sent yet, as the parts of a Batch
        # message: each message's length, then its bytes (joined once, at send).
        self._batch: list = []
        self._batch_count = 0
        self._batch_bytes = 0
        self._batch_values = 0  # bytes of the values its Writes hand over
        # True: the caller ends every step it writes in (the PyTorch hook), so
        # a Write after a quiet spell waits for the step's EndStep too. Sent
        # at once, it woke an idle agent twice a saving step: each wake-up of
        # a process idle on another CPU costs the sender 35-60 us of CPU on
        # this VM, and the agent copying the step out while the step still
        # ran slowed it (save_interval=100: a saving step's excess 0.51-0.63
        # -> 0.38-0.41 ms; issue 16).
        self.hold_writes = False
        # Ring positions below this are known free (the agent's consumed
        # position when last read, plus the ring): the header is read only
        # when a value reaches past it.
        self._room = 0
        self._touched = 0  # ring offsets below this have been written (their pages are in)
        self.room_waits = 0  # values that waited for room in the ring
        self.room_polls = 0  # pauses of such waits spent polling (an agent that does not wake waiters)
        self._futex_failed = False  # FUTEX_WAIT failed here: poll instead
        self._last_send = 0.0  # monotonic time of the last message sent
        # One request waits for its reply at a time. Lock order: _lock, then
        # _reply_lock (never the reverse); _lock is not held while waiting
        # for a reply, except by a Sync for room in the ring.
        self._reply_lock = threading.Lock()
        self._next_request = 1
        self._head = 0  # ring position after the last value sent
        self._closing = False
        self._ended = False  # the connection is done (closed, or lost)
        self._error: Optional[TensorkeepError] = None
        self._dropped_seen = 0

        size = HEADER_BYTES + self._ring
        fd = _sealed_memfd(size)
        try:
            self._mm = mmap.mmap(fd, size)
            # The address of the agent's consumed position, to sleep on it
            # (the ctypes view let go at once: it would keep the map open).
            view = ctypes.c_char.from_buffer(self._mm, _CONSUMED)
            self._consumed_addr = ctypes.addressof(view)
            del view
            security = _credentials.resolve()
            retry = math.inf if retry_timeout is None else float(retry_timeout)
            queue = max(1, max_queue_bytes - self._ring)
            body = (
                _OPEN_HEAD.pack(_OPEN, PROTOCOL_VERSION, num_workers, self._ring, queue, retry)
                + _strings(target, trial, worker, security.tls_ca, security.tls_cert, security.tls_key, security.token)
                + struct.pack("<Id", attempt, float(max_stall_seconds))
            )
            self._sock = self._open(body, fd)
        finally:
            os.close(fd)  # the agent holds its own
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)

    def _open(self, body: bytes, fd: int) -> socket.socket:
        # An agent exiting for want of writers may take the connection with
        # it: one more try starts a new one.
        for attempt in range(2):
            sock = _agent.connect()
            try:
                socket.send_fds(sock, [body], [fd])
                reply = sock.recv(1 << 16)
            except OSError:
                reply = b""
            if reply:
                err = self._parse_reply(reply)[1]
                if err is not None:
                    sock.close()
                    raise err
                return sock
            sock.close()
        raise _agent.AgentUnavailable(f"tensorkeep-agent on {_agent.socket_path()} closed the connection")

    # ------------------------------------------------------------------
    # The header the agent writes
    # ------------------------------------------------------------------

    @property
    def stop_requested(self) -> bool:
        return bool(_U32.unpack_from(self._mm, _FLAGS)[0] & _STOP) if not self._ended else self._final[0]

    @property
    def stop_reason(self) -> str:
        if not self.stop_requested:
            return ""
        if self._ended:
            return self._final[1]
        n = _U32.unpack_from(self._mm, _STOP_REASON)[0]
        return bytes(self._mm[_STOP_REASON + 4 : _STOP_REASON + 4 + n]).decode(errors="replace")

    @property
    def committed_through(self) -> int:
        return _q.unpack_from(self._mm, _COMMITTED)[0] if not self._ended else self._final[2]

    @property
    def streams_opened(self) -> int:
        """Push streams the agent's writer opened so far (1 + reconnection attempts)."""
        return _Q.unpack_from(self._mm, _STREAMS)[0] if not self._ended else self._final[3]

    @property
    def journaled_bytes(self) -> int:
        """Bytes the agent journaled to local disk so far (the collector did not
        take them within max_stall_seconds)."""
        return _Q.unpack_from(self._mm, _JOURNALED)[0] if not self._ended else self._final[4]

    @property
    def dropped_records(self) -> int:
        """Records the agent dropped: neither the collector nor the journal took them."""
        return _Q.unpack_from(self._mm, _DROPPED)[0] if not self._ended else self._final[5]

    @property
    def journaling(self) -> bool:
        """True while records wait in the agent's journal (not yet on the collector)."""
        return bool(_U32.unpack_from(self._mm, _FLAGS)[0] & _JOURNALING) if not self._ended else False

    @property
    def closed(self) -> bool:
        return self._closing

    # ------------------------------------------------------------------
    # Caller side
    # ------------------------------------------------------------------

    def _consumed(self) -> int:
        """How far the agent has consumed the ring (its header)."""
        return _Q.unpack_from(self._mm, _CONSUMED)[0]

    def _failed(self) -> bool:
        """The agent marked the writer failed (for good)."""
        try:
            return bool(_U32.unpack_from(self._mm, _FLAGS)[0] & _FAILED)
        except ValueError:  # the ring is unmapped: the writer ended
            return True

    def _check_usable(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise WriterClosed(f"the writer {self.worker} of trial {self.trial} is closed")
        if _U32.unpack_from(self._mm, _FLAGS)[0] & _FAILED:
            self._request(_SYNC, 0, None)  # raises the agent's error

    def add_record(self, head: bytes, steps: bytes, data: Any, tail: bytes) -> None:
        """Hands one record over: ``data`` (bytes, or a numpy array copied
        straight into the ring) and its encoded fields (see _wire)."""
        is_array = data.__class__ is np.ndarray
        n = data.nbytes if is_array else len(data)
        with self._lock:
            self._check_usable()
            ring = self._ring
            if n > ring:
                self._send_own_fd(head + steps + tail, data, n)
                return
            pos = self._head
            off = pos % ring
            if off + n > ring:  # values never wrap: start the next lap
                pos += ring - off
                off = 0
            elif off + n > self._touched and off and self._consumed() == pos:
                # Pages never written ahead, and the agent took everything:
                # the next lap starts at once, in pages written before. The
                # first write to a page of the ring costs ~5 us on a VM (a
                # 1.6 MB step 2-5 ms against 0.07 ms): a hook saving one step
                # in 100 paid it at every saving step of its first 2,000, as
                # the ring's 32 MiB filled. Now the ring grows only as far as
                # the agent falls behind.
                pos += ring - off
                off = 0
                self._room = pos + ring  # everything before pos is consumed or was skipped
            if pos + n > self._room:
                # Past the room known free: the ring's bytes at [pos, pos + n)
                # last held positions [pos + n - ring, ...), which must have
                # been consumed (or nothing sent is left unconsumed).
                consumed = self._consumed()
                self._room = consumed + ring
                if consumed < self._head and pos + n > self._room:
                    self._send_batch()
                    # Past the head when the value starts a new lap: the
                    # agent never consumes further than what was sent.
                    self._wait_for_room(min(pos + n - ring, self._head))
            start = HEADER_BYTES + off
            if n:
                if is_array:
                    if data.flags.c_contiguous:
                        # mmap takes the array's buffer as it is (one memcpy).
                        self._mm[start : start + n] = data
                    else:
                        dst = np.frombuffer(self._mm, np.uint8, n, start).view(data.dtype).reshape(data.shape)
                        np.copyto(dst, data, casting="no")
                        del dst
                else:
                    self._mm[start : start + n] = data
            self._head = pos + n
            if off + n > self._touched:
                self._touched = off + n
            # After a quiet spell a Write goes at once (an isolated tensor is
            # not held back), unless the caller ends the step (hold_writes).
            quiet = (
                not self._batch_count
                and not self.hold_writes
                and time.monotonic() - self._last_send > _BATCH_IDLE_S
            )
            size = _WRITE_HEAD.size + len(head) + len(steps) + len(tail)
            self._batch += (_LEN_WRITE_HEAD.pack(size, _WRITE, 0, pos, n), head, steps, tail)
            self._batch_count += 1
            self._batch_bytes += size + 4
            self._batch_values += n
            if quiet or self._batch_bytes >= _BATCH_BYTES or self._batch_values >= MAX_BATCH_BYTES:
                self._send_batch()

    def _wait_for_room(self, consumed_at_least: int) -> None:
        """Waits (holding _lock) until the agent has consumed the ring
        through ``consumed_at_least``: the room one value needs. The agent
        publishes its consumed position after each value it copies out, so
        the wait is as short as the agent takes to get that far; it is
        watched for _ROOM_POLL_S, then a Sync waits until the agent took
        everything sent (and raises its error, or notices a lost agent).
        Before, every wait was such a Sync: with the agent and the collector
        sharing a core, a 1.6 MB step that found the ring full waited
        ~90 ms for the agent to take the whole 32 MiB (issue 16)."""
        self.room_waits += 1
        end = time.monotonic() + _ROOM_POLL_S
        pause = _ROOM_PAUSE_FIRST_S
        wakes = _U32.unpack_from(self._mm, _FLAGS)[0] & _WAKES_ROOM_WAITERS
        futex = _futex() if wakes and not self._futex_failed else None
        while True:
            consumed = self._consumed()
            if consumed >= consumed_at_least:
                self._room = consumed + self._ring
                return
            left = end - time.monotonic()
            if self._failed() or left <= 0:
                break
            if futex is None:
                self.room_polls += 1
                time.sleep(pause)
                pause = min(2 * pause, _ROOM_PAUSE_MAX_S)
                continue
            # Sleeps until the agent's consumed position reaches what this
            # value needs: the agent wakes the waiter once it gets there (or
            # the writer fails); FUTEX_WAIT returns at once if the position
            # moved since this read of it. Polling, each pause cost ~30 us of
            # CPU and overshot the room by up to 1 ms: a step waiting for a
            # busy agent slept 3-4 times.
            _Q.pack_into(self._mm, _ROOM_WANTED, consumed_at_least)
            try:
                seen = self._consumed()
                if seen < consumed_at_least:
                    left = min(left, _ROOM_SLEEP_MAX_S)
                    ts = _Timespec(int(left), int((left % 1) * 1e9))
                    r = futex(_SYS_FUTEX, self._consumed_addr, _FUTEX_WAIT, seen & 0xFFFFFFFF, ctypes.byref(ts), None, 0)
                    err = ctypes.get_errno() if r == -1 else 0
                    if err and err not in _FUTEX_OK_ERRORS:
                        self._futex_failed = True
                        futex = None
                        logger.warning("tensorkeep writer %s: waiting on the agent's position failed (%s); "
                                       "polling it instead", self.worker, os.strerror(err))
            finally:
                _Q.pack_into(self._mm, _ROOM_WANTED, 0)
        self._request(_SYNC, 0, None)  # waits until the agent took everything sent
        self._room = self._consumed() + self._ring

    def _send_own_fd(self, record: bytes, data: Any, n: int) -> None:
        """A value larger than the ring goes in a memfd of its own."""
        fd = _sealed_memfd(n)
        try:
            with mmap.mmap(fd, n) as mm:
                if data.__class__ is np.ndarray:
                    dst = np.frombuffer(mm, np.uint8, n).view(data.dtype).reshape(data.shape)
                    np.copyto(dst, data, casting="no")
                    del dst
                else:
                    mm[:n] = data
            self._send_batch()
            self._send(_WRITE_HEAD.pack(_WRITE_FD, 0, 0, n) + record, fd)
        finally:
            os.close(fd)

    def end_step(self, step: int) -> None:
        """Hands the step's records over, with the end of the step, in one message."""
        with self._lock:
            self._check_usable()
            self._batch.append(_LEN_CONTROL.pack(_CONTROL.size, _END_STEP, 0, step))
            self._batch_count += 1
            self._send_batch()
            dropped = _Q.unpack_from(self._mm, _DROPPED)[0]
            if dropped != self._dropped_seen:
                self._dropped_seen = dropped
                logger.error(
                    "tensorkeep writer %s of trial %s: %d records DROPPED so far: the collector did not "
                    "take them within max_stall_seconds and the agent's journal could not either "
                    "(full or unwritable; see tensorkeep-agent's log)",
                    self.worker,
                    self.trial,
                    dropped,
                )

    def flush(self, timeout: Optional[float] = None) -> None:
        """Returns once everything handed over so far is durable on the collector."""
        with self._lock:
            self._check_usable()
            self._send_batch()  # (the lock is not held while waiting for the reply)
        self._request(_FLUSH, 0, timeout, "flush")

    def close(self, end_of_training: bool, timeout: Optional[float] = None) -> None:
        """Closes the writer (once acknowledged), then the connection; a second
        call does nothing. Raises the writer's error if it failed."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        atexit.unregister(self._atexit)
        try:
            if self._error is not None:
                raise self._error
            with self._lock:
                self._send_batch()
            self._request(_CLOSE, 1 if end_of_training else 0, timeout, "close")
        finally:
            self._shutdown()

    # ------------------------------------------------------------------

    def _send_batch(self) -> None:
        """Sends what waits in the batch, as one Batch message (requires _lock)."""
        count = self._batch_count
        if not count:
            return
        batch = self._batch
        self._batch = []
        self._batch_count = 0
        self._batch_bytes = 0
        self._batch_values = 0
        batch.insert(0, _BATCH_HEAD.pack(_BATCH, count))
        self._send(b"".join(batch))

    def _send(self, message: bytes, fd: Optional[int] = None) -> None:
        self._last_send = time.monotonic()
        try:
            if fd is None:
                self._sock.send(message)
            else:
                socket.send_fds(self._sock, [message], [fd])
        except OSError as e:
            self._lost(e)

    def _lost(self, e: BaseException) -> None:
        if self._error is None:
            self._error = _agent.AgentUnavailable(
                f"the connection to tensorkeep-agent ({_agent.socket_path()}) broke: {e}; what "
                "was handed over before is still pushed by the agent"
            )
        raise self._error

    def _parse_reply(self, reply: bytes):
        _, ok, rid = _REPLY_HEAD.unpack_from(reply, 0)
        if ok:
            return rid, None
        code = struct.unpack_from("<i", reply, 16)[0]
        n = _U32.unpack_from(reply, 20)[0]
        reason = reply[24 : 24 + n].decode(errors="replace")
        m = _U32.unpack_from(reply, 24 + n)[0]
        message = reply[28 + n : 28 + n + m].decode(errors="replace")
        err = _errors.translate(_AgentError(code, reason, message), trial=self.trial, worker=self.worker)
        return rid, err

    def _request(self, kind: int, arg: int, timeout: Optional[float], what: str = "") -> None:
        """Sends a request and waits for its reply; raises the writer's error,
        WaitTimeout after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._reply_lock:
            rid = self._next_request
            self._next_request += 1
            self._send(_CONTROL.pack(kind, arg, rid))
            while True:
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise WaitTimeout(f"{what or 'the agent'} did not complete within {timeout} s")
                    self._sock.settimeout(left)
                else:
                    self._sock.settimeout(None)
                try:
                    reply = self._sock.recv(1 << 16)
                except socket.timeout:
                    continue
                except OSError as e:
                    self._lost(e)
                if not reply:
                    self._lost(ConnectionResetError("the agent closed the connection"))
                got, err = self._parse_reply(reply)
                if got != rid:
                    continue  # the reply of a request that timed out
                if err is not None:
                    # Kept (every later call raises it) once the agent marked
                    # the writer failed; a Flush or Close that only ran out of
                    # retry_timeout (the collector away, what was handed over
                    # kept by the agent) leaves the writer usable.
                    if self._error is None and self._failed():
                        self._error = err
                    raise err
                return

    def _shutdown(self) -> None:
        try:
            self._final = (
                self.stop_requested,
                self.stop_reason,
                self.committed_through,
                self.streams_opened,
                self.journaled_bytes,
                self.dropped_records,
            )
        except ValueError:
            self._final = (False, "", -1, 0, 0, 0)
        self._ended = True
        self._sock.close()
        try:
            self._mm.close()
        except BufferError:
            pass
