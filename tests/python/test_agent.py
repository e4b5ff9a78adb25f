"""tensorkeep-agent and the Writer handing tensors over to it:
what was handed over survives a SIGKILL of the training process, the socket
is private to its user, the memory budget refuses writers beyond it, a
misbehaving client cannot bring it down, and concurrent starts end with one
agent. The Writer's behaviour itself is tested by test_writer*.py (every
Writer hands over to an agent)."""

import os
import pathlib
import platform
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tensorkeep import Writer, _agent, _handover
from tensorkeep.exceptions import TensorkeepError
from tensorkeep.trials import create_trial
from tensorkeep.worker_status import WorkerState

ROOT = pathlib.Path(__file__).resolve().parents[2]


def agent_binary() -> str:
    path = pathlib.Path(os.environ.get("TK_BIN_DIR", str(ROOT / "build" / "bin"))) / "tensorkeep-agent"
    if not os.access(path, os.X_OK):
        if "TK_BIN_DIR" in os.environ:
            pytest.fail(f"tensorkeep-agent not built ({path})")
        pytest.skip(f"tensorkeep-agent not built ({path})")
    return str(path)


class Agent:
    """A tensorkeep-agent this test owns, on a socket of its own."""

    def __init__(self, path: str, *args: str):
        self.path = path
        self.log_path = os.path.join(os.path.dirname(os.path.dirname(path)), "agent-test.log")
        self.proc = subprocess.Popen(
            [agent_binary(), "--socket", path, *args],
            stdout=subprocess.PIPE,
            stderr=open(self.log_path, "ab"),
            stdin=subprocess.DEVNULL,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert line.startswith("listening on "), f"agent: {line!r}; log: {self.log()}"

    def log(self) -> str:
        try:
            return pathlib.Path(self.log_path).read_text()
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def agent_env(tmp_path, monkeypatch):
    """Writers of this test hand over to an agent on a socket of the test's own."""
    path = str(tmp_path / "agent" / "agent.sock")
    monkeypatch.setenv(_agent.SOCKET_ENV, path)
    monkeypatch.setenv(_agent.BINARY_ENV, agent_binary())
    monkeypatch.setenv(_agent.IDLE_EXIT_ENV, "1")
    return path


@pytest.fixture
def agent(agent_env):
    a = Agent(agent_env, "--idle-exit-seconds", "0")
    yield a
    a.stop()


def wait_until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


# A training process: writes steps 0..LAST, ends each, prints "ended" once
# end_step(LAST) returned, then waits to be killed (it never flushes).
TRAINING = r"""
import sys, time
import numpy as np
from tensorkeep import Writer
url, last = sys.argv[1], int(sys.argv[2])
w = Writer(url, worker="worker_0", num_workers=1)
for s in range(last + 1):
    w.write_tensor("w", np.full(250_000, s, np.float32), step=s)
    w.write_tensor("loss", np.float32(s), step=s)
    w.end_step(s)
print("ended", flush=True)
time.sleep(600)
"""


def test_sigkill_right_after_end_step_returned_still_delivers_the_step(server, trial_url, agent):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    p = subprocess.Popen([sys.executable, "-c", TRAINING, trial_url, "4"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout.readline().startswith("ended")
        p.send_signal(signal.SIGKILL)
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    trial = create_trial(trial_url)
    trial.wait_for_steps([4], timeout=30)
    assert trial.steps() == [0, 1, 2, 3, 4]
    for s in range(5):
        assert np.array_equal(trial.tensor("w").value(s), np.full(250_000, s, np.float32))
    # The agent closed the worker as not finished: the trial is not ended.
    wait_until(lambda: not trial.worker_states()["worker_0"].connected, what="the worker's stream to end")
    assert trial.worker_states()["worker_0"].state != WorkerState.CLOSED
    assert agent.alive()


def test_first_use_starts_the_agent_in_a_private_directory_and_it_exits_when_idle(server, trial_url, agent_env):
    with Writer(trial_url) as w:
        w.write_tensor("x", np.arange(10, dtype=np.float32), step=0)
        w.flush()
        directory = os.stat(os.path.dirname(agent_env))
        assert stat.S_IMODE(directory.st_mode) == 0o700 and directory.st_uid == os.getuid()
        assert stat.S_IMODE(os.stat(agent_env).st_mode) == 0o600
    assert np.array_equal(create_trial(trial_url).tensor("x").value(0), np.arange(10, dtype=np.float32))
    # TENSORKEEP_AGENT_IDLE_EXIT_SECONDS=1: it leaves once no writer is left.
    wait_until(lambda: not os.path.exists(agent_env), what="the idle agent to exit")


def test_an_agent_refuses_to_use_a_directory_others_can_enter(tmp_path):
    d = tmp_path / "open"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    out = subprocess.run([agent_binary(), "--socket", str(d / "agent.sock")], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "0700" in out.stderr


def test_concurrent_starts_leave_one_agent(tmp_path):
    path = str(tmp_path / "a" / "agent.sock")
    procs = [
        subprocess.Popen([agent_binary(), "--daemonize", "--idle-exit-seconds", "1", "--socket", path],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=30)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sum(o.startswith("listening on") for o in outs) == 1, outs
    assert sum(o.startswith("already running on") for o in outs) == 2, outs
    wait_until(lambda: not os.path.exists(path), what="the idle agent to exit")


def test_writers_beyond_the_memory_budget_are_refused(server, trial_url, agent_env):
    a = Agent(agent_env, "--memory-budget-mb", "2", "--idle-exit-seconds", "0")
    try:
        first = Writer(trial_url, worker="worker_0", num_workers=2, max_queue_bytes=1 << 20)
        with pytest.raises(TensorkeepError, match="memory budget"):
            Writer(trial_url, worker="worker_1", num_workers=2, max_queue_bytes=1 << 20)
        first.close()
        again = Writer(trial_url, worker="worker_1", num_workers=2, max_queue_bytes=1 << 20)
        again.write_tensor("x", np.zeros(4, np.float32), step=0)
        again.close()
        assert a.alive()
    finally:
        a.stop()


def _raw(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    s.settimeout(10)
    return s


def _open_message(ring: int, target: str = "127.0.0.1:1") -> bytes:
    return _handover._OPEN_HEAD.pack(_handover._OPEN, _handover.PROTOCOL_VERSION, 1, ring, 1 << 20, 0.1) + _handover._strings(
        target, "t", "worker_0", "", "", "", ""
    )


def test_a_misbehaving_client_cannot_bring_the_agent_down(server, trial_url, agent, tmp_path):
    ring = 1 << 16
    # Garbage, a message before Open, a truncated Open.
    for junk in (b"", b"\x07", struct.pack("<IIQ", 2, 0, 5) + b"\xff" * 40, struct.pack("<I", 1) + b"\x01"):
        s = _raw(agent.path)
        s.send(junk)
        s.settimeout(10)
        try:
            s.recv(100)
        except OSError:
            pass
        s.close()
    # An Open whose memory is a regular file (it could be truncated under the
    # agent's mapping): refused.
    f = open(tmp_path / "plain", "w+b")
    f.truncate(_handover.HEADER_BYTES + ring)
    s = _raw(agent.path)
    socket.send_fds(s, [_open_message(ring)], [f.fileno()])
    reply = s.recv(1 << 16)
    assert reply and _handover._REPLY_HEAD.unpack_from(reply)[1] == 0
    s.close()
    # An unsealed memfd: refused too.
    fd = os.memfd_create("x")
    os.ftruncate(fd, _handover.HEADER_BYTES + ring)
    s = _raw(agent.path)
    socket.send_fds(s, [_open_message(ring)], [fd])
    assert _handover._REPLY_HEAD.unpack_from(s.recv(1 << 16))[1] == 0
    s.close()
    os.close(fd)
    # A valid Open, then values outside the ring, an oversized message and a
    # record that does not parse.
    for bad in (
        struct.pack("<IIQQ", _handover._WRITE, 0, ring - 8, 64),
        struct.pack("<IIQQ", _handover._WRITE, 0, 0, 1 << 40),
        struct.pack("<IIQQ", _handover._WRITE, 0, 0, 4) + b"\xff\xff\xff",
        b"\x02" * (200 << 10),
        # Batches: a count beyond its messages, a Flush or a Batch inside one,
        # a length past the end, bytes after the last message.
        struct.pack("<II", _handover._BATCH, 3) + struct.pack("<I", 16) + struct.pack("<IIQ", _handover._END_STEP, 0, 1),
        struct.pack("<III", _handover._BATCH, 1, 16) + struct.pack("<IIQ", _handover._FLUSH, 0, 1),
        struct.pack("<III", _handover._BATCH, 1, 8) + struct.pack("<II", _handover._BATCH, 0),
        struct.pack("<III", _handover._BATCH, 1, 1 << 30) + b"\x04\x00\x00\x00",
        struct.pack("<III", _handover._BATCH, 1, 16) + struct.pack("<IIQ", _handover._END_STEP, 0, 1) + b"\x00",
    ):
        fd = _handover._sealed_memfd(_handover.HEADER_BYTES + ring)
        s = _raw(agent.path)
        socket.send_fds(s, [_open_message(ring, server.address)], [fd])
        assert _handover._REPLY_HEAD.unpack_from(s.recv(1 << 16))[1] == 1
        try:
            s.send(bad)
        except OSError:
            pass  # too large for the socket
        s.close()
        os.close(fd)
    # Gone in the middle of everything, many at once.
    for _ in range(20):
        s = _raw(agent.path)
        s.close()
    assert agent.alive()
    with Writer(trial_url) as w:
        w.write_tensor("x", np.arange(3, dtype=np.float32), step=0)
    assert np.array_equal(create_trial(trial_url).tensor("x").value(0), np.arange(3, dtype=np.float32))
    assert agent.alive()


def test_values_larger_than_the_ring_and_many_threads(server, trial_url, agent):
    big = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)  # 4 MiB > ring of 256 KiB
    strided = np.arange(200, dtype=np.float64).reshape(10, 20).T  # not contiguous
    w = Writer(trial_url, max_queue_bytes=512 << 10)

    barrier = threading.Barrier(3)

    def write(i):
        for s in range(20):
            w.write_tensor(f"t{i}", np.full(20_000, s, np.float32), step=s)
            barrier.wait(30)  # a step is written by all before the next begins

    ts = [threading.Thread(target=write, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    w.write_tensor("big", big, step=20)
    w.write_tensor("strided", strided, step=20)
    w.close()
    trial = create_trial(trial_url)
    assert np.array_equal(trial.tensor("big").value(20), big)
    assert np.array_equal(trial.tensor("strided").value(20), strided)
    assert np.array_equal(trial.tensor("t2").value(19), np.full(20_000, 19, np.float32))


def test_a_ring_refilled_lap_after_lap_never_overwrites_what_the_agent_did_not_take(server, trial_url, agent, monkeypatch):
    """The writer only reads the agent's consumed position when a value reaches
    past the room it last saw free: values of odd sizes, many laps of a 256 KiB
    ring that fills (the writer has to wait for the agent: for room in the
    ring, read from the agent's consumed position, or, after 50 ms, with a
    Sync), every one read back equal to what was written."""
    syncs = []
    request = _handover.AgentStream._request

    def counting(self, kind, *args):
        if kind == _handover._SYNC:
            syncs.append(kind)
        return request(self, kind, *args)

    monkeypatch.setattr(_handover.AgentStream, "_request", counting)
    rng = np.random.default_rng(7)
    sizes = [1, 257, 3_001, 12_289, 40_009, 65_537]  # float32 elements: 4 B to 256 KiB
    w = Writer(trial_url, max_queue_bytes=512 << 10)
    written = {}
    for step in range(40):
        for i, n in enumerate(sizes):
            value = rng.standard_normal(n).astype(np.float32)
            written[(f"t{i}", step)] = value
            w.write_tensor(f"t{i}", value, step=step)
        w.end_step(step)
    waits = w._stream.room_waits
    w.close()
    total = sum(v.nbytes for v in written.values())
    assert total > 20 * (256 << 10)  # many laps of the ring
    assert waits, "the ring never filled: the test did not exercise waiting for the agent"
    print(f"{waits} waits for room, {len(syncs)} of them ended by a Sync")
    trial = create_trial(trial_url)
    for i in range(len(sizes)):
        values = trial.tensor(f"t{i}").values()
        assert sorted(values) == list(range(40))
        for step, got in values.items():
            assert np.array_equal(got, written[(f"t{i}", step)]), (i, step)


@pytest.mark.parametrize("wakes", [True, False], ids=["woken", "polling"])
def test_a_writer_waiting_for_room_sleeps_until_the_agent_moves(server, trial_url, agent, monkeypatch, wakes):
    """A value that finds the ring full sleeps on the agent's consumed
    position, which the agent wakes after each value it takes (it says so in
    the ring's header): no polling pause. With an agent that does not (a
    client without futex: the same path), it polls as before. Either way
    every value arrives intact."""
    if not wakes:
        monkeypatch.setattr(_handover, "_futex", lambda: None)
    elif _handover._futex() is None:
        pytest.skip(f"no futex here ({sys.platform}, {platform.machine()}): the wait polls")
    w = Writer(trial_url, max_queue_bytes=512 << 10)  # a 256 KiB ring
    flags = _handover._U32.unpack_from(w._stream._mm, _handover._FLAGS)[0]
    assert flags & _handover._WAKES_ROOM_WAITERS, "the agent does not say it wakes waiters"
    values = [np.full(24 << 10, s, np.float32) for s in range(60)]  # 96 KiB each: ~22 laps
    for s, v in enumerate(values):
        w.write_tensor("x", v, step=s)
        w.end_step(s)
    stream = w._stream
    w.close()
    assert stream.room_waits >= 1, "the ring never filled: nothing waited"
    if wakes:
        assert stream.room_polls == 0, f"{stream.room_polls} polling pauses in {stream.room_waits} waits"
    else:
        assert stream.room_polls >= 1
    got = create_trial(trial_url).tensor("x").values()
    assert sorted(got) == list(range(60))
    for s, v in got.items():
        assert np.array_equal(v, values[s]), s


def _counting_futex(monkeypatch):
    """Wraps FUTEX_WAIT to count its calls; returns the list of their results."""
    real = _handover._futex()
    if real is None:
        pytest.skip(f"no futex here ({sys.platform}, {platform.machine()}): the wait polls")
    calls = []

    def counting(*args):
        r = real(*args)
        calls.append(r)
        return r

    monkeypatch.setattr(_handover, "_futex", lambda: counting)
    return calls


def test_a_waiting_writer_is_woken_when_its_room_is_free_not_at_every_value(server, trial_url, agent, monkeypatch):
    """The agent wakes a writer waiting for room once its consumed position
    reaches what the writer needs, not after every value it takes: a step of
    150 small values, then one of 192 KiB, into a 256 KiB ring. Woken at
    every value, the writer slept ~20 times a wait."""
    calls = _counting_futex(monkeypatch)
    w = Writer(trial_url, max_queue_bytes=512 << 10)  # a 256 KiB ring
    small = np.ones(256, np.float32)
    big = [np.full(48 << 10, s, np.float32) for s in range(20)]
    for s in range(20):
        for i in range(150):
            w.write_tensor(f"s{i}", small, step=s)
        w.write_tensor("big", big[s], step=s)
        w.end_step(s)
    stream = w._stream
    w.close()
    assert stream.room_waits >= 5, "the ring seldom filled: nothing to show"
    assert stream.room_polls == 0
    print(f"{len(calls)} sleeps in {stream.room_waits} waits")
    assert len(calls) <= 6 * stream.room_waits, (len(calls), stream.room_waits)
    got = create_trial(trial_url).tensor("big").values()
    assert sorted(got) == list(range(20))
    assert all(np.array_equal(v, big[s]) for s, v in got.items())


def test_a_futex_that_fails_turns_the_wait_to_polling(server, trial_url, agent, monkeypatch):
    """FUTEX_WAIT failing for good (ENOSYS here, from a syscall number the
    kernel does not have; a seccomp filter's EPERM alike) does not make the
    wait spin: the stream polls from then on, and every value arrives."""
    calls = _counting_futex(monkeypatch)
    monkeypatch.setattr(_handover, "_SYS_FUTEX", 100_000)
    w = Writer(trial_url, max_queue_bytes=512 << 10)
    values = [np.full(24 << 10, s, np.float32) for s in range(30)]
    for s, v in enumerate(values):
        w.write_tensor("x", v, step=s)
        w.end_step(s)
    stream = w._stream
    w.close()
    assert stream.room_waits >= 1
    assert calls == [-1], calls  # one failure, then polling
    assert stream.room_polls >= 1
    got = create_trial(trial_url).tensor("x").values()
    assert sorted(got) == list(range(30))
    assert all(np.array_equal(v, values[s]) for s, v in got.items())


def test_a_ring_the_agent_keeps_up_with_stays_in_the_pages_written_first(server, trial_url, agent, monkeypatch):
    """When the agent has taken everything, the next value goes to the ring's
    start (pages already written) rather than to pages never written, whose
    first write costs ~5 us a page on a VM (issue 16: a hook saving one step
    in 100 paid it at every saving step until the ring's 32 MiB had been
    filled once). Steps of 3 x 64 KiB through a 4 MiB ring, each flushed (the
    agent took it): every value lies in the first 192 KiB of the ring (a step's
    second value may already go back to the start, when the agent took the
    first before it came), and reads back equal."""
    offsets = []
    send = _handover.AgentStream._send

    def recording(self, message, fd=None):
        kind, count = _handover._BATCH_HEAD.unpack_from(message)
        at = _handover._BATCH_HEAD.size
        if kind == _handover._BATCH:
            for _ in range(count):
                size, mtype = struct.unpack_from("<II", message, at)
                if mtype == _handover._WRITE:
                    _, _, _, pos, n = _handover._LEN_WRITE_HEAD.unpack_from(message, at)
                    offsets.append((pos % self._ring, n))
                at += 4 + size
        return send(self, message, fd)

    monkeypatch.setattr(_handover.AgentStream, "_send", recording)
    rng = np.random.default_rng(3)
    w = Writer(trial_url, max_queue_bytes=8 << 20)
    written = {}
    steps = 40  # 7.5 MiB: almost two laps of the ring if it were filled in order
    for step in range(steps):
        for i in range(3):
            value = rng.standard_normal(16 << 10).astype(np.float32)
            written[(i, step)] = value
            w.write_tensor(f"t{i}", value, step=step)
        w.end_step(step)
        w.flush()
    w.close()
    assert w._stream._ring == 4 << 20
    assert len(offsets) == 3 * steps and offsets[0] == (0, 64 << 10), offsets[:3]
    beyond = [(o, n) for o, n in offsets if o + n > 3 * (64 << 10)]
    assert not beyond, f"values went past the pages one step needs: {beyond[:3]}"
    trial = create_trial(trial_url)
    for i in range(3):
        values = trial.tensor(f"t{i}").values()
        assert sorted(values) == list(range(steps))
        for step, got in values.items():
            assert np.array_equal(got, written[(i, step)]), (i, step)


def test_a_writer_waiting_for_room_outlasts_a_paused_agent(server, trial_url, agent, monkeypatch):
    """A value that finds the ring full first watches the agent's consumed
    position for 50 ms, then asks with a Sync, which the agent answers once
    it took everything: an agent paused (SIGSTOP) for 0.5 s with the ring
    full makes the step wait, without error, and every value arrives."""
    syncs = []
    request = _handover.AgentStream._request

    def counting(self, kind, *args):
        if kind == _handover._SYNC:
            syncs.append(time.monotonic())
        return request(self, kind, *args)

    monkeypatch.setattr(_handover.AgentStream, "_request", counting)
    w = Writer(trial_url, max_queue_bytes=512 << 10)  # a 256 KiB ring
    values = [np.full(16 << 10, s, np.float32) for s in range(12)]  # 64 KiB each: 3 laps
    w.write_tensor("x", values[0], step=0)
    w.flush()
    agent.proc.send_signal(signal.SIGSTOP)
    resumed = threading.Timer(0.5, agent.proc.send_signal, (signal.SIGCONT,))
    resumed.start()
    try:
        t0 = time.monotonic()
        for s in range(1, 12):
            w.write_tensor("x", values[s], step=s)
            w.end_step(s)
        waited = time.monotonic() - t0
    finally:
        resumed.join()
        agent.proc.send_signal(signal.SIGCONT)
    w.close()
    assert w._stream.room_waits >= 1
    assert syncs and syncs[0] - t0 >= 0.04, "no Sync after watching the consumed position"
    assert waited >= 0.4, waited  # the step waited for the paused agent
    got = create_trial(trial_url).tensor("x").values()
    assert sorted(got) == list(range(12))
    for s, v in got.items():
        assert np.array_equal(v, values[s]), s


def test_a_value_starting_a_new_lap_waits_only_for_what_was_sent(server, trial_url, agent, monkeypatch):
    """A value that does not fit before the ring's end starts the next lap; the
    room it needs then ends at the head (what was sent), never past it: the
    agent's consumed position cannot pass the head, and a wait for more would
    always run its 50 ms and end in a Sync."""
    targets = []
    wait = _handover.AgentStream._wait_for_room

    def recording(self, consumed_at_least):
        targets.append((consumed_at_least, self._head))
        return wait(self, consumed_at_least)

    monkeypatch.setattr(_handover.AgentStream, "_wait_for_room", recording)
    w = Writer(trial_url, max_queue_bytes=512 << 10)  # a 256 KiB ring
    a, b, c = np.ones(1, np.float32), np.full(25 << 10, 2, np.float32), np.full(50 << 10, 3, np.float32)
    w.write_tensor("a", a, step=0)  # sent at once (the first write after a quiet spell)
    w.write_tensor("b", b, step=0)  # 100 KiB, waiting in the batch
    w.write_tensor("c", c, step=0)  # 200 KiB: past the ring's end, the next lap
    w.close()
    assert targets, "the value did not wait for room: the test did not exercise a new lap"
    for target, head in targets:
        assert target <= head, (target, head)
    trial = create_trial(trial_url)
    for name, value in (("a", a), ("b", b), ("c", c)):
        assert np.array_equal(trial.tensor(name).value(0), value), name


def _rss_anon_kb(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError(f"no RssAnon in /proc/{pid}/status")


def test_the_agent_gives_freed_memory_back_once_no_writer_is_left(server, trial_url, agent):
    """The agent keeps the memory of the values it pushed for reuse while
    writers come and go (base/process_tuning.h, kReturnWhenAsked: no page
    fault per page at every value), and gives it back once no writer has
    been left for 2 s."""
    before = _rss_anon_kb(agent.proc.pid)
    w = Writer(trial_url, max_queue_bytes=128 << 20)
    value = np.ones(1 << 18, np.float32)  # 1 MiB
    for step in range(64):
        w.write_tensor("w", value * step, step=step)
        w.end_step(step)
    w.flush()
    held = _rss_anon_kb(agent.proc.pid)
    w.close()
    assert held - before >= 8 << 10, f"the agent held {held - before} kB of values: the test cannot tell"
    wait_until(lambda: _rss_anon_kb(agent.proc.pid) - before < 2 << 10, timeout=15.0,
               what=f"the agent's memory to go back (held {held - before} kB over its start)")
    got = create_trial(trial_url).tensor("w").values()
    assert sorted(got) == list(range(64)) and np.array_equal(got[63], value * 63)
