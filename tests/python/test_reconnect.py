"""The Writer survives a collector crash: kill -9 mid-run, restart on the same data
directory and port, and every record arrives exactly once; acknowledged data
survived the crash. Readers retry idempotent queries across a restart."""

import numpy as np

from tensorkeep import Writer
from tensorkeep.trials import create_trial


def val(step):
    return np.random.default_rng(step).standard_normal(256).astype(np.float32)


def test_writer_reconnects_after_kill_9_without_loss_or_duplicates(server, trial_url):
    w = Writer(trial_url, max_queue_bytes=1 << 20, retry_timeout=120)
    for s in range(100):
        w.write_tensor("x", val(s), step=s)
        w.end_step(s)
    w.flush()  # acknowledged = durable: must survive kill -9
    # More writes, some in flight, then the collector dies.
    for s in range(100, 150):
        w.write_tensor("x", val(s), step=s)
        w.end_step(s)
    server.kill()
    # Written while the collector is down: queued (bounded), sent after the restart.
    for s in range(150, 200):
        w.write_tensor("x", val(s), step=s)
        w.end_step(s)
    server.start(port=server.port)
    w.close(end_of_training=True)

    t = create_trial(trial_url)
    assert t.steps() == list(range(200))
    x = t.tensor("x")
    assert x.workers(0) == ["worker_0"]
    vs = x.values()
    assert sorted(vs) == list(range(200))
    for s, v in vs.items():
        assert np.array_equal(v, val(s)), s


def test_acknowledged_data_survives_kill_9(server, trial_url):
    w = Writer(trial_url)
    for s in range(10):
        w.write_tensor("x", val(s), step=s)
    w.end_step(9)
    w.flush()
    server.kill()
    server.start(port=server.port)
    t = create_trial(trial_url)
    assert t.steps() == list(range(10))
    assert np.array_equal(t.tensor("x").value(9), val(9))
    w.close()


def test_invoke_rule_resumes_after_a_collector_restart(server, trial_url):
    import threading

    from tensorkeep.rules import Rule, invoke_rule

    class Seen(Rule):
        def __init__(self, base_trial):
            super().__init__(base_trial)
            self.seen = []
            self.reached = {}

        def invoke_at_step(self, step):
            self.seen.append(step)
            ev = self.reached.get(step)
            if ev is not None:
                ev.set()
            return False

    def commit(w, s):
        w.write_tensor("x", val(s), step=s)
        w.end_step(s)

    t = create_trial(trial_url)
    rule = Seen(t)
    rule.reached[9] = threading.Event()
    errors = []
    th = threading.Thread(target=lambda: _run(invoke_rule, rule, errors), daemon=True)
    th.start()
    w = Writer(trial_url, retry_timeout=120)
    for s in range(10):
        commit(w, s)
    w.flush()
    assert rule.reached[9].wait(30), "the rule did not reach step 9"
    server.kill()
    server.start(port=server.port)
    for s in range(10, 20):
        commit(w, s)
    w.close(end_of_training=True)
    th.join(60)
    assert not th.is_alive() and not errors, errors
    assert rule.seen == list(range(20))  # every step once, none twice


def _run(fn, rule, errors):
    try:
        fn(rule)
    except BaseException as e:  # noqa: BLE001
        errors.append(e)
