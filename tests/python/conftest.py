"""Fixtures of the Python client's tests.

- ``server``: the real collector binary (``$TK_BIN_DIR/tensorkeep-server``,
  default /work/main/build/bin), started on port 0 in a temporary data
  directory; the fixture waits for its first stdout line ``listening on
  HOST:PORT`` (no sleeps, no fixed ports; with ``--http-listen`` in its
  arguments also for the second, ``http listening on HOST:PORT``, kept in
  ``http_address``) and stops it at teardown (SIGTERM,
  then SIGKILL). When TK_BIN_DIR is not set and the binary is missing (a
  checkout without a build), tests using it are skipped; under ctest
  (TK_BIN_DIR set) a missing binary fails them.
- ``fake``: an in-process fake collector that implements only Push, with
  fault injection, for the Writer's protocol tests.
- ``trial_url``: a fresh ``tensorkeep://HOST:PORT/TRIAL`` on ``server`` per test.

Writers hand their tensors over to a tensorkeep-agent (tensorkeep._agent):
each pytest process (and the processes its tests start, which inherit the
environment) gets an agent of its own, started by its first Writer from
``$TK_BIN_DIR`` on a socket in a temporary directory, gone 2 s after its
last writer; so concurrent test runs (and other builds) never share one.
"""

import atexit
import os
import re
import shutil
import signal
import subprocess
import threading
import tempfile
import time
import uuid
import weakref
from concurrent import futures
from contextlib import contextmanager
from typing import Dict, List, Optional, Sequence, Tuple

import grpc
import pytest

from tensorkeep._proto import tensorkeep_pb2 as pb
from tensorkeep._proto import tensorkeep_pb2_grpc as pb_grpc
from tensorkeep.trial import Trial
from tensorkeep.writer import Writer

# Every Trial and Writer a test makes, so the server fixture can release their
# connections before stopping the collector (a collector waits up to its grace
# period for open connections).
_LIVE: "weakref.WeakSet" = weakref.WeakSet()


def _tracking(cls):
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _LIVE.add(self)

    cls.__init__ = __init__


_tracking(Trial)
_tracking(Writer)


def release_clients() -> None:
    for obj in list(_LIVE):
        try:
            if isinstance(obj, Writer):
                obj.close(end_of_training=False, timeout=2)
            else:
                obj.close()
        except Exception:
            pass
    _LIVE.clear()

DEFAULT_BIN_DIR = "/work/main/build/bin"


def _own_agent() -> None:
    """This test process's writers get an agent of their own (see above)."""
    from tensorkeep import _agent

    if os.environ.get(_agent.SOCKET_ENV):
        return  # set by who runs the tests (or a parent test process)
    directory = tempfile.mkdtemp(prefix="tk-agent-")
    atexit.register(shutil.rmtree, directory, True)
    os.environ[_agent.SOCKET_ENV] = os.path.join(directory, "agent.sock")
    os.environ.setdefault(_agent.IDLE_EXIT_ENV, "2")
    binary = os.path.join(os.environ.get("TK_BIN_DIR", DEFAULT_BIN_DIR), "tensorkeep-agent")
    if os.access(binary, os.X_OK):
        os.environ.setdefault(_agent.BINARY_ENV, binary)


_own_agent()
_LISTENING = re.compile(r"listening on (\S+):(\d+)\s*$")
_HTTP_LISTENING = re.compile(r"http listening on (\S+:\d+)\s*$")
_START_TIMEOUT = 30.0


def server_binary() -> Optional[str]:
    bin_dir = os.environ.get("TK_BIN_DIR", DEFAULT_BIN_DIR)
    path = os.path.join(bin_dir, "tensorkeep-server")
    return path if os.access(path, os.X_OK) else None


class ServerProcess:
    """A running tensorkeep-server. ``address`` is its HOST:PORT."""

    def __init__(self, data_dir: str, log_path: str, extra_args: Optional[List[str]] = None):
        self.data_dir = data_dir
        self.log_path = log_path
        self.extra_args = list(extra_args or [])
        self.proc: Optional[subprocess.Popen] = None
        self.host = ""
        self.port = 0
        self.lines: List[str] = []
        # With --http-listen: HOST:PORT of the HTTP port (the second stdout line).
        self.http_address = ""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self, trial: str) -> str:
        return f"tensorkeep://{self.address}/{trial}"

    def start(self, port: int = 0, extra_args: Sequence[str] = ()) -> None:
        binary = server_binary()
        assert binary, "tensorkeep-server binary not found"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [binary, "--listen", f"127.0.0.1:{port}", "--data-dir", self.data_dir, *self.extra_args, *extra_args],
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        first = self._first_line()
        m = _LISTENING.match(first)
        assert m, f"unexpected first line from tensorkeep-server: {first!r} (log: {self.log_path})"
        self.host, self.port = m.group(1), int(m.group(2))
        if "--http-listen" in [*self.extra_args, *extra_args]:
            second = self._first_line()
            h = _HTTP_LISTENING.match(second)
            assert h, f"unexpected second line from tensorkeep-server: {second!r} (log: {self.log_path})"
            self.http_address = h.group(1)
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()

    def _first_line(self) -> str:
        result: Dict[str, str] = {}
        done = threading.Event()

        def read() -> None:
            result["line"] = self.proc.stdout.readline().decode(errors="replace")
            done.set()

        threading.Thread(target=read, daemon=True).start()
        if not done.wait(_START_TIMEOUT):
            self.kill()
            pytest.fail(f"tensorkeep-server printed nothing within {_START_TIMEOUT} s")
        if not result["line"]:
            code = self.proc.wait()
            with open(self.log_path, errors="replace") as f:
                pytest.fail(f"tensorkeep-server exited with {code} before listening:\n{f.read()[-4000:]}")
        return result["line"]

    def _drain(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            self.lines.append(line.decode(errors="replace"))

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit within 10 s."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        """SIGKILL: the crash case."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextmanager
def mounted_tmpfs(path, size: str, why: str):
    """A tmpfs of ``size`` (mount's size=, e.g. "1m") mounted at ``path`` (made
    here) for the block, unmounted after; the test is skipped, with the reason,
    where it may not mount one (``why``: what needs it)."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}): {why} needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@pytest.fixture
def server(tmp_path):
    if server_binary() is None:
        if "TK_BIN_DIR" in os.environ:
            pytest.fail(f"tensorkeep-server not found in TK_BIN_DIR={os.environ['TK_BIN_DIR']}")
        pytest.skip(f"tensorkeep-server not built ({DEFAULT_BIN_DIR})")
    data = tmp_path / "data"
    data.mkdir()
    s = ServerProcess(str(data), str(tmp_path / "server.log"))
    s.start()
    yield s
    release_clients()
    s.stop()


@pytest.fixture
def http_collector(tmp_path):
    """Starts collectors with --http-listen 127.0.0.1:0 (extra flags as arguments);
    stops them all at the end."""
    if server_binary() is None:
        pytest.skip("tensorkeep-server not built")
    started = []

    def run(*args: str) -> ServerProcess:
        data = tmp_path / f"data{len(started)}"
        data.mkdir()
        s = ServerProcess(str(data), str(tmp_path / f"server{len(started)}.log"))
        s.start(extra_args=["--http-listen", "127.0.0.1:0", *args])
        started.append(s)
        return s

    yield run
    release_clients()
    for s in started:
        s.stop()


@pytest.fixture
def trial_name(request) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def trial_url(server, trial_name) -> str:
    return server.url(trial_name)


# ---------------------------------------------------------------------------
# A fake collector for the Writer's protocol.
# ---------------------------------------------------------------------------


class FakeCollector(pb_grpc.TensorKeepServicer):
    """Implements Push only; keeps every record by (step, worker, name).

    Knobs (set by tests):
        fail_after_records: abort the stream with UNAVAILABLE (no tk-reason)
            after receiving this many records in total, before acking them.
        ack_only_flush: ack only on Flush and Close.
        hold_acks: an Event; acks wait until it is set.
        stop_after_records: report stop_requested after this many records.
        reject_reason: abort every Push with this tk-reason (INVALID_ARGUMENT).
    """

    def __init__(self):
        self.lock = threading.Lock()
        self.records: Dict[tuple, pb.TensorRecord] = {}
        self.rewrites = 0
        self.conflicts = 0
        self.opens: List[pb.Open] = []
        self.seqs: List[List[int]] = []
        self.end_steps: List[int] = []
        self.closes: List[bool] = []
        self.messages = 0
        self.record_messages: List[Tuple[float, int]] = []  # (arrival, records) of each RecordBatch
        self.max_message_bytes = 0
        self.records_seen = 0
        self.fail_after_records: Optional[int] = None
        self.ack_only_flush = False
        self.hold_acks: Optional[threading.Event] = None
        self.stop_after_records: Optional[int] = None
        self.reject_reason: Optional[str] = None

    def _store(self, worker: str, r: pb.TensorRecord) -> None:
        key = (r.step, worker, r.name)
        with self.lock:
            old = self.records.get(key)
            if old is None:
                self.records[key] = r
            elif old == r:
                self.rewrites += 1
            else:
                self.conflicts += 1

    def Push(self, request_iterator, context):
        if self.reject_reason:
            context.abort_with_status(_status(grpc.StatusCode.INVALID_ARGUMENT, "rejected", self.reject_reason))
        seqs: List[int] = []
        with self.lock:
            self.seqs.append(seqs)
        worker = None
        partial: Optional[pb.TensorRecord] = None
        buf = bytearray()
        committed = -1
        for req in request_iterator:
            self.messages += 1
            self.max_message_bytes = max(self.max_message_bytes, req.ByteSize())
            seqs.append(req.seq)
            kind = req.WhichOneof("kind")
            ack = not self.ack_only_flush
            if kind == "open":
                worker = req.open.worker
                self.opens.append(req.open)
            elif kind == "records":
                recs = list(req.records.records)
                self.record_messages.append((time.monotonic(), len(recs)))
                if self.fail_after_records is not None and self.records_seen + len(recs) > self.fail_after_records:
                    self.fail_after_records = None  # fail once
                    context.abort(grpc.StatusCode.UNAVAILABLE, "injected failure")
                self.records_seen += len(recs)
                for i, r in enumerate(recs):
                    if r.value_size > len(r.data):
                        assert i == len(recs) - 1, "a partial record must be the last of its batch"
                        partial, buf = r, bytearray(r.data)
                    else:
                        self._store(worker, r)
                    committed = max(committed, r.step - 1)
            elif kind == "chunk":
                assert partial is not None, "chunk without a partial record"
                buf += req.chunk.data
                if len(buf) == partial.value_size:
                    full = pb.TensorRecord()
                    full.CopyFrom(partial)
                    full.data = bytes(buf)
                    self._store(worker, full)
                    partial = None
            elif kind == "end_step":
                self.end_steps.append(req.end_step.step)
                committed = max(committed, req.end_step.step)
            elif kind == "flush":
                ack = True
            elif kind == "close":
                self.closes.append(req.close.end_of_training)
                ack = True
            if ack:
                if self.hold_acks is not None:
                    self.hold_acks.wait()
                stop = self.stop_after_records is not None and self.records_seen >= self.stop_after_records
                yield pb.PushResponse(
                    acked_seq=req.seq,
                    committed_through=committed,
                    stop_requested=stop,
                    stop_reason="fake rule fired" if stop else "",
                )
            if kind == "close":
                return


class _Status(grpc.Status):
    def __init__(self, code, details, trailing_metadata):
        self.code = code
        self.details = details
        self.trailing_metadata = trailing_metadata


def _status(code, details, reason):
    return _Status(code, details, (("tk-reason", reason),))


class FakeServer:
    def __init__(self):
        self.servicer = FakeCollector()
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8),
            options=[("grpc.max_receive_message_length", 4 << 20)],  # gRPC's default
        )
        pb_grpc.add_TensorKeepServicer_to_server(self.servicer, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def url(self, trial: str) -> str:
        return f"tensorkeep://127.0.0.1:{self.port}/{trial}"

    def stop(self) -> None:
        self.server.stop(grace=None)


@pytest.fixture
def fake():
    s = FakeServer()
    yield s
    if s.servicer.hold_acks is not None:
        s.servicer.hold_acks.set()
    s.stop()
