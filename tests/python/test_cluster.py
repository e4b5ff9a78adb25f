"""Scaling out against real processes (docs/scaling-out.md): collectors started
with --cluster/--advertise on loopback, trials routed by rendezvous hashing.

- 3 collectors, 30 trials (27 by the Python Writer, 3 by `tensorkeep put`):
  each collector's own listing holds exactly the trials it owns; every trial
  reads back right through the CLI (C++ client library), Python and the rule
  worker; the merged listing holds all 30 with their collector;
- a write sent straight to a collector that does not own the trial is refused
  with WRONG_COLLECTOR naming the owner, in Python and the CLI;
- one collector down: only its trials are unavailable (named in the listing's
  warning and in the read error), the others read on;
- a fourth collector joins (the three restarted with the 4-list): every
  existing trial is still found by walking its ranking and stays where it
  is (a resumed writer appends there), a new trial it owns goes to it, and a
  client still on the old list cannot put such a trial elsewhere;
- deploy/local-cluster.sh starts a cluster, prints TENSORKEEP_SERVERS and
  stops it on SIGINT.
"""

import json
import os
import pathlib
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

from conftest import ServerProcess, release_clients, server_binary
from tensorkeep import Writer, _rendezvous, exceptions
from tensorkeep.trials import create_trial, list_trials

ROOT = pathlib.Path(__file__).resolve().parents[2]
N_TRIALS = 30
CLI_TRIALS = 3  # written by `tensorkeep put`, the rest by the Python Writer


def _bin(name: str) -> str:
    return os.path.join(os.environ.get("TK_BIN_DIR", str(ROOT / "build" / "bin")), name)


def _free_ports(n: int):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _cli(*args, servers=None, check=True, env_servers=None):
    env = dict(os.environ)
    env.pop("TENSORKEEP_SERVER", None)
    env.pop("TENSORKEEP_SERVERS", None)
    if env_servers:
        env["TENSORKEEP_SERVERS"] = env_servers
    argv = [_bin("tensorkeep")]
    for s in servers or ():
        argv += ["--server", s]
    p = subprocess.run(argv + list(args), capture_output=True, text=True, env=env, timeout=60)
    if check:
        assert p.returncode == 0, f"{argv + list(args)}: {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def _values(i: int, step: int):
    return {
        "w": np.arange(4, dtype=np.float32) * (i + 1) + step,
        "same": np.arange(4, dtype=np.float32) + step,
        "zeros": np.zeros(3, dtype=np.float32),
    }


class Cluster:
    def __init__(self, tmp_path, ports):
        self.tmp = tmp_path
        self.addresses = [f"127.0.0.1:{p}" for p in ports]
        self.procs = {}

    def start(self, address, members):
        i = self.addresses.index(address)
        data = self.tmp / f"data-{i}"
        data.mkdir(exist_ok=True)
        s = ServerProcess(str(data), str(self.tmp / f"server-{i}.log"))
        s.start(port=int(address.rsplit(":", 1)[1]),
                extra_args=["--cluster", ",".join(members), "--advertise", address])
        assert s.address == address
        self.procs[address] = s

    def stop(self, address):
        self.procs.pop(address).stop()

    def stop_all(self):
        for a in list(self.procs):
            self.stop(a)


@pytest.fixture
def cluster(tmp_path):
    for name in ("tensorkeep-server", "tensorkeep", "tensorkeep-rules"):
        if not os.access(_bin(name), os.X_OK):
            if "TK_BIN_DIR" in os.environ:
                pytest.fail(f"{name} not found in TK_BIN_DIR")
            pytest.skip(f"{name} not built")
    c = Cluster(tmp_path, _free_ports(4))
    yield c
    release_clients()
    c.stop_all()


def _listing(address):
    """One collector's own trials (the CLI with just that --server)."""
    out = json.loads(_cli("trials", "--json", servers=[address]).stdout)
    return {t["name"] for t in out["trials"]}


def test_trials_spread_over_collectors(cluster, monkeypatch):
    three = cluster.addresses[:3]
    fourth = cluster.addresses[3]
    servers = ",".join(three)
    for a in three:
        cluster.start(a, three)
    monkeypatch.delenv("TENSORKEEP_SERVER", raising=False)
    monkeypatch.setenv("TENSORKEEP_SERVERS", servers)

    trials = [f"cluster-trial-{i:02d}" for i in range(N_TRIALS)]
    owner = {t: _rendezvous.owner(three, t) for t in trials}
    # Half the Python trials stay running (a writer may still join them); the
    # rest end (rules run to the end of a trial).
    running = {t for i, t in enumerate(trials) if i >= CLI_TRIALS and i % 2 == 0}
    assert len(set(owner.values())) == 3, "30 trials over 3 collectors: each owns some"

    # --- 30 trials, each written through the cluster list ---
    for i, t in enumerate(trials):
        if i < CLI_TRIALS:
            # `put` commits the step: one tensor a step (the rules use Python's trials).
            for step in (0, 1):
                npy = cluster.tmp / f"{t}-w-{step}.npy"
                np.save(npy, _values(i, step)["w"])
                _cli("put", t, "w", "--step", str(step), "--file", str(npy), env_servers=servers)
            _cli("end", t, env_servers=servers)
        else:
            w = Writer(t, "worker_0", 1)  # a bare name: TENSORKEEP_SERVERS
            assert w.address.target == owner[t]
            for step in (0, 1):
                for name, v in _values(i, step).items():
                    w.write_tensor(name, v, step)
            w.close(end_of_training=t not in running, timeout=30)

    # --- each collector holds exactly the trials it owns, whole ---
    for a in three:
        assert _listing(a) == {t for t in trials if owner[t] == a}, a

    # --- the merged listing: CLI and Python ---
    merged = json.loads(_cli("trials", "--json", env_servers=servers).stdout)
    assert merged["unavailable"] == []
    assert {(t["name"], t["collector"]) for t in merged["trials"]} == set(owner.items())
    listed = list_trials(servers)
    assert [t.name for t in listed] == sorted(trials) and listed.unavailable == {}
    assert all(t.collector == owner[t.name] and t.ended == (t.name not in running) and t.num_steps == 2
               for t in listed)

    # --- every trial reads back right: Python and the CLI ---
    for i, t in enumerate(trials):
        tr = create_trial(f"tensorkeep://{servers}/{t}")
        assert tr.address.target == owner[t]
        assert tr.steps() == [0, 1]
        for step in (0, 1):
            np.testing.assert_array_equal(tr.tensor("w").value(step), _values(i, step)["w"])
        tr.close()
        got = json.loads(_cli("value", t, "w", "--step", "1", "--json", servers=three).stdout)
        assert got["values"] == _values(i, 1)["w"].tolist(), t

    # --- the rule worker: a trial and another trial on a different collector ---
    ended = [t for t in trials[CLI_TRIALS:] if t not in running]
    a_trial = ended[0]
    other = next(t for t in ended if owner[t] != owner[a_trial])
    rules = [_bin("tensorkeep-rules"), "--server", servers, "--log-level", "warn"]
    p = subprocess.run(rules + ["--trial", a_trial, "--rule", "AllZero", "--param", "tensor_regex=zeros"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    p = subprocess.run(rules + ["--trial", a_trial, "--rule", "SimilarAcrossRuns", "--other-trial", other,
                                "--param", "tensor_regex=same"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    tr = create_trial(a_trial)
    states = {r.rule: r.state for r in tr.rule_statuses()}
    tr.close()
    assert states == {"AllZero": "IssuesFound", "SimilarAcrossRuns": "NoIssuesFound"}

    # --- a write sent to a collector that does not own the trial is refused ---
    new = "cluster-misrouted"
    new_owner = _rendezvous.owner(three, new)
    wrong = next(a for a in three if a != new_owner)
    w = Writer(f"tensorkeep://{wrong}/{new}", "worker_0", 1)
    w.write_tensor("w", np.ones(2, np.float32), 0)
    with pytest.raises(exceptions.WrongCollector) as err:
        w.close(end_of_training=True, timeout=30)
    assert err.value.owner == new_owner and err.value.reason == "WRONG_COLLECTOR"
    assert new_owner in str(err.value) and "TENSORKEEP_SERVERS" in str(err.value)
    npy = cluster.tmp / "one.npy"
    np.save(npy, np.ones(2, np.float32))
    p = _cli("put", new, "w", "--step", "0", "--file", str(npy), servers=[wrong], check=False)
    assert p.returncode == 1 and "WRONG_COLLECTOR" in p.stderr and new_owner in p.stderr, p.stderr
    assert new not in _listing(wrong) and new not in _listing(new_owner)
    # A trial the collector holds stays writable there (a single-address client).
    held = sorted(running)[0]
    w = Writer(f"tensorkeep://{owner[held]}/{held}", "worker_9", 1)
    w.close(end_of_training=False, timeout=30)

    # --- one collector down: only its trials are unavailable ---
    down = three[1]
    cluster.stop(down)
    p = _cli("trials", "--json", env_servers=servers, check=False)
    assert p.returncode == 3 and down in p.stderr, p.stderr
    out = json.loads(p.stdout)
    assert [u["collector"] for u in out["unavailable"]] == [down]
    assert {t["name"] for t in out["trials"]} == {t for t in trials if owner[t] != down}
    listed = list_trials(servers)
    assert set(listed.unavailable) == {down}
    assert {t.name for t in listed} == {t for t in trials if owner[t] != down}
    with pytest.raises(exceptions.CollectorUnavailable):
        list_trials(servers, strict=True)
    # (Each read of the down collector's trials waits ~2 s for it: check two.)
    for i, t in enumerate(trials):
        if owner[t] == down:
            if t not in [x for x in trials if owner[x] == down][:2]:
                continue
            with pytest.raises(exceptions.CollectorUnavailable, match=down):
                create_trial(t)
            p = _cli("steps", t, env_servers=servers, check=False)
            assert p.returncode == 1 and down in p.stderr, p.stderr
        else:
            tr = create_trial(t)
            np.testing.assert_array_equal(tr.tensor("w").value(0), _values(i, 0)["w"])
            tr.close()
    release_clients()

    # --- a fourth collector joins; the three restart with the new list ---
    four = cluster.addresses
    for a in list(cluster.procs):
        cluster.stop(a)
    for a in four:
        cluster.start(a, four)
    servers4 = ",".join(four)
    monkeypatch.setenv("TENSORKEEP_SERVERS", servers4)
    owner4 = {t: _rendezvous.owner(four, t) for t in trials}
    moved = [t for t in trials if owner4[t] != owner[t]]
    assert all(owner4[t] == fourth for t in moved)
    # Existing trials stay where they are and are found by walking the ranking.
    assert _listing(fourth) == set()
    merged = json.loads(_cli("trials", "--json", env_servers=servers4).stdout)
    assert {(t["name"], t["collector"]) for t in merged["trials"]} == set(owner.items())
    for i, t in enumerate(trials):
        tr = create_trial(t)
        assert tr.address.target == owner[t], t
        np.testing.assert_array_equal(tr.tensor("w").value(1), _values(i, 1)["w"])
        tr.close()
        if i % 5 == 0:
            got = json.loads(_cli("value", t, "w", "--step", "0", "--json", env_servers=servers4).stdout)
            assert got["values"] == _values(i, 0)["w"].tolist()
    # A writer resuming a trial the new collector now owns appends where it is.
    moved_running = [t for t in moved if t in running]
    if moved_running:
        t = moved_running[0]
        w = Writer(t, "worker_1", 1)
        assert w.address.target == owner[t]
        w.close(end_of_training=False, timeout=30)
    assert _listing(fourth) == set()
    # A new trial the fourth collector owns goes to it; a client still on the
    # old list cannot put it on its old owner.
    fresh = next(f"cluster-new-{k}" for k in range(1000) if _rendezvous.owner(four, f"cluster-new-{k}") == fourth)
    stale_owner = _rendezvous.owner(three, fresh)
    p = _cli("put", fresh, "w", "--step", "0", "--file", str(npy), env_servers=servers, check=False)
    assert p.returncode == 1 and "WRONG_COLLECTOR" in p.stderr and fourth in p.stderr, p.stderr
    assert fresh not in _listing(stale_owner)
    _cli("put", fresh, "w", "--step", "0", "--file", str(npy), env_servers=servers4)
    assert _listing(fourth) == {fresh}


def test_local_cluster_script(tmp_path):
    if server_binary() is None or not os.access(_bin("tensorkeep"), os.X_OK):
        pytest.skip("tensorkeep-server or tensorkeep not built")
    script = ROOT / "deploy" / "local-cluster.sh"
    p = subprocess.Popen(["bash", str(script), "-n", "2", "--bin", os.path.dirname(_bin("tensorkeep-server"))],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        assert line.startswith("TENSORKEEP_SERVERS="), (line, p.stderr.read() if p.poll() is not None else "")
        servers = line.split("=", 1)[1].split(",")
        assert len(servers) == 2
        health = _cli("health", servers=servers)
        assert health.stdout.count("SERVING") == 2, health.stdout
        # The collectors run with the cluster list: a trial goes to its owner only.
        t = "script-trial"
        wrong = next(s for s in servers if s != _rendezvous.owner(servers, t))
        npy = tmp_path / "v.npy"
        np.save(npy, np.ones(1, np.float32))
        put = _cli("put", t, "v", "--step", "0", "--file", str(npy), servers=[wrong], check=False)
        assert "WRONG_COLLECTOR" in put.stderr, put.stderr
    finally:
        p.send_signal(signal.SIGINT)
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            pytest.fail("local-cluster.sh did not stop within 20 s of SIGINT")
    assert p.returncode == 130
    # Its collectors are gone.
    health = _cli("health", servers=servers, check=False)
    assert health.returncode != 0
