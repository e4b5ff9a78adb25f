"""`tensorkeep rebalance` against real processes (docs/scaling-out.md, "Adding a
collector"): 3 collectors with trials, a fourth joins (all restarted with the
4-list), and the finished trials the fourth now owns move to it.

- before: the trials it owns are still on their old holders (found by walking
  the ranking); --dry-run lists exactly the ended ones, and the live one as
  skipped;
- interrupted after the copy (before publishing): the original is untouched
  and still read from its holder, the half copy is invisible (not listed,
  not readable) on the owner, also after the owner restarts;
- interrupted after publishing (before deleting the original): both hold
  equal trials, clients read the owner's;
- a full run: each moved trial is on its owner with every value, mode,
  worker, worker state, collection, saved reduction and rule status identical
  to what was read before the first run, gone from its old holder, found by
  every client (Python, CLI); live trials and trials already on their owner
  untouched; a second run has nothing to move;
- the owner holding a different trial of the name: verification fails, exit
  1, both trials stay as they were.
"""

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import release_clients
from test_cluster import Cluster, _bin, _cli, _free_ports
from tensorkeep import Writer, _collection_wire, _rendezvous, exceptions
from tensorkeep.core.collection import Collection
from tensorkeep.core.save_config import SaveConfig
from tensorkeep.modes import ModeKeys
from tensorkeep.trials import create_trial

BIG = 100_000  # float32 elements: a value in the value log, not in its record block


@pytest.fixture
def cluster(tmp_path):
    for name in ("tensorkeep-server", "tensorkeep"):
        if not os.access(_bin(name), os.X_OK):
            if "TK_BIN_DIR" in os.environ:
                pytest.fail(f"{name} not found in TK_BIN_DIR")
            pytest.skip(f"{name} not built")
    c = Cluster(tmp_path, _free_ports(4))
    yield c
    release_clients()
    c.stop_all()


def _names(three, four):
    """Trial names: 3 ended and 1 live that the fourth collector will own, 2
    ended and 1 live that stay with their owner."""
    fourth = four[3]
    moving, staying = [], []
    for k in range(10_000):
        t = f"rb-{k}"
        (moving if _rendezvous.owner(four, t) == fourth else staying).append(t)
        if len(moving) >= 4 and len(staying) >= 3:
            break
    return moving[:3], moving[3], staying[:2], staying[2]


def _write(t, i, servers, *, rich, end):
    """Two workers, TRAIN then EVAL steps, a large value, a reductions-only
    tensor, a collection; worker_1 ends LOST (declared), a rule status with
    a stop."""
    rng = np.random.default_rng(i)
    w0 = Writer(f"tensorkeep://{servers}/{t}", "worker_0", 2)
    w1 = Writer(f"tensorkeep://{servers}/{t}", "worker_1", 2)
    for step in range(5):
        mode, mode_step = (ModeKeys.TRAIN, step) if step < 3 else (ModeKeys.EVAL, step - 3)
        for wi, w in enumerate((w0, w1)):
            w.write_tensor("w", rng.standard_normal(8).astype(np.float32) + wi, step, mode, mode_step,
                           collections=["weights"])
            w.write_tensor("i", np.arange(3, dtype=np.int64) * step + wi, step, mode, mode_step)
            if rich:
                w.write_tensor("red", None, step, mode, mode_step,
                               reductions={("max", False): float(step + wi), ("l2", True): 0.5 * step})
        if rich and step == 2:
            w0.write_tensor("big", rng.standard_normal(BIG).astype(np.float32), step, mode, mode_step)
    if rich:  # stored collection configurations: one matching "w", one empty
        for worker in ("worker_0", "worker_1"):
            assert _collection_wire.put_collections(f"tensorkeep://{servers}/{t}", worker, [
                Collection("by_regex", include_regex=["^w$"], save_config=SaveConfig(save_interval=3)),
                Collection("configured_empty", include_regex=["^nothing_matches$"]),
            ])
    w1.close(end_of_training=False, timeout=30)
    tr = create_trial(f"tensorkeep://{servers}/{t}")
    if rich:
        assert "configured_empty" in tr.collections()
        tr.report_rule_status("MyRule", "IssuesFound", step=3, message="found it", action="stop",
                              last_evaluated_step=4)
    if end:
        tr.declare_worker_lost("worker_1")
        w0.close(end_of_training=True, timeout=30)
    else:
        w0.flush(timeout=30)
        w0.close(end_of_training=False, timeout=30)
    tr.close()


def _snapshot(t, servers):
    """Everything a reader sees of the trial, and where it was found."""
    tr = create_trial(f"tensorkeep://{servers}/{t}")
    steps = tr.steps(show_incomplete_steps=True)
    snap = {
        "steps": steps,
        "modes": {s: (str(tr.mode(s)), tr.mode_step(s)) for s in steps},
        "collections": {k: (sorted(c.tensor_names), list(c.include_regex)) for k, c in tr.collections().items()},
        "workers": {w: (s.state.name, s.last_step, s.committed_through)
                    for w, s in tr.worker_states().items()},
        "rules": [(r.rule, r.state, r.step, r.message, r.action, r.last_evaluated_step)
                  for r in tr.rule_statuses()],
        "values": {},
    }
    for s in steps:
        for name in tr.tensor_names(step=s):
            ten = tr.tensor(name)
            for w in ten.workers(s):
                try:
                    v = ten.value(s, worker=w)
                    got = (str(v.dtype), v.shape, v.tobytes())
                except exceptions.TensorUnavailableForStep:
                    got = None
                red = (ten.reduction_value(s, "max", worker=w), ten.reduction_value(s, "l2", abs=True, worker=w)) \
                    if name == "red" else None
                snap["values"][(s, name, w)] = (got, red)
    address = tr.address.target
    tr.close()
    return address, snap


def _listing(address):
    out = json.loads(_cli("trials", "--json", servers=[address]).stdout)
    return {t["name"] for t in out["trials"]}


def _rebalance(servers, *extra, crash_at=None, check=True):
    env = dict(os.environ)
    env.pop("TENSORKEEP_SERVER", None)
    env["TENSORKEEP_SERVERS"] = servers
    if crash_at:
        env["TENSORKEEP_REBALANCE_CRASH_AT"] = crash_at
    p = subprocess.run([_bin("tensorkeep"), "rebalance", *extra], capture_output=True, text=True,
                       env=env, timeout=120)
    if check:
        assert p.returncode == 0, f"{p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def test_rebalance_moves_finished_trials_to_their_owner(cluster, monkeypatch):
    three, four = cluster.addresses[:3], cluster.addresses
    fourth = four[3]
    monkeypatch.delenv("TENSORKEEP_SERVER", raising=False)
    monkeypatch.delenv("TENSORKEEP_SERVERS", raising=False)
    s3, s4 = ",".join(three), ",".join(four)
    for a in three:
        cluster.start(a, three)
    moving, moving_live, staying, staying_live = _names(three, four)
    for i, t in enumerate(moving + staying):
        _write(t, i, s3, rich=(i == 0), end=True)
    for i, t in enumerate((moving_live, staying_live)):
        _write(t, 100 + i, s3, rich=False, end=False)
    holder = {t: _rendezvous.owner(three, t) for t in moving + staying + [moving_live, staying_live]}
    before = {t: _snapshot(t, s3) for t in holder}
    assert all(before[t][0] == holder[t] for t in holder)
    assert before[moving[0]][1]["workers"]["worker_1"][0] == "LOST"
    assert before[moving[0]][1]["rules"][0][:2] == ("MyRule", "IssuesFound")
    release_clients()

    # --- a fourth collector joins ---
    for a in list(cluster.procs):
        cluster.stop(a)
    for a in four:
        cluster.start(a, four)
    assert _listing(fourth) == set()
    # The trials it now owns are held by their old collectors, found by the ranking.
    for t in moving + [moving_live]:
        assert _rendezvous.owner(four, t) == fourth and holder[t] != fourth
        assert _snapshot(t, s4)[0] == holder[t]

    dry = _rebalance(s4, "--dry-run")
    would = {line.split()[2] for line in dry.stdout.splitlines() if line.startswith("would move:")}
    assert would == set(moving), dry.stdout
    assert f"skipped (live): {moving_live} on {holder[moving_live]}" in dry.stdout, dry.stdout
    assert _listing(fourth) == set()  # a dry run moves nothing

    # --- interrupted after copying the first trial, before publishing it ---
    first = sorted(moving)[0]
    p = _rebalance(s4, crash_at="copied", check=False)
    assert p.returncode == 70 and "copied to" in p.stdout, p.stdout + p.stderr
    assert _listing(fourth) == set()  # the half copy is not listed...
    p = _cli("steps", first, servers=[fourth], check=False)  # ...nor read on the owner
    assert p.returncode == 1 and "TRIAL_NOT_FOUND" in p.stderr, p.stderr
    assert first in _listing(holder[first])
    assert _snapshot(first, s4) == before[first]  # the original, read from its holder
    # Still hidden after the owner restarts (the mark is stored with the trial).
    cluster.stop(fourth)
    cluster.start(fourth, four)
    assert _listing(fourth) == set()
    assert _snapshot(first, s4) == before[first]
    release_clients()

    # --- interrupted after publishing, before deleting the original ---
    p = _rebalance(s4, crash_at="published", check=False)
    assert p.returncode == 70 and "removing the unfinished copy" in p.stdout, p.stdout + p.stderr
    assert _listing(fourth) == {first} and first in _listing(holder[first])
    assert _snapshot(first, s4) == (fourth, before[first][1])  # the owner's copy, equal
    release_clients()

    # --- a full run finishes ---
    p = _rebalance(s4)
    assert f"moved {len(moving)} of {len(moving)} trials" in p.stdout, p.stdout
    assert "holds a published copy already" in p.stdout, p.stdout
    assert _listing(fourth) == set(moving)
    for t in moving:
        assert t not in _listing(holder[t])
        assert _snapshot(t, s4) == (fourth, before[t][1]), t
        got = json.loads(_cli("value", t, "w", "--step", "4", "--worker", "worker_1", "--json",
                              env_servers=s4).stdout)
        assert np.array_equal(np.array(got["values"], np.float32),
                              np.frombuffer(before[t][1]["values"][(4, "w", "worker_1")][0][2], np.float32))
    # Live trials and trials on their owner are untouched (a live trial's
    # workers may have become LOST across the restart: their streams ended).
    for t in staying + [staying_live, moving_live]:
        address, snap = _snapshot(t, s4)
        if t in (staying_live, moving_live):
            snap["workers"] = before[t][1]["workers"]
        assert (address, snap) == before[t], t
    assert moving_live in _listing(holder[moving_live])
    # Nothing left to move.
    again = _rebalance(s4)
    assert f"moved 0 of 0 trials; 1 live skipped" in again.stdout, again.stdout


def test_rebalance_keeps_the_original_when_the_copy_differs(cluster, monkeypatch):
    """The owner already holds a different trial of the name (written straight
    to it): verification fails, the move stops, both trials stay as they were."""
    two, three = cluster.addresses[:2], cluster.addresses[:3]
    new = three[2]
    monkeypatch.delenv("TENSORKEEP_SERVER", raising=False)
    monkeypatch.delenv("TENSORKEEP_SERVERS", raising=False)
    for a in two:
        cluster.start(a, two)
    t = next(f"rb-diff-{k}" for k in range(10_000) if _rendezvous.owner(three, f"rb-diff-{k}") == new)
    _write(t, 7, ",".join(two), rich=False, end=True)
    holder = _rendezvous.owner(two, t)
    before = _snapshot(t, ",".join(two))
    release_clients()
    for a in list(cluster.procs):
        cluster.stop(a)
    for a in three:
        cluster.start(a, three)
    w = Writer(f"tensorkeep://{new}/{t}", "worker_0", 1)
    w.write_tensor("w", np.zeros(8, np.float32), 0)
    w.close(end_of_training=True, timeout=30)
    p = _rebalance(",".join(three), check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "holds a published copy already" in p.stdout and "does not read back as the original" in p.stderr, \
        p.stdout + p.stderr
    assert t in _listing(holder) and t in _listing(new)
    assert _snapshot(t, holder) == (holder, before[1])  # the original, untouched
    assert _snapshot(t, new)[1]["steps"] == [0]
