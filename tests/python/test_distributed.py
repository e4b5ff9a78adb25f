"""The PyTorch hook under torch.distributed (issue 13, points 2 and 6), against a
real collector and real processes:

* 4 DDP ranks (gloo on loopback, ddp_rank.py; one set of processes) whose
  first hooks are made before init_process_group, no hook given a rank: 4
  workers worker_0..3, every step holding all 4; the all-reduced gradients
  equal across ranks and equal to the mean of the local gradients recomputed
  here from each rank's batch; local gradients each rank's own; the plain
  model's names; a rule's stop request stopping every rank at the same step,
  run after run (TK_DDP_RUNS, default 5; `TK_DDP_RUNS=30` for the issue's
  figure), alternating include_workers 'all' and 'one'; then one rank
  SIGKILLed mid-training: the trial goes on without it (LOST after the
  collector's --worker-timeout), the later steps complete with the other three;
* one process: an uncaught exception is not a normal finish, SIGTERM sends what
  was written and closes without end of training, a normal end without
  close() is; two processes may not write as one worker.
"""

import os
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from conftest import ServerProcess, release_clients, server_binary  # noqa: E402
from tensorkeep import Writer  # noqa: E402
from tensorkeep.exceptions import Conflict  # noqa: E402
from tensorkeep.trials import StepState, create_trial  # noqa: E402
from tensorkeep.worker_status import WorkerState  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
WORLD = 4
TIMEOUT_S = 2.0  # the collector's --worker-timeout
RUNS = int(os.environ.get("TK_DDP_RUNS", "5"))
PARAMS = ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


@pytest.fixture
def quick_server(tmp_path):
    if server_binary() is None:
        pytest.skip("tensorkeep-server not built")
    data = tmp_path / "data"
    data.mkdir()
    s = ServerProcess(str(data), str(tmp_path / "server.log"), ("--worker-timeout", str(TIMEOUT_S)))
    s.start()
    yield s
    release_clients()
    s.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)  # the ranks get no rank from the environment
    return env


def _spawn(args, tmp_path, name) -> subprocess.Popen:
    log = open(tmp_path / f"{name}.err", "w")
    p = subprocess.Popen(
        [sys.executable, str(HERE / "ddp_rank.py"), *map(str, args)],
        stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=_env(), text=True,
    )
    log.close()
    return p


def _ranks(tmp_path, *args):
    port = _free_port()
    return [_spawn([r, WORLD, port, *args], tmp_path, f"rank{r}") for r in range(WORLD)]


def _stop(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def _err(tmp_path, r) -> str:
    return (tmp_path / f"rank{r}.err").read_text()[-3000:]


class Net(torch.nn.Module):  # ddp_rank.Net
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _local_grads(trial, step: int, rank: int):
    """Rank's gradients at ``step``, recomputed from the saved weights and its batch."""
    net = Net().double()
    with torch.no_grad():
        for p in PARAMS:
            getattr(net, p.split(".")[0]).__getattr__(p.split(".")[1]).copy_(
                torch.from_numpy(trial.tensor("Net_" + p).value(step, worker="worker_0").astype(np.float64))
            )
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(16, 8, generator=g), torch.randn(16, 3, generator=g)
    torch.nn.MSELoss()(net(x.double()), y.double()).backward()
    return {p: dict(net.named_parameters())[p].grad.numpy() for p in PARAMS}


def test_four_ddp_ranks(quick_server, trial_name, tmp_path):
    prefix = quick_server.url(trial_name)
    kill_at = 4
    procs = _ranks(tmp_path, prefix, RUNS, kill_at)
    stopped = {}
    try:
        # 1. A rule's stop request stops every rank at the same step.
        for run in range(RUNS):
            trial = create_trial(f"{prefix}-{run}")
            k = random.randint(3, 8)
            trial.wait_for_steps([k], timeout=60)
            trial.report_rule_status("LossNotDecreasing", "IssuesFound", step=k, message="test", action="stop")
            at = trial.worker_states()["worker_0"].last_step  # about where the ranks were
            for r, p in enumerate(procs):
                line = p.stdout.readline()
                m = re.match(rf"run {run} rank {r} stopped (\d+)$", line.strip())
                assert m, f"rank {r}, run {run}: {line!r}\n{_err(tmp_path, r)}"
                stopped[(run, r)] = (at, int(m.group(1)))
            trial.close()
        # 2. The last rank is killed at step kill_at; the others go on.
        assert procs[-1].wait(60) == -signal.SIGKILL, _err(tmp_path, WORLD - 1)
        lasts = []
        for r, p in enumerate(procs[:-1]):
            out = p.stdout.read()
            m = re.search(r"survived (\d+)", out)
            assert m and p.wait(60) == 0, f"rank {r}: {out!r}\n{_err(tmp_path, r)}"
            lasts.append(int(m.group(1)))
    finally:
        _stop(procs)
    apart = [max(stopped[(run, r)][1] for r in range(WORLD)) - min(stopped[(run, r)][1] for r in range(WORLD))
             for run in range(RUNS)]
    lag = [stopped[(run, 0)][1] - stopped[(run, 0)][0] for run in range(RUNS)]
    print(f"\n{RUNS} runs of {WORLD} ranks: stop steps apart per run {apart}; "
          f"steps from the request to the stop {lag}; 0 crashes")
    assert apart == [0] * RUNS

    # Run 0: every rank saved, all-reduced gradients.
    t0 = create_trial(f"{prefix}-0")
    assert t0.workers() == [f"worker_{r}" for r in range(WORLD)] and t0.num_workers == WORLD
    assert t0.loaded_all_steps
    assert "Net_fc1.weight" in t0.tensor_names() and "gradient/Net_fc2.bias" in t0.tensor_names()
    assert not [n for n in t0.tensor_names() if "DistributedDataParallel" in n or "module." in n]
    last = stopped[(0, 0)][1]
    assert t0.steps() == list(range(last + 1))
    for s in t0.steps():  # a step is complete with all 4
        assert t0.tensor("MSELoss_output_0").workers(s) == t0.workers()
    for s in (0, 1):
        local = [_local_grads(t0, s, r) for r in range(WORLD)]
        for p in PARAMS:
            saved = [t0.tensor("gradient/Net_" + p).value(s, worker=f"worker_{r}") for r in range(WORLD)]
            for r in range(1, WORLD):
                np.testing.assert_array_equal(saved[r], saved[0])  # the same all-reduced gradient
            mean = np.mean([g[p] for g in local], axis=0)
            np.testing.assert_allclose(saved[0], mean, rtol=1e-4, atol=1e-6)
            assert not np.allclose(local[0][p], local[1][p])  # local ones differ: the test can fail
    # Run 1: smdebug's default, only worker_0 saved, its local gradients.
    t1 = create_trial(f"{prefix}-1")
    assert t1.workers() == ["worker_0"] and t1.num_workers == 1
    g1 = _local_grads(t1, 0, 0)
    for p in PARAMS:
        np.testing.assert_allclose(t1.tensor("gradient/Net_" + p).value(0, worker="worker_0"), g1[p], rtol=1e-4, atol=1e-6)

    # The killed rank: LOST after --worker-timeout, the steps after it complete with 3.
    tk = create_trial(f"{prefix}-kill")
    last = max(lasts)
    assert last > kill_at
    if tk.worker_states()["worker_3"].state != WorkerState.LOST:
        # worker_3 neither closed nor lost yet: the last steps wait for it
        assert tk.has_passed_step(last) == StepState.NOT_YET_AVAILABLE
    tk.wait_for_steps([last], timeout=30)
    states = tk.worker_states()
    assert states["worker_3"].state == WorkerState.LOST
    assert [states[f"worker_{r}"].state for r in range(3)] == [WorkerState.CLOSED] * 3
    assert tk.loaded_all_steps  # every worker closed or lost: the trial ended
    loss = tk.tensor("MSELoss_output_0")
    for s in range(kill_at):
        assert loss.workers(s) == [f"worker_{r}" for r in range(WORLD)]
    for s in range(kill_at + 1, last + 1):
        assert loss.workers(s) == ["worker_0", "worker_1", "worker_2"]
    assert tk.steps() == list(range(last + 1))
    for t in (t0, t1, tk):
        t.close()


# ---------------------------------------------------------------------------
# One process: how it ends
# ---------------------------------------------------------------------------
ONE = r"""
import sys, time, torch
import tensorkeep.pytorch as tkp
url, how = sys.argv[1], sys.argv[2]
hook = tkp.Hook(url, save_config=tkp.SaveConfig(save_interval=1))
model, loss_fn = torch.nn.Linear(4, 2), torch.nn.MSELoss()
hook.register_module(model)
hook.register_loss(loss_fn)
for step in range(5):
    loss_fn(model(torch.randn(3, 4)), torch.randn(3, 2)).backward()
if how == "crash":
    hook.flush()
    raise RuntimeError("the training script failed")
if how == "term":
    print("ready", flush=True)
    # A training loop's main thread returns to the interpreter often. (CPython
    # runs a signal handler in the main thread only; when the kernel delivers
    # SIGTERM to one of gRPC's threads, one long time.sleep(60) is not
    # interrupted and the handler waits for it to end.)
    for _ in range(600):
        time.sleep(0.1)
"""


def _one(url: str, how: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", ONE, url, how], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, env=_env(), text=True,
    )


def test_how_the_process_ends_decides_how_its_worker_closes(quick_server, trial_name):
    """An uncaught exception is not a normal finish (the worker becomes LOST, not
    CLOSED); SIGTERM sends what was written and closes without end of training
    (exit status 128 + 15); a normal end without close() is the end of training.
    The three processes run at once."""
    urls = {how: quick_server.url(f"{trial_name}-{how}") for how in ("crash", "term", "end")}
    procs = {how: _one(url, how) for how, url in urls.items()}
    try:
        assert procs["term"].stdout.readline().strip() == "ready"
        procs["term"].send_signal(signal.SIGTERM)
        errs = {how: p.communicate(timeout=60)[1] for how, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    crash = create_trial(urls["crash"])
    assert procs["crash"].returncode == 1 and "the training script failed" in errs["crash"], errs["crash"]
    assert "without end of training" in errs["crash"], errs["crash"]
    st = crash.worker_states()["worker_0"]
    assert st.state in (WorkerState.ACTIVE, WorkerState.LOST) and not st.connected, st

    term = create_trial(urls["term"])
    assert procs["term"].returncode == 128 + signal.SIGTERM, errs["term"]
    # Nothing was flushed by the script: the exit handler sent steps 0-4.
    assert term.steps(show_incomplete_steps=True) == [0, 1, 2, 3, 4]
    st = term.worker_states()["worker_0"]
    assert st.last_step == 4 and st.state != WorkerState.CLOSED, st

    end = create_trial(urls["end"])
    assert procs["end"].returncode == 0, errs["end"]
    assert end.worker_states()["worker_0"].state == WorkerState.CLOSED
    assert end.loaded_all_steps and end.steps() == [0, 1, 2, 3, 4]

    # The crashed worker becomes LOST once --worker-timeout passed (its exit
    # handler may already have committed step 4, so a wait for the step can
    # return before that): poll its state, bounded.
    deadline = time.monotonic() + 30
    while crash.worker_states()["worker_0"].state != WorkerState.LOST and time.monotonic() < deadline:
        time.sleep(0.1)
    assert crash.worker_states()["worker_0"].state == WorkerState.LOST
    assert crash.loaded_all_steps
    for t in (crash, term, end):
        t.close()


def test_two_processes_cannot_write_as_one_worker(quick_server, trial_name):
    url = quick_server.url(trial_name)
    first = Writer(url, worker="worker_0", num_workers=2)
    first.write_tensor("w", np.zeros(2, np.float32), step=0)
    first.flush()
    second = Writer(url, worker="worker_0", num_workers=2)
    second.write_tensor("w", np.ones(2, np.float32), step=0)
    with pytest.raises(Conflict, match="already has a live Push stream"):
        second.flush(timeout=30)
    first.close(end_of_training=False)
    trial = create_trial(url)
    np.testing.assert_array_equal(trial.tensor("w").value(0, worker="worker_0"), np.zeros(2, np.float32))
    trial.close()
