"""An independent reader of TFRecord files and of the Event messages in them, for
the tests of export-tensorboard and export-smdebug: the framing, both CRCs
(CRC-32C computed here bit by bit from its definition) and a hand-written
protobuf decoder for the fields of TensorFlow's event.proto / summary.proto /
tensor.proto that tensorkeep writes. Nothing here uses tensorkeep's code."""

import struct
from typing import Dict, List, Optional, Tuple

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected
_TABLE = []
for _b in range(256):
    _c = _b
    for _ in range(8):
        _c = (_c >> 1) ^ _POLY if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for x in data:
        c = _TABLE[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    x = crc32c(data)
    return (((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF


SMDEBUG_PLACEHOLDER = masked(b"0x12345678")


class Corrupt(Exception):
    pass


def read_records(data: bytes, data_crc: str = "real") -> Tuple[List[Tuple[int, bytes]], Optional[int]]:
    """Returns ([(offset, payload)], truncated_at or None). data_crc: "real" (the
    payload's masked CRC-32C) or "smdebug" (smdebug's placeholder)."""
    out = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            return out, pos
        (n,) = struct.unpack_from("<Q", data, pos)
        (len_crc,) = struct.unpack_from("<I", data, pos + 8)
        if len_crc != masked(data[pos:pos + 8]):
            raise Corrupt(f"length CRC at {pos}")
        if pos + 12 + n + 4 > len(data):
            return out, pos
        payload = data[pos + 12:pos + 12 + n]
        (crc,) = struct.unpack_from("<I", data, pos + 12 + n)
        want = masked(payload) if data_crc == "real" else SMDEBUG_PLACEHOLDER
        if crc != want:
            raise Corrupt(f"data CRC at {pos}: {crc:#x} != {want:#x}")
        out.append((pos, payload))
        pos += 16 + n
    return out, None


# --- protobuf wire format -------------------------------------------------------


def _varint(b: bytes, i: int) -> Tuple[int, int]:
    shift = v = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << shift
        if not x & 0x80:
            return v, i
        shift += 7


def fields(b: bytes) -> List[Tuple[int, int, object]]:
    """[(field number, wire type, value)]: varint -> int, 64-bit/32-bit -> bytes,
    length-delimited -> bytes."""
    out = []
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wt}")
        out.append((num, wt, v))
    return out


def _doubles(v: bytes) -> List[float]:
    return list(struct.unpack(f"<{len(v) // 8}d", v))


def decode_histogram(b: bytes) -> Dict[str, object]:
    h: Dict[str, object] = {"min": 0.0, "max": 0.0, "num": 0.0, "sum": 0.0, "sum_squares": 0.0,
                            "bucket_limit": [], "bucket": []}
    names = {1: "min", 2: "max", 3: "num", 4: "sum", 5: "sum_squares"}
    for num, wt, v in fields(b):
        if num in names:
            h[names[num]] = struct.unpack("<d", v)[0]
        elif num == 6:
            h["bucket_limit"] += _doubles(v) if wt == 2 else [struct.unpack("<d", v)[0]]
        elif num == 7:
            h["bucket"] += _doubles(v) if wt == 2 else [struct.unpack("<d", v)[0]]
    return h


def decode_tensor(b: bytes) -> Dict[str, object]:
    t: Dict[str, object] = {"dtype": 0, "shape": [], "dim_names": [], "content": b""}
    for num, _, v in fields(b):
        if num == 1:
            t["dtype"] = v
        elif num == 2:
            for n2, _, dim in fields(v):
                if n2 == 2:
                    size, name = 0, ""
                    for n3, _, x in fields(dim):
                        if n3 == 1:
                            size = x
                        elif n3 == 2:
                            name = x.decode()
                    t["shape"].append(size)
                    t["dim_names"].append(name)
        elif num == 4:
            t["content"] = v
    return t


def decode_event(b: bytes) -> Dict[str, object]:
    """{"wall_time", "step", "file_version"?, "values": [{"tag", "simple_value"?,
    "histo"?, "tensor"?, "plugins": {name: content}}]}"""
    e: Dict[str, object] = {"wall_time": 0.0, "step": 0, "values": []}
    for num, _, v in fields(b):
        if num == 1:
            e["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2:
            e["step"] = v
        elif num == 3:
            e["file_version"] = v.decode()
        elif num == 5:
            for n2, _, val in fields(v):
                if n2 != 1:
                    continue
                d: Dict[str, object] = {"plugins": {}}
                for n3, _, x in fields(val):
                    if n3 == 1:
                        d["tag"] = x.decode()
                    elif n3 == 2:
                        d["simple_value"] = struct.unpack("<f", x)[0]
                    elif n3 == 5:
                        d["histo"] = decode_histogram(x)
                    elif n3 == 8:
                        d["tensor"] = decode_tensor(x)
                    elif n3 == 9:
                        for n4, _, pd in fields(x):
                            if n4 == 1:
                                p = dict((n5, y) for n5, _, y in fields(pd))
                                d["plugins"][p.get(1, b"").decode()] = p.get(2, b"").decode()
                e["values"].append(d)
    return e
