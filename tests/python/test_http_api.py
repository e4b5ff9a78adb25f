"""The collector's JSON API (--http-listen, docs/http-api.md) against a real
collector: every endpoint's values are checked against numpy computed here on
the data the test pushed, the envelope keeps a spike that downsampling would
otherwise drop, the step-range zoom returns full resolution, server-sent events
arrive when a step completes, and tokens guard the API.

Only urllib and http.client (the standard library) talk to the API. Waits are
bounded by socket timeouts; nothing sleeps to synchronise.
"""

import hashlib
import http.client
import json
import math
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from tensorkeep import Writer

STEPS = 30
ELEMENTS = 1000
SPIKE_STEP = 17
SPIKE = 1000.0


def _values(worker: int, step: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * worker + step)
    v = rng.normal(0.1 * step, 1.0 + worker, ELEMENTS).astype(np.float32)
    if worker == 1 and step == SPIKE_STEP:
        v[123] = SPIKE
    return v


def _loss(step: int) -> np.float32:
    return np.float32(2.0 / (1 + step))




def _get(server, path, token=None, expect=200):
    req = urllib.request.Request(f"http://{server.http_address}{path}")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, body, ctype = r.status, r.read(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        status, body, ctype = e.code, e.read(), e.headers.get("Content-Type")
    assert status == expect, f"GET {path}: {status} {body[:500]!r}"
    assert ctype == "application/json"
    return json.loads(body)


def _push_trial(server, trial="http-trial"):
    url = server.url(trial)
    writers = [Writer(url, worker=f"worker_{w}", num_workers=2) for w in range(2)]
    for step in range(STEPS):
        for w, writer in enumerate(writers):
            writer.write_tensor("w", _values(w, step), step=step)
            writer.write_tensor("loss", _loss(step) * (w + 1), step=step)
            writer.end_step(step)
    for writer in writers:
        writer.close(end_of_training=True)
    return trial


@pytest.fixture
def served(http_collector):
    s = http_collector()
    return s, _push_trial(s)


def test_trials_and_trial(served):
    s, trial = served
    listing = _get(s, "/api/v1/trials")
    [t] = [t for t in listing["trials"] if t["name"] == trial]
    assert t["state"] == "ENDED" and t["ended"] is True
    assert t["num_workers"] == 2 and t["num_steps"] == STEPS and t["last_step"] == STEPS - 1
    assert t["num_tensors"] == 2 and t["modes"] == ["TRAIN"]
    assert [(w["worker"], w["state"], w["last_step"]) for w in t["workers"]] == [
        ("worker_0", "CLOSED", STEPS - 1),
        ("worker_1", "CLOSED", STEPS - 1),
    ]
    assert t["rules"] == [] and t["stop_requested"] is False
    one = _get(s, f"/api/v1/trials/{trial}")
    assert one["trial"]["name"] == trial
    assert one["steps_by_mode"] == [{"mode": "TRAIN", "complete_steps": STEPS, "saved_steps": STEPS, "last_step": STEPS - 1}]
    assert _get(s, f"/api/v1/trials/{trial}/tensors")["tensors"] == ["loss", "w"]
    assert _get(s, f"/api/v1/trials/{trial}/tensors?regex=^l")["tensors"] == ["loss"]


def test_series_full_resolution_matches_numpy(served):
    s, trial = served
    for reduction, abs_, fn in [("mean", False, np.mean), ("l2", False, np.linalg.norm),
                                ("mean", True, lambda v: np.mean(np.abs(v))), ("max", False, np.max)]:
        r = _get(s, f"/api/v1/trials/{trial}/series?tensor=w&reduction={reduction}&abs={int(abs_)}&worker=worker_1")
        [series] = r["series"]
        assert series["worker"] == "worker_1" and series["total_steps"] == STEPS and not series["downsampled"]
        assert series["step"] == list(range(STEPS)) == series["step_end"]
        expected = [float(fn(_values(1, st).astype(np.float64))) for st in range(STEPS)]
        np.testing.assert_allclose(series["mean"], expected, rtol=1e-5)
        assert series["min"] == series["max"] == series["mean"]
    # No worker: smdebug's default, the lexically first worker.
    [default] = _get(s, f"/api/v1/trials/{trial}/series?tensor=w")["series"]
    np.testing.assert_allclose(default["mean"], [float(np.mean(_values(0, st), dtype=np.float64)) for st in range(STEPS)], rtol=1e-5)
    # Every worker.
    both = _get(s, f"/api/v1/trials/{trial}/series?tensor=w&worker=*")["series"]
    assert [x["worker"] for x in both] == ["worker_0", "worker_1"]


def test_envelope_keeps_the_spike_and_zoom_is_full_resolution(served):
    s, trial = served
    [series] = _get(s, f"/api/v1/trials/{trial}/series?tensor=w&reduction=max&worker=worker_1&points=7")["series"]
    assert series["downsampled"] and series["total_steps"] == STEPS
    per = math.ceil(STEPS / 7)
    maxima = [float(np.max(_values(1, st))) for st in range(STEPS)]
    groups = [list(range(b, min(STEPS, b + per))) for b in range(0, STEPS, per)]
    assert series["step"] == [g[0] for g in groups] and series["step_end"] == [g[-1] for g in groups]
    np.testing.assert_allclose(series["max"], [max(maxima[i] for i in g) for g in groups], rtol=1e-6)
    np.testing.assert_allclose(series["min"], [min(maxima[i] for i in g) for g in groups], rtol=1e-6)
    np.testing.assert_allclose(series["mean"], [np.mean([maxima[i] for i in g]) for g in groups], rtol=1e-6)
    spike_bucket = [i for i, g in enumerate(groups) if SPIKE_STEP in g][0]
    assert series["max"][spike_bucket] == SPIKE and series["max_step"][spike_bucket] == SPIKE_STEP
    # Zoom: [10, 20) at full resolution, then downsampled to 5 buckets of 2.
    [zoom] = _get(s, f"/api/v1/trials/{trial}/series?tensor=w&reduction=max&worker=worker_1&from=10&to=20")["series"]
    assert zoom["step"] == list(range(10, 20)) and not zoom["downsampled"]
    np.testing.assert_allclose(zoom["max"], maxima[10:20], rtol=1e-6)
    [five] = _get(s, f"/api/v1/trials/{trial}/series?tensor=w&reduction=max&worker=worker_1&from=10&to=20&points=5")["series"]
    assert five["step"] == [10, 12, 14, 16, 18] and five["max"][3] == SPIKE


def test_scalars(served):
    s, trial = served
    [series] = _get(s, f"/api/v1/trials/{trial}/scalars?tensor=loss&worker=worker_1")["series"]
    np.testing.assert_allclose(series["mean"], [float(_loss(st) * 2) for st in range(STEPS)], rtol=1e-6)


def test_distributions_match_numpy_percentiles_and_histograms(served):
    s, trial = served
    r = _get(s, f"/api/v1/trials/{trial}/distributions?tensor=w&worker=worker_0&bins=20")
    assert r["total_steps"] == STEPS and not r["downsampled"]
    assert r["step"] == list(range(STEPS))
    percentiles = r["percentiles"]
    assert percentiles[0] == 0 and percentiles[4] == 50 and percentiles[-1] == 100
    all_values = np.concatenate([_values(0, st) for st in range(STEPS)]).astype(np.float64)
    edges = np.array(r["edges"])
    assert len(edges) == 21
    assert edges[0] == all_values.min() and edges[-1] == all_values.max()
    for st in range(STEPS):
        v = _values(0, st).astype(np.float64)
        band = r["bands"][st]
        assert band[0] == v.min() and band[-1] == v.max()
        # Interpolated in a 512-bin histogram of the step: within a bin of the
        # order statistics around the rank (numpy's lower and higher).
        width = (v.max() - v.min()) / 512 * 1.01
        lower = np.percentile(v, percentiles, method="lower")
        higher = np.percentile(v, percentiles, method="higher")
        assert np.all(np.array(band) >= lower - width) and np.all(np.array(band) <= higher + width), (st, band)
        assert r["count"][st] == ELEMENTS and r["nan_count"][st] == 0 and r["inf_count"][st] == 0
        hist = np.array(r["histograms"][st])
        expected, _ = np.histogram(v, bins=edges)
        assert abs(hist.sum() - ELEMENTS) < 1e-6
        # From the fine histogram: every count within the values of a fine bin or two.
        assert np.abs(hist - expected).max() <= 0.05 * ELEMENTS
    # Downsampled to 3 buckets of 10 steps: bands are envelopes of the steps'.
    d = _get(s, f"/api/v1/trials/{trial}/distributions?tensor=w&worker=worker_1&points=3")
    assert d["downsampled"] and d["step"] == [0, 10, 20] and d["step_end"] == [9, 19, 29]
    assert d["bands"][1][-1] == SPIKE  # the spike's bucket keeps its max
    assert d["bands"][0][0] == min(float(_values(1, st).min()) for st in range(10))


def test_every_worker_distributions_are_the_union_of_their_values(served):
    """worker=*: one distribution per step over the union of the workers'
    values, checked against numpy on the concatenated values: exact extremes
    and counts, percentiles within one of the workers' fine bins, histograms
    (the sum of the workers' on the shared bins) within a fine bin or two of
    np.histogram's."""
    s, trial = served
    r = _get(s, f"/api/v1/trials/{trial}/distributions?tensor=w&worker=*&bins=20")
    assert r["worker"] == "*" and r["total_steps"] == STEPS and r["step"] == list(range(STEPS))
    percentiles = r["percentiles"]
    union_all = np.concatenate([_values(w, st) for w in range(2) for st in range(STEPS)]).astype(np.float64)
    edges = np.array(r["edges"])
    assert edges[0] == union_all.min() and edges[-1] == union_all.max()  # the spike included
    for st in range(STEPS):
        parts = [_values(w, st).astype(np.float64) for w in range(2)]
        v = np.concatenate(parts)
        band = np.array(r["bands"][st])
        assert band[0] == v.min() and band[-1] == v.max()
        assert r["count"][st] == 2 * ELEMENTS and r["nan_count"][st] == 0
        width = max((p.max() - p.min()) / 512 for p in parts) * 1.01
        lower = np.percentile(v, percentiles, method="lower")
        higher = np.percentile(v, percentiles, method="higher")
        assert np.all(band >= lower - width) and np.all(band <= higher + width), (st, band, lower, higher)
        hist = np.array(r["histograms"][st])
        expected, _ = np.histogram(v, bins=edges)
        assert abs(hist.sum() - 2 * ELEMENTS) < 1e-6
        assert np.abs(hist - expected).max() <= 0.05 * 2 * ELEMENTS
    # Downsampled buckets keep the envelope over the merged steps.
    d = _get(s, f"/api/v1/trials/{trial}/distributions?tensor=w&worker=*&points=3")
    assert d["downsampled"] and d["bands"][1][-1] == SPIKE
    assert d["bands"][0][0] == min(float(_values(w, st).min()) for w in range(2) for st in range(10))


def test_one_step_histogram_is_numpys(served):
    s, trial = served
    r = _get(s, f"/api/v1/trials/{trial}/histogram?tensor=w&step=5&worker=worker_1&bins=30")
    counts, edges = np.histogram(_values(1, 5).astype(np.float64), bins=30)
    assert r["counts"] == counts.tolist()
    np.testing.assert_allclose(r["edges"], edges, rtol=1e-12)
    ranged = _get(s, f"/api/v1/trials/{trial}/histogram?tensor=w&step=5&bins=4&min=-1&max=1")
    v = _values(0, 5).astype(np.float64)
    assert ranged["counts"] == np.histogram(v, bins=4, range=(-1, 1))[0].tolist()
    assert ranged["outside_count"] == int(np.sum((v < -1) | (v > 1)))


def test_errors(served):
    s, trial = served
    e = _get(s, "/api/v1/trials/no-such-trial", expect=404)["error"]
    assert e["code"] == "NOT_FOUND" and e["reason"] == "TRIAL_NOT_FOUND" and "no-such-trial" in e["message"]
    assert _get(s, f"/api/v1/trials/{trial}/series?tensor=nope", expect=404)["error"]["reason"] == "TENSOR_UNAVAILABLE"
    assert "tensor" in _get(s, f"/api/v1/trials/{trial}/series", expect=400)["error"]["message"]
    assert "points" in _get(s, f"/api/v1/trials/{trial}/series?tensor=w&points=99999999", expect=400)["error"]["message"]
    assert "reduction" in _get(s, f"/api/v1/trials/{trial}/series?tensor=w&reduction=median", expect=400)["error"]["message"]
    _get(s, f"/api/v1/trials/{trial}/series?tensor=w&from=20&to=10", expect=400)
    _get(s, f"/api/v1/trials/{trial}/histogram?tensor=w&step=999", expect=404)
    _get(s, f"/api/v1/trials/{trial}/distributions?tensor=w&bins=0", expect=400)
    _get(s, "/api/v1/nothing-here", expect=404)


def _read_event(resp):
    """The next event (a dict of its fields), skipping comments."""
    fields = {}
    while True:
        line = resp.readline().decode()
        assert line, "the event stream ended"
        line = line.rstrip("\n")
        if not line:
            if "data" in fields:
                return fields
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(": ")
        fields[key] = value


def test_events_arrive_when_a_step_completes(http_collector):
    s = http_collector()
    url = s.url("live-trial")
    w = Writer(url)
    w.write_tensor("x", np.ones(3, np.float32), step=0)
    w.end_step(0)
    w.flush()
    host, port = s.http_address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", "/api/v1/events?trial=live-trial")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    first = _read_event(resp)
    assert first["event"] == "trial"
    snapshot = json.loads(first["data"])
    assert snapshot["name"] == "live-trial" and snapshot["last_step"] == 0 and snapshot["state"] == "RUNNING"
    # A commit wakes the stream; the event names the new step.
    pushed = threading.Thread(target=lambda: (w.write_tensor("x", np.ones(3, np.float32), step=1), w.end_step(1), w.flush()))
    pushed.start()
    pushed.join(30)
    seen = None
    for _ in range(10):  # a commit may wake it more than once; bounded
        event = json.loads(_read_event(resp)["data"])
        if event["last_step"] == 1 and event["complete_through"] == 1:
            seen = event
            break
    assert seen is not None
    w.close(end_of_training=True)
    ended = None
    for _ in range(10):
        event = json.loads(_read_event(resp)["data"])
        if event["state"] == "ENDED":
            ended = event
            break
    assert ended is not None and ended["workers"][0]["state"] == "CLOSED"
    conn.close()
    assert _get(s, "/api/v1/events?trial=", expect=400)["error"]["code"] == "INVALID_ARGUMENT"


def _open_stream(server, path, token=None):
    host, port = server.http_address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream", resp.status
    return conn, resp


def _next_trial_event(resp, until, deadline, seen):
    """Reads trial-list events into `seen` (their names) until `until(event, data)`
    holds; the socket timeout bounds each read, `deadline` the whole wait."""
    while time.monotonic() < deadline:
        event = _read_event(resp)
        data = json.loads(event["data"])
        names = [t["name"] for t in data["trials"]] if event["event"] == "trials" else [data["name"]]
        seen.update(names)
        if until(event, data):
            return event, data
    raise AssertionError(f"no such event within the deadline; saw trials {sorted(seen)}")


def test_trial_list_events_show_a_new_trial_within_a_second(http_collector):
    """/api/v1/events without a trial: a snapshot of the list, then each trial
    a commit created or changed, woken by the commit (no polling: the event
    must arrive within a second of the write's acknowledgement), and
    `removed` when a trial is deleted."""
    s = http_collector()
    first = Writer(s.url("list-old"))
    first.write_tensor("x", np.ones(3, np.float32), step=0)
    first.close(end_of_training=True)
    conn, resp = _open_stream(s, "/api/v1/events")
    seen = set()
    event = _read_event(resp)
    assert event["event"] == "trials"
    snapshot = json.loads(event["data"])["trials"]
    assert [t["name"] for t in snapshot] == ["list-old"] and snapshot[0]["state"] == "ENDED"

    # A trial created after the stream opened: shown within a second of the
    # acknowledged write.
    w = Writer(s.url("list-new"), worker="worker_0", num_workers=1)
    w.write_tensor("x", np.ones(3, np.float32), step=0)
    w.end_step(0)
    w.flush()
    acked = time.monotonic()
    _, data = _next_trial_event(resp, lambda e, d: e["event"] == "trial" and d["name"] == "list-new"
                                and d["last_step"] == 0, acked + 10, seen)
    assert time.monotonic() - acked < 1.0, "the new trial took more than a second"
    assert data["state"] == "RUNNING" and data["workers"][0]["state"] == "ACTIVE"

    # A rule status, a worker's end and the trial's end arrive as changes of it.
    from tensorkeep.trials import create_trial

    create_trial(s.url("list-new")).report_rule_status("LossNotDecreasing", "IssuesFound", step=0, message="flat")
    _, data = _next_trial_event(resp, lambda e, d: e["event"] == "trial" and d["name"] == "list-new"
                                and d["rules"], time.monotonic() + 10, seen)
    assert data["rules"][0]["rule"] == "LossNotDecreasing" and data["rules"][0]["state"] == "ISSUES_FOUND"
    w.close(end_of_training=True)
    _, data = _next_trial_event(resp, lambda e, d: e["event"] == "trial" and d["name"] == "list-new"
                                and d["state"] == "ENDED", time.monotonic() + 10, seen)
    assert data["workers"][0]["state"] == "CLOSED"

    # A deleted trial is `removed`.
    from tensorkeep.trials import delete_trial

    delete_trial(s.url("list-old"))
    _next_trial_event(resp, lambda e, d: e["event"] == "removed" and d["name"] == "list-old",
                      time.monotonic() + 10, seen)
    conn.close()


READ = "tk_http_read_token_0123456789"
WRITE = "tk_http_write_token_0123456789"
TEAM = "tk_http_team_token_0123456789"


def test_tokens_and_prefixes(http_collector, tmp_path):
    import tensorkeep

    tokens = tmp_path / "tokens"
    line = lambda tok, rest: f"sha256:{hashlib.sha256(tok.encode()).hexdigest()} {rest}\n"
    tokens.write_text(line(READ, "read reader") + line(WRITE, "write writer") + line(TEAM, "read team team-a-"))
    s = http_collector("--auth-tokens", str(tokens))
    tensorkeep.set_credentials(token=WRITE)
    try:
        for trial in ("team-a-1", "team-b-1"):
            w = Writer(s.url(trial), retry_timeout=10)
            w.write_tensor("x", np.ones(2, np.float32), step=0)
            w.close(end_of_training=True)
    finally:
        tensorkeep.set_credentials()
    e = _get(s, "/api/v1/trials", expect=401)["error"]
    assert e["code"] == "UNAUTHENTICATED" and "Authorization: Bearer TOKEN" in e["message"]
    _get(s, "/api/v1/trials", token="wrong", expect=401)
    assert [t["name"] for t in _get(s, "/api/v1/trials", token=READ)["trials"]] == ["team-a-1", "team-b-1"]
    assert [t["name"] for t in _get(s, "/api/v1/trials", token=TEAM)["trials"]] == ["team-a-1"]
    assert _get(s, "/api/v1/trials/team-b-1", token=TEAM, expect=403)["error"]["code"] == "PERMISSION_DENIED"
    assert _get(s, "/api/v1/trials/team-a-1/tensors", token=TEAM)["tensors"] == ["x"]
    _get(s, "/api/v1/trials/team-b-1/series?tensor=x", token=TEAM, expect=403)
    _get(s, "/api/v1/events?trial=team-b-1", token=TEAM, expect=403)
    _get(s, "/api/v1/events?trial=team-a-1", expect=401)
    _get(s, "/api/v1/events", expect=401)

    # The trial list's stream: a token scoped to team-a- never sees team-b-
    # trials, neither in the snapshot nor when they change or are created,
    # while a reader of everything sees both.
    team_conn, team = _open_stream(s, "/api/v1/events", token=TEAM)
    all_conn, every = _open_stream(s, "/api/v1/events", token=READ)
    team_seen, all_seen = set(), set()
    assert [t["name"] for t in json.loads(_read_event(team)["data"])["trials"]] == ["team-a-1"]
    assert [t["name"] for t in json.loads(_read_event(every)["data"])["trials"]] == ["team-a-1", "team-b-1"]
    tensorkeep.set_credentials(token=WRITE)
    try:
        for trial in ("team-b-2", "team-a-2"):  # B first: A's event comes after B's commit
            w = Writer(s.url(trial), retry_timeout=10)
            w.write_tensor("x", np.ones(2, np.float32), step=0)
            w.close(end_of_training=True)
    finally:
        tensorkeep.set_credentials()
    _next_trial_event(every, lambda e, d: e["event"] == "trial" and d["name"] == "team-a-2"
                      and d["state"] == "ENDED", time.monotonic() + 10, all_seen)
    assert "team-b-2" in all_seen
    _next_trial_event(team, lambda e, d: e["event"] == "trial" and d["name"] == "team-a-2"
                      and d["state"] == "ENDED", time.monotonic() + 10, team_seen)
    assert team_seen == {"team-a-2"}, team_seen
    team_conn.close()
    all_conn.close()


def _configured_collections():
    """Collections as a hook configures them: per-mode save configs with an end
    step and save steps, reductions with norms and abs, a lookahead regex (stored,
    matched by the Python client only) and one configured but empty."""
    from tensorkeep import ModeKeys, ReductionConfig, SaveConfig, SaveConfigMode
    from tensorkeep.core.collection import Collection

    return [
        Collection("weights", include_regex=["^(?!gradient).*weight"], tensor_names=["w"],
                   save_config=SaveConfig(mode_save_configs={
                       ModeKeys.TRAIN: SaveConfigMode(save_interval=5, start_step=2, end_step=40, save_steps=[1, 7]),
                       ModeKeys.EVAL: SaveConfigMode(save_interval=1)}),
                   reduction_config=ReductionConfig(reductions=["min", "max"], abs_reductions=["mean"],
                                                    norms=["l2"], abs_norms=["l1"], save_raw_tensor=False,
                                                    save_shape=True),
                   save_histogram=False),
        Collection("losses", include_regex=["loss"]),
        Collection("relu_outputs", include_regex=[".*relu.*output"], save_config=SaveConfig(save_interval=3)),
    ]


def test_trial_shows_the_collections_configuration(http_collector):
    from tensorkeep import _collection_wire

    s = http_collector()
    trial = "http-collections"
    url = s.url(trial)
    writers = [Writer(url, worker=f"worker_{w}", num_workers=2) for w in range(2)]
    for step in range(3):
        for w, writer in enumerate(writers):
            writer.write_tensor("w", _values(w, step), step=step, collections=("weights",))
            writer.write_tensor("loss", _loss(step), step=step, collections=("losses",))
            writer.write_tensor("gradient/w", _values(w, step), step=step, collections=("gradients",))
            writer.end_step(step)
    colls = _configured_collections()
    assert _collection_wire.put_collections(url, "worker_1", colls)
    assert _collection_wire.put_collections(url, "worker_0", colls[1:])  # worker_0 left weights out
    for writer in writers:
        writer.close(end_of_training=True)
    got = {c["name"]: c for c in _get(s, f"/api/v1/trials/{trial}")["collections"]}
    assert sorted(got) == ["gradients", "losses", "relu_outputs", "weights"]
    assert got["weights"] == {
        "name": "weights", "tensors": 1, "configured": True, "configured_by": ["worker_1"],
        "include_regex": ["^(?!gradient).*weight"],
        "save_config": {"TRAIN": {"save_interval": 5, "start_step": 2, "end_step": 40, "save_steps": [1, 7]},
                        "EVAL": {"save_interval": 1, "start_step": 0, "end_step": None, "save_steps": []}},
        "reduction_config": {"reductions": ["min", "max"], "abs_reductions": ["mean"], "norms": ["l2"],
                             "abs_norms": ["l1"], "save_raw_tensor": False, "save_shape": True},
        "save_histogram": False}
    assert got["losses"]["configured_by"] == ["worker_0", "worker_1"]
    assert got["losses"]["tensors"] == 1 and got["losses"]["include_regex"] == ["loss"]
    assert got["losses"]["save_config"] is None and got["losses"]["reduction_config"] is None
    every = {"save_interval": 3, "start_step": 0, "end_step": None, "save_steps": []}
    assert got["relu_outputs"]["tensors"] == 0  # configured, nothing saved: listed all the same
    assert got["relu_outputs"]["save_config"] == {m: every for m in ("TRAIN", "EVAL", "PREDICT", "GLOBAL")}
    # Saved under a collection no writer configured: its tensors, no configuration.
    assert got["gradients"] == {"name": "gradients", "tensors": 1, "configured": False, "configured_by": [],
                                "include_regex": [], "save_config": None, "reduction_config": None,
                                "save_histogram": None}
    # The counts agree with the tensors endpoint's collection filter.
    for name, c in got.items():
        assert len(_get(s, f"/api/v1/trials/{trial}/tensors?collection={name}")["tensors"]) == c["tensors"], name
