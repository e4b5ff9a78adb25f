"""Hand-rolled encoding of the Push stream's messages (tensorkeep.v1.PushRequest).

Why by hand: building one TensorRecord through the protobuf API and copying it
into a RecordBatch costs ~23 us a record here (measured: 10,000 records of 4 KB
take 0.23 s), which alone would exceed the budget of issue 4 (the whole 40 MB
push in 0.25 s). Encoding is simple for these few messages: each record is a
list of byte strings (a cached header per tensor, the step numbers, the raw
data, a cached tail) joined once per PushRequest. tests/python/test_wire.py
checks every message against the generated protobuf classes.

Field order on the wire does not matter to a protobuf parser; ``seq`` is put
last so a message can be re-stamped with a new sequence number on a new stream
by replacing its tail.
"""

import struct
from typing import Iterable, List, Mapping, Sequence, Tuple

# Wire tags: (field number << 3) | wire type.
_TAG = lambda field, wt: bytes([(field << 3) | wt])  # noqa: E731  (all fields < 16)

# PushRequest
_SEQ = _TAG(1, 0)
_OPEN = _TAG(2, 2)
_RECORDS = _TAG(3, 2)
_CHUNK = _TAG(4, 2)
_END_STEP = _TAG(5, 2)
_FLUSH = _TAG(6, 2)
_CLOSE = _TAG(7, 2)
# TensorRecord
_R_NAME, _R_STEP, _R_MODE, _R_MODE_STEP = _TAG(1, 2), _TAG(2, 0), _TAG(3, 0), _TAG(4, 0)
_R_DTYPE, _R_SHAPE, _R_DATA, _R_VALUE_SIZE = _TAG(5, 0), _TAG(6, 2), _TAG(7, 2), _TAG(8, 0)
_R_HAS_VALUE, _R_REDUCTIONS, _R_COLLECTIONS = _TAG(9, 0), _TAG(10, 2), _TAG(11, 2)
# RecordBatch, Chunk
_B_RECORD = _TAG(1, 2)
_C_DATA = _TAG(1, 2)
# Open
_O_TRIAL, _O_WORKER, _O_NUM_WORKERS, _O_RESUME = _TAG(1, 2), _TAG(2, 2), _TAG(3, 0), _TAG(4, 0)
# Reduction
_D_NAME, _D_ABS, _D_VALUE = _TAG(1, 2), _TAG(2, 0), _TAG(3, 1)

_SMALL = [bytes([i]) for i in range(128)]
_DOUBLE = struct.Struct("<d")


def varint(n: int) -> bytes:
    """The base-128 varint encoding of a non-negative integer (< 2**64)."""
    if n < 128:
        return _SMALL[n]
    if n < 16384:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def record_head(name: bytes, mode: int, dtype: int, shape: Sequence[int]) -> bytes:
    """The constant fields of a tensor's records: name, mode, dtype, shape."""
    out = _field(_R_NAME, name) + _R_MODE + varint(mode)
    if dtype:
        out += _R_DTYPE + varint(dtype)
    if shape:
        out += _field(_R_SHAPE, b"".join(varint(d) for d in shape))
    return out


def record_tail(
    has_value: bool,
    reductions: Iterable[Tuple[str, bool, float]] = (),
    collections: Iterable[bytes] = (),
) -> bytes:
    """The trailing fields of a record: has_value, reductions, collections."""
    parts = [_R_HAS_VALUE + b"\x01"] if has_value else []
    for rname, rabs, rvalue in reductions:
        body = _field(_D_NAME, rname.encode()) + (_D_ABS + b"\x01" if rabs else b"")
        body += _D_VALUE + _DOUBLE.pack(rvalue)
        parts.append(_field(_R_REDUCTIONS, body))
    for c in collections:
        parts.append(_field(_R_COLLECTIONS, c))
    return b"".join(parts)


def steps_field(step: int, mode_step: int) -> bytes:
    """The step and mode_step fields of a record."""
    return _R_STEP + varint(step) + _R_MODE_STEP + varint(mode_step)


def record_parts(
    head: bytes, steps: bytes, data: bytes, value_size: int, tail: bytes, out: List[bytes]
) -> int:
    """Appends one RecordBatch.records entry to ``out``; returns the bytes appended.

    ``data`` is the whole value or, for a record continued by Chunk messages,
    its first bytes; ``value_size`` is the size of the whole value.
    """
    if data:
        dhead = _R_DATA + varint(len(data))
        vs = _R_VALUE_SIZE + varint(value_size)
        n = len(head) + len(steps) + len(dhead) + len(data) + len(vs) + len(tail)
        lead = _B_RECORD + varint(n)
        out += (lead, head, steps, dhead, data, vs, tail)
    else:
        vs = _R_VALUE_SIZE + varint(value_size) if value_size else b""
        n = len(head) + len(steps) + len(vs) + len(tail)
        lead = _B_RECORD + varint(n)
        out += (lead, head, steps, vs, tail)
    return len(lead) + n


def records_message(batch_parts: List[bytes], batch_len: int) -> List[bytes]:
    """The parts of a PushRequest (without seq) carrying a RecordBatch."""
    return [_RECORDS, varint(batch_len)] + batch_parts


def chunk_message(data: bytes) -> List[bytes]:
    """The parts of a PushRequest (without seq) carrying a Chunk."""
    inner = _C_DATA + varint(len(data))
    return [_CHUNK, varint(len(inner) + len(data)), inner, data]


def open_message(trial: str, worker: str, num_workers: int, resume: bool = False) -> bytes:
    """A PushRequest (without seq) carrying Open (``resume``: a reconnecting writer's)."""
    body = _field(_O_TRIAL, trial.encode()) + _field(_O_WORKER, worker.encode())
    body += _O_NUM_WORKERS + varint(num_workers)
    if resume:
        body += _O_RESUME + varint(1)
    return _field(_OPEN, body)


def end_step_message(step: int) -> bytes:
    """A PushRequest (without seq) carrying EndStep."""
    return _field(_END_STEP, _TAG(1, 0) + varint(step))


def flush_message() -> bytes:
    """A PushRequest (without seq) carrying Flush."""
    return _FLUSH + b"\x00"


def close_message(end_of_training: bool) -> bytes:
    """A PushRequest (without seq) carrying Close."""
    return _field(_CLOSE, _TAG(1, 0) + b"\x01" if end_of_training else b"")


def seq_field(seq: int) -> bytes:
    """The seq field, appended last to a PushRequest."""
    return _SEQ + varint(seq)


def reductions_items(reductions: Mapping) -> List[Tuple[str, bool, float]]:
    """(name, abs, value) triples of a ``{(name, abs): value}`` mapping, sorted."""
    return sorted((str(k[0]), bool(k[1]), float(v)) for k, v in reductions.items())
