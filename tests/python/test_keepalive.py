"""A hung collector (SIGSTOP: its process frozen, its TCP connections still
open) is detected by gRPC keepalive (proto/limits.proto, KeepalivePolicy): the
writer drops the connection within KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS
and reconnects; once the collector runs again (SIGCONT) the writer resends
what was not acknowledged, without loss or duplicates. The collector permits
the clients' ping interval (no GOAWAY "too_many_pings" over a long idle
connection). (The C++ writer sets the same options: client/connection.cc.)"""

import os
import signal
import time

import numpy as np
import pytest

from tensorkeep import Writer, _names
from tensorkeep.trials import create_trial

DETECT_S = (_names.KEEPALIVE_TIME_MS + _names.KEEPALIVE_TIMEOUT_MS) / 1000


def val(step):
    return np.random.default_rng(step).standard_normal(64).astype(np.float32)


def _commit(w, first, last):
    for s in range(first, last + 1):
        w.write_tensor("x", val(s), step=s)
        w.end_step(s)


def test_a_hung_collector_is_dropped_and_the_writer_resends(server, trial_url):
    w = Writer(trial_url, retry_timeout=120)
    _commit(w, 0, 9)
    w.flush()
    gen = w._stream.streams_opened  # a new stream after each reconnection
    server.proc.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        _commit(w, 10, 19)  # sent into the frozen collector's socket buffers
        deadline = stopped + DETECT_S + 20  # generous: a loaded machine
        while w._stream.streams_opened == gen:
            assert time.monotonic() < deadline, "the writer never dropped the hung connection"
            time.sleep(0.05)
        detected = time.monotonic() - stopped
    finally:
        server.proc.send_signal(signal.SIGCONT)
    print(f"\nhung collector detected after {detected:.1f} s (keepalive {DETECT_S:.0f} s)")
    assert detected >= _names.KEEPALIVE_TIME_MS / 1000 * 0.5  # it was the keepalive, not a fluke
    _commit(w, 20, 29)
    w.close(end_of_training=True, timeout=60)
    trial = create_trial(trial_url)
    assert trial.steps() == list(range(30))
    for s in (0, 9, 10, 19, 29):
        np.testing.assert_array_equal(trial.tensor("x").value(s), val(s))
    assert trial.tensor("x").workers(15) == ["worker_0"]
    trial.close()


@pytest.mark.skipif(not os.environ.get("TK_SLOW"), reason="idles 3.5 ping intervals (35 s): set TK_SLOW=1")
def test_an_idle_connection_outlives_several_keepalive_pings(server, trial_url):
    """The collector accepts the clients' pings: an idle writer's stream stays the
    same over more than three ping intervals (a collector allowing gRPC's default
    of one ping in 5 minutes answers the third with GOAWAY "too_many_pings" and
    the writer reconnects)."""
    w = Writer(trial_url)
    _commit(w, 0, 0)
    w.flush()
    gen = w._stream.streams_opened
    time.sleep(_names.KEEPALIVE_TIME_MS / 1000 * 3.5)
    _commit(w, 1, 1)
    w.flush(timeout=30)
    assert w._stream.streams_opened == gen
    w.close(end_of_training=True)
