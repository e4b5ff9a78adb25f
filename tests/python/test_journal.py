"""Training never stalls on the collector (issue 13, point 3), against real
processes: the collector is killed while training goes on at one step a
save; each step waits at most max_stall_seconds (plus slack) because the
agent journals what the collector does not take; once the collector is back
on the same data directory and port, the journal is replayed, in order,
without anything lost or duplicated. An agent killed with a non-empty journal
leaves it on disk, and the next agent started on that journal directory
pushes it. (The journal's framing and torn tails: tests/agent/journal_test.cc.)"""

import glob
import os
import signal
import subprocess
import threading
import time

import grpc
import numpy as np
import pytest

from conftest import mounted_tmpfs
from tensorkeep import Writer, _agent, _handover
from tensorkeep._proto import tensorkeep_pb2 as pb
from tensorkeep._proto import tensorkeep_pb2_grpc as pb_grpc
from tensorkeep.exceptions import CollectorUnavailable
from tensorkeep.trials import create_trial

MAX_STALL = 0.4
# Generous: 2 cores shared with other test runs.
SLACK = 2.5


def val(name, step):
    seed = (hash(name) % 1000) * 100_000 + step
    return np.random.default_rng(seed).standard_normal(16 << 10).astype(np.float32)  # 64 KiB


NAMES = ("a", "b")


def train_step(w, step):
    start = time.monotonic()
    for n in NAMES:
        w.write_tensor(n, val(n, step), step=step)
    w.end_step(step)
    return time.monotonic() - start


def wait_until(what, cond, timeout):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.01)


def check_trial(url, steps):
    t = create_trial(url)
    for n in NAMES:
        x = t.tensor(n)
        got = x.steps()
        missing = sorted(set(steps) - set(got))
        assert not missing, f"{n}: steps {missing[:20]} missing"
        assert len(got) == len(set(got)), f"{n}: a step twice"
        vs = x.values()
        wrong = [s for s in steps if not np.array_equal(vs[s], val(n, s))]
        assert not wrong, f"{n}: values differ at steps {wrong[:10]}"
    return t


def test_collector_outage_bounded_stall_and_journal_replayed(server, trial_url):
    # A small queue (512 KiB ring + 512 KiB agent buffer: 4 steps each), so the
    # outage fills it within a few steps.
    w = Writer(trial_url, max_queue_bytes=1 << 20, max_stall_seconds=MAX_STALL, retry_timeout=60)
    up = [train_step(w, s) for s in range(20)]
    wait_until("the first steps committed", lambda: w.committed_through >= 19, 20)
    assert w.journaled_bytes == 0 and not w.journaling

    server.kill()
    down = []
    step = 20
    # Train through the outage: at least 40 steps and until the agent journals.
    while step < 60 or w.journaled_bytes == 0:
        assert step < 400, "the agent never journaled during the outage"
        down.append(train_step(w, step))
        step += 1
        time.sleep(0.01)  # the step's compute
    assert w.journaling, "the collector is down: what was journaled cannot have been replayed"
    journaled_during_outage = w.journaled_bytes
    assert journaled_during_outage > 0

    server.start(port=server.port)
    after = []
    for _ in range(20):
        after.append(train_step(w, step))
        step += 1
    # Replayed without a flush: the agent hands the journal over once the
    # writer reconnected, then pushes directly again.
    wait_until("the journal replayed", lambda: not w.journaling, 30)
    w.close(end_of_training=True)

    worst = max(down + after)
    print(
        f"max step stall: {max(up) * 1e3:.1f} ms collector up, {max(down) * 1e3:.1f} ms during the "
        f"outage, {max(after) * 1e3:.1f} ms after it (max_stall_seconds={MAX_STALL}); "
        f"{journaled_during_outage >> 10} KiB journaled"
    )
    assert worst < MAX_STALL + SLACK, f"a step blocked {worst:.2f} s (bound {MAX_STALL} s + {SLACK} s slack)"
    assert w.dropped_records == 0
    check_trial(trial_url, list(range(step)))


def _start_agent(sock, journal_dir, log, *args):
    binary = os.environ.get(_agent.BINARY_ENV)
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip(f"tensorkeep-agent not built ({binary})")
    p = subprocess.Popen(
        [binary, "--socket", sock, "--journal-dir", journal_dir, "--idle-exit-seconds", "0", *args],
        stdout=subprocess.PIPE,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    line = p.stdout.readline().decode()
    assert line.startswith("listening on"), line
    return p


class OwnAgent:
    """Agents of the test's own, one after another on one socket and journal
    directory under tmp_path, never exiting idle (the test stops them)."""

    def __init__(self, tmp_path, monkeypatch):
        self.sock = str(tmp_path / "agent" / "a.sock")
        os.makedirs(os.path.dirname(self.sock), mode=0o700)
        self.journal_dir = str(tmp_path / "journal")
        monkeypatch.setenv(_agent.SOCKET_ENV, self.sock)
        self.log = open(tmp_path / "agent.log", "ab")
        self.procs = []

    def start(self, *args: str) -> subprocess.Popen:
        """Starts an agent; ``args`` are more flags (a later --idle-exit-seconds wins)."""
        self.procs.append(_start_agent(self.sock, self.journal_dir, self.log, *args))
        return self.procs[-1]

    def logged(self, text: bytes) -> bool:
        return self.log_count(text) > 0

    def log_count(self, text: bytes) -> int:
        self.log.flush()
        with open(self.log.name, "rb") as f:
            return f.read().count(text)

    def files(self, pattern: str = "*.tkj"):
        return glob.glob(os.path.join(self.journal_dir, pattern))

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.log.close()


@pytest.fixture
def own_agent(tmp_path, monkeypatch):
    agents = OwnAgent(tmp_path, monkeypatch)
    agents.start()
    yield agents
    agents.stop()


def _leave_a_journal(w, server, own_agent):
    """Steps 0-4 durable, then the collector killed and steps journaled until
    the agent is SIGKILLed: returns (first journaled step, next step, the
    leftover journal's path)."""
    for s in range(5):
        train_step(w, s)
    w.flush()
    server.kill()
    step = 5
    while w.journaled_bytes == 0:
        assert step < 300, "the agent never journaled"
        train_step(w, step)
        step += 1
    first_journaled = step  # every step from here on is in the journal
    for _ in range(10):
        train_step(w, step)
        step += 1
    w._stream._request(_handover._SYNC, 0, 10)  # the agent took (and synced) all of it
    assert w.journaling
    own_agent.procs[-1].send_signal(signal.SIGKILL)
    own_agent.procs[-1].wait(10)
    left = own_agent.files()
    assert len(left) == 1 and os.path.getsize(left[0]) > 20 * (64 << 10), left
    return first_journaled, step, left[0]


def test_agent_killed_with_a_journal_the_next_agent_pushes_it(server, trial_url, own_agent):
    w = Writer(trial_url, max_queue_bytes=1 << 20, max_stall_seconds=0.2, retry_timeout=60)
    first_journaled, step, _ = _leave_a_journal(w, server, own_agent)

    server.start(port=server.port)
    own_agent.start()
    wait_until("the leftover journal pushed", lambda: not own_agent.files(), 30)
    assert not own_agent.files("*.failed")
    # The acknowledged steps and every journaled one; what the killed agent
    # held only in memory (its push buffer, before it journaled) is the
    # documented loss of killing an agent during an outage.
    check_trial(trial_url, list(range(5)) + list(range(first_journaled, step)))


def test_an_agent_replaying_a_journal_to_a_collector_still_away_stops_at_once_and_keeps_it(
    server, trial_url, own_agent
):
    """The replay waits for its collector in slices: SIGTERM ends the agent in
    about half a second (it waited up to the writer's 300 s give-up time), and
    the journal, kept whole, is pushed by the next agent."""
    w = Writer(trial_url, max_queue_bytes=1 << 20, max_stall_seconds=0.2, retry_timeout=60)
    first_journaled, step, left = _leave_a_journal(w, server, own_agent)
    size = os.path.getsize(left)

    replaying = own_agent.start()  # the collector is still down
    wait_until(
        "the agent replaying the leftover journal",
        lambda: b"leftover journal" in open(own_agent.log.name, "rb").read(),
        10,
    )
    time.sleep(1.0)  # its writer trying to connect
    t = time.monotonic()
    replaying.terminate()
    try:
        replaying.wait(20)
    except subprocess.TimeoutExpired:
        pytest.fail("the agent did not stop within 20 s of SIGTERM while replaying a journal")
    took = time.monotonic() - t
    assert took < 5, f"the agent took {took:.1f} s to stop"
    assert own_agent.files() == [left] and os.path.getsize(left) == size
    assert not own_agent.files("*.failed")
    assert b"kept for the next agent" in open(own_agent.log.name, "rb").read()

    server.start(port=server.port)
    own_agent.start()
    wait_until("the leftover journal pushed", lambda: not own_agent.files(), 30)
    check_trial(trial_url, list(range(5)) + list(range(first_journaled, step)))


def test_a_leftover_waits_for_its_collector_while_the_agent_runs_and_no_longer_holds_it(
    server, trial_url, own_agent
):
    """A replay waits for a collector that is away for as long as the agent
    runs (it used to give up after the writer's 300 s and wait for the next
    agent's start): after --leftover-hold-seconds it stops keeping the agent
    from exiting idle, and the collector coming back later gets the journal
    from the agent that is still running."""
    w = Writer(trial_url, max_queue_bytes=1 << 20, max_stall_seconds=0.2, retry_timeout=60)
    first_journaled, step, left = _leave_a_journal(w, server, own_agent)
    size = os.path.getsize(left)

    # An agent that would exit after 1 s idle, but for the replay it holds 1 s.
    idle = own_agent.start("--leftover-hold-seconds", "1", "--idle-exit-seconds", "1")
    released = b"waiting on for it while the agent runs"
    wait_until("the replay releasing the agent", lambda: own_agent.logged(released), 20)
    try:
        idle.wait(20)
    except subprocess.TimeoutExpired:
        pytest.fail("an idle agent whose only work is a replay waiting for its collector did not exit")
    assert own_agent.files() == [left] and os.path.getsize(left) == size, "the journal was not kept whole"

    # An agent that keeps running (a training process would keep it): the
    # replay is released, and still pushes once the collector is back.
    own_agent.start("--leftover-hold-seconds", "1")
    wait_until("the replay releasing the second agent", lambda: own_agent.log_count(released) >= 2, 20)
    time.sleep(1.0)
    assert own_agent.files() == [left]
    server.start(port=server.port)
    wait_until("the leftover journal pushed by the running agent", lambda: not own_agent.files(), 30)
    assert not own_agent.files("*.failed")
    check_trial(trial_url, list(range(5)) + list(range(first_journaled, step)))


def test_a_leftover_the_collector_refuses_for_now_is_tried_again_while_the_agent_runs(
    server, trial_url, own_agent
):
    """A collector at its --max-push-streams limit refuses the replay's stream
    (RESOURCE_EXHAUSTED: a limit, not the data): the journal is kept and tried
    again --leftover-retry-seconds later by the same agent, which then pushes
    it (it used to wait for the next agent's start)."""
    w = Writer(trial_url, max_queue_bytes=1 << 20, max_stall_seconds=0.2, retry_timeout=60)
    first_journaled, step, _ = _leave_a_journal(w, server, own_agent)

    server.start(port=server.port, extra_args=["--max-push-streams", "1"])
    # Another writer holds the collector's only Push stream.
    release = threading.Event()
    opened = threading.Event()

    def requests():
        yield pb.PushRequest(seq=1, open=pb.Open(trial=trial_url.rsplit("/", 1)[1] + "-other", worker="worker_0", num_workers=1))
        yield pb.PushRequest(seq=2, flush=pb.Flush())
        release.wait(60)
        yield pb.PushRequest(seq=3, close=pb.Close(end_of_training=True))

    def hold():
        with grpc.insecure_channel(server.address) as ch:
            for _ in pb_grpc.TensorKeepStub(ch).Push(requests(), timeout=90):
                opened.set()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    try:
        assert opened.wait(20), "the other writer's stream was not acknowledged"
        own_agent.start("--leftover-retry-seconds", "1")
        wait_until(
            "the replay refused and kept",
            lambda: own_agent.logged(b"kept, to be tried again"),
            30,
        )
        assert own_agent.files() and not own_agent.files("*.failed")
    finally:
        release.set()
        holder.join(30)
    wait_until("the leftover journal pushed on a later try", lambda: not own_agent.files(), 30)
    assert not own_agent.files("*.failed")
    check_trial(trial_url, list(range(5)) + list(range(first_journaled, step)))


def test_collector_down_when_training_starts_the_first_step_is_bounded(server, trial_url):
    # The agent opens its writer in the background: a collector that is down
    # when training starts costs the first steps max_stall_seconds, as an
    # outage later does, not the writer's whole connect timeout.
    server.kill()
    w = Writer(trial_url, max_queue_bytes=1 << 20, max_stall_seconds=MAX_STALL, retry_timeout=60)
    steps = [train_step(w, s) for s in range(30)]
    assert w.journaling and w.journaled_bytes > 0, "the collector is down: the agent must journal"
    server.start(port=server.port)
    for s in range(30, 40):
        steps.append(train_step(w, s))
    w.close(end_of_training=True)
    print(f"collector down at start: longest step {max(steps) * 1e3:.0f} ms (max_stall_seconds={MAX_STALL})")
    assert max(steps) < MAX_STALL + SLACK, f"a step blocked {max(steps):.2f} s"
    assert w.dropped_records == 0
    check_trial(trial_url, list(range(40)))


def _worker_closed(url) -> bool:
    try:
        return create_trial(url).worker_states()["worker_0"].state.name == "CLOSED"
    except CollectorUnavailable:  # the restarted collector not reached yet
        return False


def test_closed_during_an_outage_the_agent_pushes_it_after_the_process_is_gone(server, trial_url, own_agent):
    w = Writer(trial_url, max_queue_bytes=1 << 20, max_stall_seconds=0.2, retry_timeout=1)
    for s in range(5):
        train_step(w, s)
    w.flush()
    server.kill()
    for s in range(5, 30):  # some in the agent's memory, the rest journaled
        train_step(w, s)
    assert w.journaling
    start = time.monotonic()
    with pytest.raises(CollectorUnavailable) as e:
        w.close(end_of_training=True)
    assert time.monotonic() - start < 1 + SLACK
    assert "not yet durable" in str(e.value) and "keeps it" in str(e.value), str(e.value)
    # The training process is done; the agent goes on alone.
    server.start(port=server.port)
    wait_until("the orphan's data pushed and its worker closed", lambda: _worker_closed(trial_url), 60)
    assert not own_agent.files(), "a journal left behind"
    check_trial(trial_url, list(range(30)))


def test_an_agent_stopped_during_an_outage_journals_what_it_held_in_memory(server, trial_url, own_agent):
    # max_stall 5 s: nothing is journaled, all of it waits in the agent's
    # memory when the process closes.
    w = Writer(trial_url, retry_timeout=1)
    for s in range(3):
        train_step(w, s)
    w.flush()
    server.kill()
    for s in range(3, 12):
        train_step(w, s)
    with pytest.raises(CollectorUnavailable):
        w.close(end_of_training=True)
    assert w.journaled_bytes == 0
    own_agent.procs[0].send_signal(signal.SIGTERM)
    own_agent.procs[0].wait(30)
    left = own_agent.files()
    assert len(left) == 1 and os.path.getsize(left[0]) > 9 * len(NAMES) * (64 << 10), left
    server.start(port=server.port)
    own_agent.start()
    wait_until("the journal pushed", lambda: not own_agent.files(), 30)
    assert not own_agent.files("*.failed")
    wait_until("the worker closed as journaled", lambda: _worker_closed(trial_url), 30)
    check_trial(trial_url, list(range(12)))


@pytest.fixture
def agent_on_a_small_disk(tmp_path, monkeypatch):
    """An agent of the test's own whose journal directory is a 1 MiB tmpfs
    (skipped, with the reason, where the test may not mount one)."""
    with mounted_tmpfs(tmp_path / "jdisk", "1m", "this test") as mnt:
        agents = OwnAgent(tmp_path, monkeypatch)
        agents.journal_dir = str(mnt / "journal")
        try:
            agents.start()
            yield agents
        finally:
            agents.stop()


def test_a_journal_disk_that_fills_during_an_outage_drops_what_it_cannot_take_and_says_so(
    server, trial_url, agent_on_a_small_disk, caplog
):
    """The collector away and the journal's disk full (ENOSPC, not the
    agent's own --journal-max-mb): records are dropped, counted and logged on
    both sides, no step waits longer than max_stall_seconds, and once the
    collector is back everything that was not dropped is there, whole: the
    stored records plus the dropped ones are exactly what was written."""
    w = Writer(trial_url, max_queue_bytes=1 << 20, max_stall_seconds=MAX_STALL, retry_timeout=60)
    for s in range(5):
        train_step(w, s)
    w.flush()
    server.kill()
    step, worst = 5, 0.0
    while w.dropped_records == 0:
        assert step < 200, f"nothing was dropped after {step} steps of 128 KiB on a 1 MiB journal disk"
        worst = max(worst, train_step(w, step))
        step += 1
    for _ in range(5):  # on after the disk filled
        worst = max(worst, train_step(w, step))
        step += 1
    assert worst < MAX_STALL + SLACK, f"a step blocked {worst:.2f} s"
    w._stream._request(_handover._SYNC, 0, 60)  # the agent took (journaled or dropped) all of it
    dropped = w.dropped_records
    assert any("DROPPED" in r.getMessage() for r in caplog.records if r.levelname == "ERROR")
    log = open(agent_on_a_small_disk.log.name, "rb").read()
    assert b"DROPPED" in log and b"No space left on device" in log  # the disk, not --journal-max-mb

    server.start(port=server.port)
    w.flush(timeout=60)
    w.close()
    t = create_trial(trial_url)
    stored = 0
    for n in NAMES:
        values = t.tensor(n).values()
        stored += len(values)
        wrong = [s for s, v in values.items() if not np.array_equal(v, val(n, s))]
        assert not wrong, f"{n}: values differ at steps {wrong[:10]}"
        assert set(range(5)) <= set(values), f"{n}: a step acknowledged before the outage is missing"
    assert stored + w.dropped_records == len(NAMES) * step, (stored, w.dropped_records, step)
    assert w.dropped_records == dropped  # nothing more dropped once the collector was back
    assert not agent_on_a_small_disk.files()  # the journal replayed and deleted
