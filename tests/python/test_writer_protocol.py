"""The Writer's side of the Push protocol, against an in-process fake collector
(conftest.FakeCollector): batching, sequence numbers, chunking of large values,
flush, backpressure, reconnection with resend, stop requests, failures.
Every Writer hands over to a tensorkeep-agent, whose C++ writer speaks the
protocol; the tests that need the agent's linger or its process get an agent
of their own (``own_agent``)."""

import os
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

from tensorkeep import Writer, _agent, modes
from tensorkeep.exceptions import BadRequest, WriterClosed
from tensorkeep.trials import create_trial
from tensorkeep.writer import MAX_BATCH_BYTES


def arrays_of(fake, name):
    out = {}
    for (step, worker, n), r in fake.servicer.records.items():
        if n == name:
            out[step] = np.frombuffer(r.data, np.float32).reshape(tuple(r.shape))
    return out


def test_batches_many_records_per_message(fake):
    w = Writer(fake.url("t"), worker="worker_0", num_workers=2)
    vals = {s: np.full(100, s, np.float32) for s in range(500)}
    for s, v in vals.items():
        w.write_tensor("x", v, step=s, mode=modes.TRAIN, mode_step=s)
    w.close()
    f = fake.servicer
    assert len(f.records) == 500 and f.conflicts == 0
    got = arrays_of(fake, "x")
    assert all(np.array_equal(got[s], vals[s]) for s in vals)
    # Open + a few batches + close, not one message per record.
    assert f.messages < 20
    assert f.opens[0].trial == "t" and f.opens[0].worker == "worker_0" and f.opens[0].num_workers == 2
    assert f.seqs[0] == list(range(1, len(f.seqs[0]) + 1))
    assert f.closes == [True]


@pytest.fixture
def own_agent(tmp_path, monkeypatch):
    """Starts a tensorkeep-agent of this test's own (extra arguments given to
    the returned function); the test's writers hand over to it."""
    procs = []

    def start(*args: str) -> subprocess.Popen:
        binary = os.environ.get(_agent.BINARY_ENV)
        assert binary and os.access(binary, os.X_OK), f"tensorkeep-agent not found ({binary})"
        path = str(tmp_path / "agent" / "agent.sock")
        monkeypatch.setenv(_agent.SOCKET_ENV, path)
        p = subprocess.Popen([binary, "--socket", path, "--idle-exit-seconds", "0", *args],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        procs.append(p)
        line = p.stdout.readline()
        assert line.startswith("listening on "), line
        return p

    yield start
    for p in procs:
        p.send_signal(signal.SIGCONT)
        p.terminate()
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def test_a_steps_tensors_wake_the_sender_once_and_go_in_one_message(fake, own_agent):
    # A training step's tensors arrive over the step (weights at the forward,
    # gradients during the backward); each message sent is a wake-up of the
    # collector's side, so they wait for the end of the step (or a message's
    # worth of bytes, or the linger).
    own_agent("--linger-ms", "30000")
    w = Writer(fake.url("t"))
    vals = {f"t{i}": np.full(25_000, i, np.float32) for i in range(9)}  # 900 kB
    for step in range(3):
        for name, v in vals.items():
            w.write_tensor(name, v + step, step=step)
            time.sleep(0.005)
        time.sleep(0.1)
        assert fake.servicer.records_seen == 9 * step, "records were sent before the end of their step"
        w.end_step(step)
    w.flush()
    assert [n for _, n in fake.servicer.record_messages] == [9, 9, 9]
    assert np.array_equal(arrays_of(fake, "t8")[2], vals["t8"] + 2)
    w.close()


def test_records_without_an_end_step_are_sent_after_the_linger(fake, own_agent):
    own_agent("--linger-ms", "300")
    w = Writer(fake.url("t"))
    t0 = time.monotonic()
    w.write_tensor("x", np.arange(4, dtype=np.float32), step=0)
    deadline = t0 + 10
    while fake.servicer.records_seen == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.servicer.records_seen == 1, "a record without end_step or flush was never sent"
    assert fake.servicer.record_messages[0][0] - t0 >= 0.25
    w.close()


def test_a_message_worth_of_bytes_is_sent_without_waiting_for_the_step(fake, own_agent):
    own_agent("--linger-ms", "30000")
    w = Writer(fake.url("t"), max_queue_bytes=64 << 20)
    big = np.ones(MAX_BATCH_BYTES // 4 // 2, np.float32)  # half a message each
    for i in range(3):
        w.write_tensor(f"b{i}", big, step=0)
    deadline = time.monotonic() + 10
    while fake.servicer.records_seen < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.servicer.records_seen >= 2 and fake.servicer.end_steps == []
    w.close()
    assert fake.servicer.records_seen == 3


def test_large_values_are_chunked_below_4mib(fake):
    big = np.random.default_rng(0).standard_normal(3_000_000).astype(np.float32)  # 12 MB
    small = np.arange(10, dtype=np.float32)
    with Writer(fake.url("t")) as w:
        w.write_tensor("small", small, step=0)
        w.write_tensor("big", big, step=0)
        w.write_tensor("small", small, step=1)
    f = fake.servicer
    assert f.max_message_bytes <= 4 << 20
    assert np.array_equal(arrays_of(fake, "big")[0], big)
    assert np.array_equal(arrays_of(fake, "small")[1], small)
    assert f.conflicts == 0


def test_flush_returns_after_ack_and_end_step_is_sent(fake):
    w = Writer(fake.url("t"))
    w.write_tensor("x", np.ones(3, np.float32), step=4)
    w.end_step(4)
    w.flush()
    assert (4, "worker_0", "x") in fake.servicer.records
    assert fake.servicer.end_steps == [4]
    assert w.committed_through == 4
    w.close(end_of_training=False)
    assert fake.servicer.closes == [False]


def test_reconnects_and_resends_without_loss_or_duplicates(fake):
    fake.servicer.fail_after_records = 150
    vals = {s: np.random.default_rng(s).standard_normal(300).astype(np.float32) for s in range(400)}
    with Writer(fake.url("t"), max_queue_bytes=256 << 10) as w:
        for s, v in vals.items():
            w.write_tensor("x", v, step=s)
    f = fake.servicer
    assert len(f.seqs) >= 2, "the stream should have been reopened"
    for seqs in f.seqs:
        assert seqs == list(range(1, len(seqs) + 1))
    assert len(f.opens) == len(f.seqs)
    # The first stream opens, the later ones resume (a trial the writer's own
    # close ended still takes their resend).
    assert [o.resume for o in f.opens] == [False] + [True] * (len(f.opens) - 1)
    got = arrays_of(fake, "x")
    assert sorted(got) == sorted(vals)
    assert all(np.array_equal(got[s], vals[s]) for s in vals)
    assert f.conflicts == 0


def test_memory_is_bounded_when_the_collector_holds_acks(fake):
    hold = threading.Event()
    fake.servicer.hold_acks = hold
    limit = 512 << 10
    w = Writer(fake.url("t"), max_queue_bytes=limit)
    written = []
    done = threading.Event()

    def write():
        for s in range(200):
            w.write_tensor("x", np.zeros(10_000, np.float32), step=s)  # 40 KB each
            written.append(s)
        done.set()

    t = threading.Thread(target=write)
    t.start()
    assert not done.wait(1.0), "write_tensor should block while nothing is acknowledged"
    # What was handed over (the shared ring plus the agent's push buffer) is
    # bounded by max_queue_bytes: at most its worth of 40 KB records, plus the
    # one being written.
    assert len(written) * 40_000 <= limit + 40_000, f"{len(written)} records written with nothing acknowledged"
    hold.set()
    assert done.wait(30)
    t.join()
    w.close()
    assert len(fake.servicer.records) == 200


def test_auto_flush_keeps_acks_flowing_when_the_collector_acks_only_on_flush(fake):
    fake.servicer.ack_only_flush = True
    with Writer(fake.url("t"), max_queue_bytes=256 << 10) as w:
        for s in range(300):  # 12 MB through a 256 KiB window
            w.write_tensor("x", np.zeros(10_000, np.float32), step=s)
    assert len(fake.servicer.records) == 300


def test_stop_requested_from_acks(fake):
    fake.servicer.stop_after_records = 5
    w = Writer(fake.url("t"))
    assert not w.stop_requested
    for s in range(10):
        w.write_tensor("x", np.zeros(3, np.float32), step=s)
    w.flush()
    assert w.stop_requested and w.stop_reason == "fake rule fired"
    w.close()


def test_rejected_stream_fails_the_writer(fake):
    fake.servicer.reject_reason = "BAD_REQUEST"
    w = Writer(fake.url("t"))
    with pytest.raises(BadRequest):
        w.write_tensor("x", np.zeros(3, np.float32), step=0)
        w.flush(timeout=30)
    with pytest.raises(BadRequest):
        w.write_tensor("x", np.zeros(3, np.float32), step=1)
    with pytest.raises(BadRequest):  # close reports that data was lost
        w.close()
    w.close()  # once closed, nothing more


def test_close_reports_a_failure_it_meets(fake):
    fake.servicer.reject_reason = "CONFLICT"
    from tensorkeep.exceptions import Conflict

    w = Writer(fake.url("t"))
    w.write_tensor("x", np.zeros(3, np.float32), step=0)
    with pytest.raises(Conflict):
        w.close()


def test_context_manager_does_not_hide_the_exception_in_flight(fake):
    fake.servicer.reject_reason = "CONFLICT"
    with pytest.raises(KeyError):
        with Writer(fake.url("t")) as w:
            w.write_tensor("x", np.zeros(3, np.float32), step=0)
            raise KeyError("user error")


def test_use_after_close_raises(fake):
    w = Writer(fake.url("t"))
    w.close()
    w.close()  # a second close does nothing
    with pytest.raises(WriterClosed):
        w.write_tensor("x", np.zeros(3, np.float32), step=0)
    with pytest.raises(WriterClosed):
        w.flush()


def test_writes_from_many_threads(fake):
    w = Writer(fake.url("t"))

    def write(i):
        for s in range(100):
            w.write_tensor(f"t{i}", np.full(5, i, np.int32), step=s)

    ts = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    w.close()
    assert len(fake.servicer.records) == 400


def test_batch_limit_leaves_room_under_grpc_default():
    assert MAX_BATCH_BYTES < 4 << 20


def _dead_port():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_no_collector_listens_flush_and_close_raise_past_retry_timeout(tmp_path, monkeypatch):
    from tensorkeep import _agent
    from tensorkeep.exceptions import CollectorUnavailable

    # An agent of its own: the closed writer's data stays with it (an orphan,
    # then its journal once it exits idle), never replayed by the agent the
    # other tests share.
    monkeypatch.setenv(_agent.SOCKET_ENV, str(tmp_path / "agent" / "agent.sock"))
    w = Writer(f"tensorkeep://127.0.0.1:{_dead_port()}/t", retry_timeout=0.3)
    w.write_tensor("x", np.zeros(3, np.float32), step=0)  # accepted: the queue has room
    with pytest.raises(CollectorUnavailable) as e:
        w.flush(timeout=30)
    assert "not yet durable: 1 tensor at step 0 ('x')" in str(e.value), str(e.value)
    w.write_tensor("x", np.zeros(3, np.float32), step=1)  # saving goes on
    with pytest.raises(CollectorUnavailable) as e:
        w.close()
    assert "not yet durable: 2 tensors at steps 0-1 ('x')" in str(e.value), str(e.value)


def test_queries_to_a_dead_collector_raise_collector_unavailable():
    from tensorkeep.exceptions import CollectorUnavailable
    from tensorkeep.trials import create_trial

    t = create_trial(f"tensorkeep://127.0.0.1:{_dead_port()}/t")
    with pytest.raises(CollectorUnavailable):
        t.steps()
    t.close()


def test_a_writer_left_open_sends_its_data_at_exit(fake, tmp_path):
    import os
    import subprocess
    import sys

    script = (
        "import numpy as np\n"
        "from tensorkeep import Writer\n"
        f"w = Writer({fake.url('t')!r})\n"
        "for s in range(20):\n"
        "    w.write_tensor('x', np.zeros(1000, np.float32), step=s)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=os.environ, timeout=120)
    assert out.returncode == 0, out.stderr
    assert len(fake.servicer.records) == 20
    assert fake.servicer.closes == [False]


def test_whole_queued_steps_are_coalesced_into_one_message_and_one_end_step(fake, own_agent):
    # A writer that fell behind must not send two messages a step: complete
    # queued steps go as one RecordBatch and one EndStep, with the same outcome
    # (every step committed, every record). The agent is stopped (SIGSTOP)
    # while 50 steps are handed over, so they queue; a timer resumes it after
    # 1 s in any case (a full socket buffer would block the writes).
    agent = own_agent()
    w = Writer(fake.url("t"))
    w.write_tensor("warmup", np.zeros(1, np.float32), step=0)
    w.end_step(0)
    w.flush()
    before_msgs, before_ends = len(fake.servicer.record_messages), len(fake.servicer.end_steps)
    agent.send_signal(signal.SIGSTOP)
    resume = threading.Timer(1.0, agent.send_signal, (signal.SIGCONT,))
    resume.start()
    try:
        for step in range(1, 51):
            for i in range(3):
                w.write_tensor(f"t{i}", np.full(100, step, np.float32), step=step)
            w.end_step(step)
    finally:
        resume.join()
    w.flush()
    record_msgs = fake.servicer.record_messages[before_msgs:]
    ends = fake.servicer.end_steps[before_ends:]
    assert sum(n for _, n in record_msgs) == 150
    # The resumed agent feeds its writer a step (one Batch) at a time, and the
    # writer's sender takes whatever queued while it sent the previous
    # message: measured 5-10 messages for the 50 steps (50 and 50 without
    # coalescing). At most one a two steps:
    assert len(record_msgs) <= 25, f"{len(record_msgs)} record messages for 50 queued steps"
    assert ends[-1] == 50 and len(ends) <= 25, f"{len(ends)} EndStep messages for 50 queued steps"
    for step in range(1, 51):
        assert np.array_equal(arrays_of(fake, "t2")[step], np.full(100, step, np.float32))
    # A step still being written is never sent early.
    w.write_tensor("t0", np.zeros(1, np.float32), step=51)
    w.end_step(51)
    w.write_tensor("t0", np.zeros(1, np.float32), step=52)  # step 52 is not ended
    w.flush()
    assert fake.servicer.end_steps[-1] == 51
    w.close()


def _count_sends(monkeypatch) -> list:
    """From now on, the kind of each message a writer sends to its agent."""
    from tensorkeep import _handover
    sent = []
    real = _handover.AgentStream._send

    def counting(self, message, fd=None):
        sent.append(int.from_bytes(message[:4], "little"))
        return real(self, message, fd)

    monkeypatch.setattr(_handover.AgentStream, "_send", counting)
    return sent


def test_a_step_is_handed_over_to_the_agent_in_one_message(fake, own_agent, monkeypatch):
    # The training process makes one system call a step (one wake-up of the
    # agent), not one a tensor: the step's Writes go as one Batch with its
    # EndStep. Counted on the socket, then checked at the collector.
    from tensorkeep import _handover
    sent = _count_sends(monkeypatch)
    own_agent()
    w = Writer(fake.url("t"))
    vals = {f"t{i}": np.full(1000, i, np.float32) for i in range(9)}
    for step in range(20):
        for name, v in vals.items():
            w.write_tensor(name, v + step, step=step)
        w.end_step(step)
    w.flush()
    assert len(sent) <= 20 + 1 + 1, f"{len(sent)} messages for 20 steps of 9 tensors"  # + a first write + flush
    assert sent.count(_handover._BATCH) >= 19
    for name in ("t0", "t8"):
        got = arrays_of(fake, name)
        assert sorted(got) == list(range(20))
        assert all(np.array_equal(got[s], vals[name] + s) for s in got)
    assert fake.servicer.end_steps[-1] == 19
    w.close()


def _established_to(pid: int, port: int) -> int:
    """ESTABLISHED TCP connections of process ``pid`` to ``port`` (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if fields[3] == "01" and remote_port == port and fields[9] in inodes:
                    n += 1
    return n


def test_the_ranks_of_a_node_share_one_connection(server, trial_name, own_agent):
    # Every writer of a node hands over to the node's agent, whose writers to
    # one collector share one HTTP/2 connection (gRPC's subchannel pool): 8
    # ranks are 8 Push streams, not 8 TCP connections.
    agent = own_agent()
    port = int(server.address.rsplit(":", 1)[1])
    url = f"tensorkeep://{server.address}/{trial_name}"
    writers = [Writer(url, worker=f"worker_{r}", num_workers=8) for r in range(8)]
    try:
        for s in range(3):
            for w in writers:
                w.write_tensor("x", np.full(16, s, np.float32), step=s)
                w.end_step(s)
        for w in writers:
            w.flush()
        assert _established_to(agent.pid, port) == 1
    finally:
        for w in writers:
            w.close()
    trial = create_trial(url)
    assert trial.workers() == [f"worker_{r}" for r in range(8)]
    assert trial.steps() == [0, 1, 2]


def test_an_isolated_write_goes_to_the_agent_at_once(fake, own_agent, monkeypatch):
    # A Writer's write after a quiet spell is not held back for an end_step
    # that may not come soon (the hook, which ends every step it writes in,
    # holds its writes: test_pytorch_hook.py).
    from tensorkeep import _handover
    own_agent()
    w = Writer(fake.url("t"))
    w.write_tensor("warm", np.zeros(4, np.float32), step=0)
    w.end_step(0)
    sent = _count_sends(monkeypatch)
    time.sleep(2 * _handover._BATCH_IDLE_S)
    w.write_tensor("alone", np.full(1000, 7, np.float32), step=1)
    assert sent == [_handover._BATCH], sent  # sent before any end_step, flush or close
    w.write_tensor("next", np.full(1000, 8, np.float32), step=1)
    assert len(sent) == 1, sent  # the next one waits for the step's end
    w.flush()
    assert np.array_equal(arrays_of(fake, "alone")[1], np.full(1000, 7, np.float32))
    w.close()
