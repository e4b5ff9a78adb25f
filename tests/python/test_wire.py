"""The hand-rolled Push encoding (tensorkeep._wire) against the generated protobuf classes."""

import numpy as np
import pytest

from tensorkeep import _wire
from tensorkeep._proto import tensorkeep_pb2 as pb


def parse(parts_or_bytes) -> pb.PushRequest:
    data = parts_or_bytes if isinstance(parts_or_bytes, bytes) else b"".join(parts_or_bytes)
    return pb.PushRequest.FromString(data)


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 2**32, 2**63 - 1, 2**64 - 1])
def test_varint_matches_protobuf(n):
    assert pb.EndStep.FromString(b"\x08" + _wire.varint(n)).step == n
    if n:
        assert pb.EndStep(step=n).SerializeToString() == b"\x08" + _wire.varint(n)


def test_record_batch_round_trips():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    head = _wire.record_head("layer1.weight".encode(), 1, 2, a.shape)
    tail = _wire.record_tail(True, [("max", True, 2.5), ("mean", False, -1.25)], [b"weights", b"all"])
    parts = []
    n = _wire.record_parts(head, _wire.steps_field(10, 7), a.tobytes(), a.nbytes, tail, parts)
    # A reduction-only record and an empty tensor, in the same batch.
    n += _wire.record_parts(
        _wire.record_head("loss".encode(), 2, 0, ()),
        _wire.steps_field(0, 0),
        b"",
        0,
        _wire.record_tail(False, [("mean", False, 0.5)], []),
        parts,
    )
    n += _wire.record_parts(
        _wire.record_head("empty".encode(), 4, 9, (0, 3)), _wire.steps_field(3, 3), b"", 0,
        _wire.record_tail(True), parts,
    )
    assert n == sum(len(p) for p in parts)
    msg = parse(_wire.records_message(parts, n) + [_wire.seq_field(42)])
    assert msg.seq == 42 and msg.WhichOneof("kind") == "records"
    r0, r1, r2 = msg.records.records
    assert r0.name == "layer1.weight" and r0.step == 10 and r0.mode == pb.TRAIN and r0.mode_step == 7
    assert r0.dtype == pb.FLOAT32 and list(r0.shape) == [3, 4] and r0.has_value
    assert r0.value_size == a.nbytes and np.array_equal(np.frombuffer(r0.data, np.float32).reshape(3, 4), a)
    assert [(r.name, r.abs, r.value) for r in r0.reductions] == [("max", True, 2.5), ("mean", False, -1.25)]
    assert list(r0.collections) == ["weights", "all"]
    assert r1.name == "loss" and r1.mode == pb.EVAL and not r1.has_value and r1.data == b""
    assert r1.reductions[0].name == "mean" and r1.reductions[0].value == 0.5
    assert r2.has_value and list(r2.shape) == [0, 3] and r2.dtype == pb.BOOL and r2.mode == pb.GLOBAL


def test_partial_record_and_chunks():
    data = bytes(range(256)) * 10
    parts = []
    head = _wire.record_head(b"big", 1, 8, (len(data),))
    n = _wire.record_parts(head, _wire.steps_field(1, 1), memoryview(data)[:1000], len(data), b"", parts)
    msg = parse(_wire.records_message(parts, n) + [_wire.seq_field(2)])
    r = msg.records.records[0]
    assert r.value_size == len(data) and r.data == data[:1000]
    c = parse(_wire.chunk_message(memoryview(data)[1000:]) + [_wire.seq_field(3)])
    assert c.WhichOneof("kind") == "chunk" and c.chunk.data == data[1000:] and c.seq == 3


def test_control_messages():
    o = parse(_wire.open_message("my-trial", "worker_0", 3) + _wire.seq_field(1))
    assert o.seq == 1 and o.open.trial == "my-trial" and o.open.worker == "worker_0" and o.open.num_workers == 3
    assert not o.open.resume
    r = parse(_wire.open_message("my-trial", "worker_0", 3, resume=True) + _wire.seq_field(1))
    assert r.open.resume and r.open.trial == "my-trial" and r.open.num_workers == 3
    e = parse(_wire.end_step_message(12345) + _wire.seq_field(5))
    assert e.WhichOneof("kind") == "end_step" and e.end_step.step == 12345
    f = parse(_wire.flush_message() + _wire.seq_field(6))
    assert f.WhichOneof("kind") == "flush"
    c = parse(_wire.close_message(True) + _wire.seq_field(7))
    assert c.WhichOneof("kind") == "close" and c.close.end_of_training
    c = parse(_wire.close_message(False) + _wire.seq_field(8))
    assert c.WhichOneof("kind") == "close" and not c.close.end_of_training
