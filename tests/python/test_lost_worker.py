"""A dead rank does not stall a trial (issue 13): a worker process killed with
SIGKILL is LOST after the collector's --worker-timeout, wait_for_steps and the
rule worker go on without it, it is ACTIVE again when it comes back; an
operator can declare a worker lost at once; writers must agree on num_workers.
"""

import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ServerProcess, release_clients, server_binary
from tensorkeep import Writer
from tensorkeep.exceptions import Conflict, InvalidWorker
from tensorkeep.trials import StepState, create_trial
from tensorkeep.worker_status import WorkerState

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMEOUT_S = 1.5  # the collector's --worker-timeout in these tests

# A worker process: writes steps FIRST..LAST of tensor "w", flushes, prints
# "flushed", then holds its stream open (until killed) or closes with
# end-of-training ("eot").
WORKER = r"""
import sys, time
import numpy as np
from tensorkeep import Writer
url, worker, first, last, then = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
w = Writer(url, worker=worker, num_workers=2)
for s in range(first, last + 1):
    w.write_tensor("w", np.full(2, s, np.float32), step=s)
    w.end_step(s)
w.flush()
print("flushed", flush=True)
if then == "eot":
    w.close(end_of_training=True)
else:
    time.sleep(600)
"""


def _bin(name: str) -> pathlib.Path:
    return pathlib.Path(os.environ.get("TK_BIN_DIR", str(ROOT / "build" / "bin"))) / name


def start_worker(url: str, worker: str, first: int, last: int, then: str = "hold") -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    p = subprocess.Popen(
        [sys.executable, "-c", WORKER, url, worker, str(first), str(last), then],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    line = p.stdout.readline()
    assert line.startswith("flushed"), f"worker {worker} failed: {line!r}"
    return p


def commit(w: Writer, first: int, last: int) -> None:
    for s in range(first, last + 1):
        w.write_tensor("w", np.full(2, s, np.float32), step=s)
        w.end_step(s)
    w.flush()


@pytest.fixture
def quick_server(tmp_path):
    """A collector whose workers are lost TIMEOUT_S after their stream ended."""
    if server_binary() is None:
        pytest.skip("tensorkeep-server not built")
    data = tmp_path / "data"
    data.mkdir()
    s = ServerProcess(str(data), str(tmp_path / "server.log"), ("--worker-timeout", str(TIMEOUT_S)))
    s.start()
    yield s
    release_clients()
    s.stop()


def test_killed_rank_is_lost_and_the_trial_and_rule_worker_go_on(quick_server, trial_name, tmp_path):
    url = quick_server.url(trial_name)
    rules_bin = _bin("tensorkeep-rules")
    if not os.access(rules_bin, os.X_OK):
        pytest.fail(f"tensorkeep-rules not built ({rules_bin})")
    rank1 = start_worker(url, "worker_1", 0, 2)
    rules_log = open(tmp_path / "rules.log", "w")
    rules = subprocess.Popen(
        [str(rules_bin), "--server", quick_server.address, "--trial", trial_name, "--rule", "ExplodingTensor",
         "--param", "tensor_regex=w"],
        stdout=rules_log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        rank0 = Writer(url, worker="worker_0", num_workers=2)
        commit(rank0, 0, 5)
        trial = create_trial(url)
        assert trial.has_passed_step(2) == StepState.AVAILABLE
        assert trial.has_passed_step(3) == StepState.NOT_YET_AVAILABLE
        assert trial.worker_states()["worker_1"].state == WorkerState.ACTIVE

        rank1.send_signal(signal.SIGKILL)
        rank1.wait()
        killed = time.monotonic()
        trial.wait_for_steps([3, 4, 5], timeout=30)  # woken when worker_1 is lost
        assert time.monotonic() - killed >= TIMEOUT_S * 0.6
        states = trial.worker_states()
        assert states["worker_1"].state == WorkerState.LOST
        assert states["worker_1"].last_step == 2 and not states["worker_1"].connected
        assert "worker-timeout" in states["worker_1"].reason
        assert states["worker_0"].state == WorkerState.ACTIVE
        assert trial.steps() == [0, 1, 2, 3, 4, 5]

        # The rank is relaunched and finishes; so does rank 0: the trial ends.
        back = start_worker(url, "worker_1", 6, 7, "eot")
        assert back.wait(30) == 0
        assert trial.worker_states()["worker_1"].state == WorkerState.CLOSED
        commit(rank0, 6, 7)
        rank0.close(end_of_training=True)
        assert trial.loaded_all_steps
        assert trial.steps() == list(range(8))
        assert rules.wait(30) == 0  # the rule worker evaluated every step and ended
    finally:
        for p in (rank1, rules):
            if p.poll() is None:
                p.kill()
                p.wait()
        rules_log.close()
    log = (tmp_path / "rules.log").read_text()
    assert "worker_1" in log and "is LOST" in log, log
    assert "is back" in log, log


def test_declare_worker_lost_acts_at_once(server, trial_url):
    rank0 = Writer(trial_url, worker="worker_0", num_workers=2)
    rank1 = Writer(trial_url, worker="worker_1", num_workers=2)
    commit(rank1, 0, 0)
    commit(rank0, 0, 3)
    rank1.close(end_of_training=False)  # gone; the default timeout is 60 s
    trial = create_trial(trial_url)
    assert trial.has_passed_step(3) == StepState.NOT_YET_AVAILABLE
    status = trial.declare_worker_lost("worker_1")
    assert status.state == WorkerState.LOST and status.last_step == 0
    trial.wait_for_steps([3], timeout=10)
    with pytest.raises(InvalidWorker):
        trial.declare_worker_lost("worker_7")
    rank0.close(end_of_training=True)
    assert trial.loaded_all_steps  # CLOSED + LOST: the trial ended


def test_writers_must_agree_on_num_workers(server, trial_url):
    rank0 = Writer(trial_url, worker="worker_0", num_workers=2)
    commit(rank0, 0, 0)
    other = Writer(trial_url, worker="worker_1", num_workers=4)
    with pytest.raises(Conflict) as e:
        commit(other, 0, 0)
    assert "num_workers 4" in str(e.value) and "num_workers 2" in str(e.value)
    assert create_trial(trial_url).workers() == ["worker_0"]
    rank0.close(end_of_training=True)
