"""One definition of every limit: the Python client reads the collector's own
(proto/limits.proto through tensorkeep._proto.limits_pb2), refuses what the
collector refuses before sending, with the collector's message."""

import math
import os
import re
import threading
import time

import grpc
import numpy as np
import pytest

from tensorkeep import Writer, _names
from tensorkeep._proto import limits_pb2
from tensorkeep._proto import tensorkeep_pb2 as pb
from tensorkeep._proto import tensorkeep_pb2_grpc as pb_grpc
from tensorkeep.trials import create_trial

LIMITS_PROTO = os.path.join(os.path.dirname(__file__), "..", "..", "proto", "limits.proto")


def test_generated_limits_are_the_proto_file_and_the_clients():
    with open(LIMITS_PROTO) as f:
        declared = dict(
            (m.group(1), int(m.group(2))) for m in re.finditer(r"^\s*([A-Z_]+)\s*=\s*(\d+);", f.read(), re.M)
        )
    assert declared["MAX_COLLECTION_NAME_BYTES"] == 128
    for name, value in declared.items():
        assert getattr(limits_pb2, name) == value, name
    for name, value in declared.items():
        if name.startswith("MAX_") and name != "MAX_STEP_BITS":
            assert getattr(_names, name) == value, name
    assert _names.MAX_STEP == (1 << limits_pb2.MAX_STEP_BITS) - 1


def _push(address, trial, records, worker="worker_0", num_workers=1):
    """Sends Open and one RecordBatch on a raw Push stream; returns (code, details)."""
    msgs = [
        pb.PushRequest(seq=1, open=pb.Open(trial=trial, worker=worker, num_workers=num_workers)),
        pb.PushRequest(seq=2, records=pb.RecordBatch(records=records)),
        pb.PushRequest(seq=3, flush=pb.Flush()),
        pb.PushRequest(seq=4, close=pb.Close(end_of_training=False)),
    ]
    with grpc.insecure_channel(address) as ch:
        stub = pb_grpc.TensorKeepStub(ch)
        try:
            for _ in stub.Push(iter(msgs), timeout=30):
                pass
        except grpc.RpcError as e:
            return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def _record(name="x", collections=()):
    data = np.zeros(4, np.float32).tobytes()
    return pb.TensorRecord(
        name=name, step=0, mode=pb.TRAIN, mode_step=0, dtype=pb.FLOAT32, shape=[4], data=data,
        has_value=True, collections=list(collections),
    )


@pytest.mark.parametrize(
    "what,limit",
    [("collection name", limits_pb2.MAX_COLLECTION_NAME_BYTES), ("tensor name", limits_pb2.MAX_TENSOR_NAME_BYTES)],
)
def test_client_and_collector_agree_on_name_lengths(server, trial_name, what, limit):
    def record(n):
        return _record(name="c" * n) if what == "tensor name" else _record(collections=["c" * n])

    def write(w, n):
        if what == "tensor name":
            w.write_tensor("c" * n, np.zeros(4, np.float32), step=0)
        else:
            w.write_tensor("x", np.zeros(4, np.float32), step=0, collections=["c" * n])

    # At the limit: both accept.
    assert _push(server.address, trial_name, [record(limit)]) == (grpc.StatusCode.OK, "")
    with Writer(server.url(trial_name + "-w"), worker="worker_0") as w:
        write(w, limit)
    # One byte more: the client refuses before sending, with the collector's message.
    code, server_message = _push(server.address, trial_name, [record(limit + 1)])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    with Writer(server.url(trial_name + "-w2"), worker="worker_0") as w:
        with pytest.raises(ValueError) as raised:
            write(w, limit + 1)
    client_message = str(raised.value)
    assert client_message.endswith(f"is too long; the limit is {limit} bytes")
    assert client_message in server_message, (client_message, server_message)


def test_client_and_collector_agree_on_num_workers(server, trial_name):
    code, message = _push(server.address, trial_name, [_record()], num_workers=limits_pb2.MAX_WORKERS + 1)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, message
    with pytest.raises(ValueError, match=str(limits_pb2.MAX_WORKERS)):
        Writer(server.url(trial_name), worker="worker_0", num_workers=limits_pb2.MAX_WORKERS + 1)


def test_client_and_collector_agree_on_the_largest_step(server, trial_name):
    r = _record()
    r.step = r.mode_step = 1 << limits_pb2.MAX_STEP_BITS
    code, _ = _push(server.address, trial_name, [r])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert _names.check_step(_names.MAX_STEP) == _names.MAX_STEP
    with pytest.raises(ValueError):
        _names.check_step(_names.MAX_STEP + 1)


def test_regex_limits_are_checked_before_sending(trial_url):
    with Writer(trial_url, worker="worker_0") as w:
        w.write_tensor("x", np.zeros(4, np.float32), step=0)
    with create_trial(trial_url) as t:
        with pytest.raises(ValueError, match=f"the limit is {limits_pb2.MAX_REGEXES}"):
            t.tensor_names(regex=["a"] * (limits_pb2.MAX_REGEXES + 1))
        with pytest.raises(ValueError, match=f"is too long; the limit is {limits_pb2.MAX_REGEX_BYTES} bytes"):
            t.tensor_names(regex="x" * (limits_pb2.MAX_REGEX_BYTES + 1))
        # The collector refuses the same (a client that skips the check).
        stub = t._stub
        for regexes in (["x" * (limits_pb2.MAX_REGEX_BYTES + 1)], ["a"] * (limits_pb2.MAX_REGEXES + 1)):
            with pytest.raises(grpc.RpcError) as raised:
                stub.ListTensorNames(pb.ListTensorNamesRequest(trial=t.trial, regex=regexes))
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert t.tensor_names(regex=["x"] * limits_pb2.MAX_REGEXES) == ["x"]


def test_quote_is_the_collectors():
    assert _names.quote("abc") == "'abc'"
    assert _names.quote("a" * 150) == "'" + "a" * 100 + "...' (150 bytes)"
    assert _names.quote("é" * 60) == "'" + "é" * 50 + "...' (120 bytes)"
    assert _names.quote("it's") == "'it\\'s'"


def test_wait_for_steps_with_an_infinite_timeout_waits(trial_url):
    with Writer(trial_url, worker="worker_0") as w:
        w.write_tensor("x", np.zeros(4, np.float32), step=0)
        w.flush()
        with create_trial(trial_url) as t:

            def later():
                time.sleep(0.3)
                w.write_tensor("x", np.zeros(4, np.float32), step=1)
                w.end_step(1)
                w.flush()

            th = threading.Thread(target=later)
            th.start()
            start = time.monotonic()
            for timeout in (math.inf, 1e300):
                t.wait_for_steps([1], timeout=timeout)  # timed out at once before
            th.join()
            assert time.monotonic() - start >= 0.25
            with pytest.raises(ValueError, match="nan"):
                t.wait_for_steps([1], timeout=math.nan)
