"""Conversion between Python/numpy values and the wire form of a tensor.

On the wire a value is a DType, a shape and its raw little-endian bytes in C
order. Ten dtypes are supported: float16/32/64, int8/16/32/64, uint8, bool and
bfloat16. numpy has no bfloat16: a torch.bfloat16 tensor (or an ml_dtypes
bfloat16 array) goes on the wire as its raw 16-bit patterns, and a bfloat16
value reads back as the float32 array it stands for (exactly).
"""

import numbers
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

# proto DType numbers (tensorkeep.v1.DType).
FLOAT16, FLOAT32, FLOAT64, INT8, INT16, INT32, INT64, UINT8, BOOL, BFLOAT16 = range(1, 11)

_PB_TO_NP: Dict[int, np.dtype] = {
    FLOAT16: np.dtype("<f2"),
    FLOAT32: np.dtype("<f4"),
    FLOAT64: np.dtype("<f8"),
    INT8: np.dtype("i1"),
    INT16: np.dtype("<i2"),
    INT32: np.dtype("<i4"),
    INT64: np.dtype("<i8"),
    UINT8: np.dtype("u1"),
    BOOL: np.dtype("?"),
}

# (kind, itemsize) -> proto DType; independent of byte order.
_KIND_TO_PB: Dict[Tuple[str, int], int] = {
    (dt.kind, dt.itemsize): code for code, dt in _PB_TO_NP.items()
}

# Fast path: dtypes whose bytes go on the wire as they are (little-endian or
# single-byte) straight to their code.
NATIVE_CODES: Dict[np.dtype, int] = {}
for _code, _dt in _PB_TO_NP.items():
    NATIVE_CODES[_dt] = _code
    if np.little_endian:
        NATIVE_CODES[_dt.newbyteorder("=")] = _code

SUPPORTED = "float16, float32, float64, int8, int16, int32, int64, uint8, bool, bfloat16 (torch)"


def numpy_dtype(code: int) -> np.dtype:
    """Returns the numpy dtype of a proto DType number (float32 for bfloat16,
    the type its values read back as)."""
    if code == BFLOAT16:
        return np.dtype("<f4")
    try:
        return _PB_TO_NP[code]
    except KeyError:
        raise ValueError(f"unknown dtype {code} on the wire") from None


def dtype_code(dtype: np.dtype, what: str = "value") -> int:
    """Returns the proto DType of a numpy dtype; TypeError if it is not supported."""
    code = NATIVE_CODES.get(dtype)
    if code is None:
        code = _KIND_TO_PB.get((dtype.kind, dtype.itemsize))
        if code is None or dtype.fields is not None or dtype.subdtype is not None:
            raise TypeError(f"{what} has unsupported dtype {dtype}: supported are {SUPPORTED}")
    return code


def as_array(value: Any, what: str = "value") -> np.ndarray:
    """Returns ``value`` as a numpy array of a supported dtype.

    Python floats become float32 and Python ints int64 (smdebug's choice for
    scalars); bools become bool; anything with ``__array__`` goes through
    ``numpy.asarray``. Raises TypeError for values that are not tensors.
    """
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):  # numpy scalars keep their dtype
        return np.asarray(value)
    if isinstance(value, bool):
        return np.asarray(value, dtype=np.bool_)
    if isinstance(value, numbers.Integral):
        try:
            return np.asarray(value, dtype=np.int64)
        except OverflowError:
            raise ValueError(f"{what} {value} does not fit in int64") from None
    if isinstance(value, float):
        return np.asarray(value, dtype=np.float32)
    if isinstance(value, (list, tuple)) or hasattr(value, "__array__"):
        arr = np.asarray(value)
        if arr.dtype == np.object_:
            raise TypeError(f"{what} cannot be converted to a numeric array")
        return arr
    raise TypeError(f"{what} must be a numpy array, a number or array-like, got {type(value).__name__}")


def _bfloat16_bits(value: Any) -> Optional[np.ndarray]:
    """The 16-bit patterns (a uint16 array of the same shape) of a torch.bfloat16
    tensor or an ml_dtypes bfloat16 array; None for anything else. Duck-typed,
    so that this module does not import torch."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return None
    if isinstance(value, np.ndarray):
        if dtype.name == "bfloat16" and dtype.itemsize == 2:
            return np.ascontiguousarray(value).view(np.uint16)
        return None
    if str(dtype) == "torch.bfloat16" and hasattr(value, "view"):
        import torch  # present: the value is a torch tensor

        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        return t.contiguous().view(torch.int16).numpy().view(np.uint16)
    return None


def to_wire(value: Any, what: str = "value") -> Tuple[int, Tuple[int, ...], bytes]:
    """Returns (proto DType, shape, little-endian C-order bytes) of ``value``."""
    bits = _bfloat16_bits(value)
    if bits is not None:
        return BFLOAT16, bits.shape, bits.astype("<u2", copy=False).tobytes()
    arr = as_array(value, what)
    code = dtype_code(arr.dtype, what)
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and np.little_endian is False):
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return code, arr.shape, arr.tobytes()


def from_wire(code: int, shape: Sequence[int], data: Any) -> np.ndarray:
    """Returns a new, writable array of dtype ``code`` and ``shape`` over a copy of ``data``.

    ``data`` is any buffer (bytes, bytearray, memoryview); a bytearray is used
    in place, not copied. Raises ValueError when its size does not match the shape.
    """
    if code == BFLOAT16:
        try:
            bits = np.frombuffer(data, dtype="<u2").reshape(shape)
        except ValueError:
            raise ValueError(
                f"corrupt value on the wire: {len(data)} bytes for shape {tuple(shape)} of bfloat16"
            ) from None
        # A bfloat16 is the top half of the float32 it stands for: exact.
        widened = np.empty(bits.shape, dtype="<u4")
        np.left_shift(bits, 16, out=widened, dtype="<u4")
        return widened.view("<f4")
    dt = _PB_TO_NP.get(code)
    if dt is None:
        raise ValueError(f"unknown dtype {code} on the wire")
    try:
        arr = np.frombuffer(data, dtype=dt).reshape(shape)
    except ValueError:
        raise ValueError(
            f"corrupt value on the wire: {len(data)} bytes for shape {tuple(shape)} of {dt}"
        ) from None
    return arr if isinstance(data, bytearray) else arr.copy()


def split_wire(code: int, shape: Sequence[int], data: Any, count: int) -> List[np.ndarray]:
    """Returns ``count`` new, independent, writable arrays of dtype ``code`` and
    ``shape`` from ``data``, which holds their bytes one value after another
    (a packed GetValues message).

    Raises ValueError when the size of ``data`` does not match.
    """
    shape = tuple(int(d) for d in shape)
    if count <= 0:
        return []
    if len(data) % count:
        raise ValueError(f"corrupt packed values on the wire: {len(data)} bytes for {count} values")
    size = len(data) // count
    dt = _PB_TO_NP.get(code)
    if dt is None:  # bfloat16 (widened to float32) or unknown: one value at a time
        view = memoryview(data)
        return [from_wire(code, shape, view[i * size : (i + 1) * size]) for i in range(count)]
    per = 1
    for d in shape:
        per *= d
    if per * dt.itemsize != size or min(shape, default=0) < 0:
        raise ValueError(f"corrupt value on the wire: {size} bytes for shape {shape} of {dt}")
    rows = np.frombuffer(data, dtype=dt).reshape((count,) + shape)
    if not shape:  # iterating gives numpy scalars: make 0-d arrays of them
        return [np.array(v) for v in rows]
    return [r.copy() for r in rows]  # each its own memory
