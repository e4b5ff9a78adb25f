"""A job restarted by torchrun --max_restarts continues its trial as a new
attempt (issue 13 point 2, docs/semantics.md "Restarted jobs"), against a real
collector and a real torchrun: 2 gloo ranks; in the first attempt rank 1 fails
at step 5, torchrun restarts both ranks, and the second attempt trains every
step again. The trial must then hold both workers at attempt 1 with their
restart recorded, every step's values from the second attempt (the rewritten
steps replaced the first attempt's; nothing refused as CONFLICT), every step
complete, and the trial ended normally.
"""

import os
import pathlib
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from conftest import server_binary  # noqa: E402
from tensorkeep.trials import create_trial  # noqa: E402
from tensorkeep.worker_status import WorkerState  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
STEPS = 8  # torchrun_job.STEPS


def _host_name_resolves() -> bool:
    """torchrun --standalone gives its ranks this host's name as MASTER_ADDR
    (torch 1.13: socket.getfqdn()); a minimal container may not resolve it."""
    try:
        return bool(socket.getaddrinfo(socket.getfqdn(socket.gethostname()), None))
    except OSError:
        return False


def test_a_torchrun_restart_continues_the_trial_as_a_new_attempt(server, trial_name, tmp_path):
    if not _host_name_resolves():
        pytest.skip(
            f"this host's name {socket.getfqdn(socket.gethostname())!r} does not resolve (not in "
            "/etc/hosts?): torchrun --standalone's ranks could not reach their rendezvous"
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TENSORKEEP_ATTEMPT"):
        env.pop(k, None)
    url = f"tensorkeep://{server.address}/{trial_name}"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
        "--nproc_per_node=2", "--max_restarts=1", "--monitor_interval=0.2",
        # torch 1.13's torchrun under Python 3.11 (Debian 12) fails at start
        # with the default redirects of 0 (its Std flag lookup misses 0):
        # redirect stdout to its logs and tee it back.
        "--redirects=1", "--tee=1",
        str(HERE / "torchrun_job.py"), url,
    ]
    try:
        p = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=150)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"torchrun did not finish in 150 s: {(e.stderr or '')[-3000:]}")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "injected failure of rank 1" in out, "the first attempt did not fail as planned:\n" + out[-3000:]
    assert "attempt 1 rank 0 done" in out and "attempt 1 rank 1 done" in out, out[-3000:]
    assert "CONFLICT" not in out and "Conflict" not in out, out[-4000:]

    trial = create_trial(url)
    states = trial.worker_states()
    assert sorted(states) == ["worker_0", "worker_1"]
    for name, s in states.items():
        assert s.state == WorkerState.CLOSED, (name, s)
        assert s.attempt == 1, (name, s)
        assert [r.attempt for r in s.restarts] == [1], (name, s)
        assert s.restarts[0].started > 0
        assert s.committed_through == STEPS - 1, (name, s)
    # Rank 1 sent its steps 0-4 before failing: its first attempt committed
    # at least through step 3 (step 4 is committed by its flush or close).
    assert states["worker_1"].restarts[0].previous_committed_through >= 3, states["worker_1"]
    assert trial.steps() == list(range(STEPS))
    assert trial.has_passed_step(STEPS - 1).name == "AVAILABLE"
    marker = trial.tensor("scalar/marker")
    for worker in ("worker_0", "worker_1"):
        for step in range(STEPS):
            assert float(marker.value(step, worker=worker)) == 1000.0 + step, (worker, step)

    # The CLI shows the attempt and a line a restart.
    cli = os.path.join(os.path.dirname(server_binary()), "tensorkeep")
    shown = subprocess.run(
        [cli, "--server", server.address, "workers", trial_name], capture_output=True, text=True, timeout=30
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split()[:6] == ["WORKER", "STATE", "LAST", "COMMITTED", "ATTEMPT", "CON"], lines
    rows = {line.split()[0]: line.split() for line in lines[1:3]}
    assert {w: (r[1], r[4]) for w, r in rows.items()} == {"worker_0": ("CLOSED", "1"), "worker_1": ("CLOSED", "1")}
    assert sum("restarted: attempt 1 at" in line for line in lines) == 2, shown.stdout
