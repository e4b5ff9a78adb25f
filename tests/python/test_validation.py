"""Bad arguments raise ValueError/TypeError naming the problem, before anything is sent;
URL parsing; dtype conversion."""

import numpy as np
import pytest

from tensorkeep import Writer, _address, _dtypes, modes
from tensorkeep.trials import create_trial


# --- addresses ---------------------------------------------------------------


def test_parses_tensorkeep_urls():
    a = _address.parse("tensorkeep://127.0.0.1:7000/my-trial")
    assert (a.target, a.trial) == ("127.0.0.1:7000", "my-trial")
    assert a.url == "tensorkeep://127.0.0.1:7000/my-trial"
    a = _address.parse("tensorkeep://[::1]:7000/t.1_x-")
    assert (a.target, a.trial) == ("[::1]:7000", "t.1_x-")
    a = _address.parse("tensorkeep://collector-0.tk.svc:7000/run/")
    assert a.trial == "run"


def test_bare_trial_name_uses_the_environment(monkeypatch):
    monkeypatch.setenv("TENSORKEEP_SERVER", "localhost:1234")
    a = _address.parse("my-trial")
    assert (a.target, a.trial) == ("localhost:1234", "my-trial")
    a = _address.parse("tensorkeep:///my-trial")
    assert a.target == "localhost:1234"
    monkeypatch.delenv("TENSORKEEP_SERVER")
    with pytest.raises(ValueError, match="TENSORKEEP_SERVER"):
        _address.parse("my-trial")
    assert _address.parse("my-trial", server="h:1").target == "h:1"


@pytest.mark.parametrize(
    "path",
    [
        "tensorkeep://127.0.0.1:7000",
        "tensorkeep://127.0.0.1/t",
        "tensorkeep://127.0.0.1:99999/t",
        "tensorkeep://127.0.0.1:7000/a/b",
        "tensorkeep://127.0.0.1:7000/bad name",
        "tensorkeep://127.0.0.1:7000/" + "x" * 129,
        "s3://bucket/prefix",
        "tensorkeep://h:1/",
    ],
)
def test_rejects_bad_paths(path):
    with pytest.raises(ValueError):
        _address.parse(path)


def test_rejects_non_str_path():
    with pytest.raises(TypeError):
        _address.parse(42)


def test_create_trial_checks_range_steps():
    url = "tensorkeep://127.0.0.1:1/t"
    assert create_trial(url, range_steps=(100, None)).range_steps == (100, None)
    assert create_trial(url, range_steps=(None, 100)).range_steps == (None, 100)
    assert create_trial(url).name == "t"
    assert create_trial(url, name="resnet").name == "resnet"
    with pytest.raises(ValueError):
        create_trial(url, range_steps=(200, 100))
    with pytest.raises(ValueError):
        create_trial(url, range_steps=(-1, None))
    with pytest.raises(TypeError):
        create_trial(url, range_steps=5)


# --- dtypes ------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype", ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]
)
def test_every_supported_dtype_round_trips(dtype):
    a = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    code, shape, data = _dtypes.to_wire(a)
    b = _dtypes.from_wire(code, shape, data)
    assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b)
    assert b.flags.writeable


def test_non_contiguous_and_big_endian_arrays_are_sent_in_c_order_little_endian():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    code, shape, data = _dtypes.to_wire(a.T)
    assert shape == (4, 3) and data == np.ascontiguousarray(a.T).tobytes()
    big = np.arange(6, dtype=">i4").reshape(2, 3)
    code, shape, data = _dtypes.to_wire(big)
    assert data == np.arange(6, dtype="<i4").tobytes()
    assert _dtypes.from_wire(code, shape, data).dtype == np.int32


def test_scalars_follow_smdebug():
    assert _dtypes.to_wire(1.5)[0] == _dtypes.FLOAT32
    assert _dtypes.to_wire(3)[0] == _dtypes.INT64
    assert _dtypes.to_wire(True)[0] == _dtypes.BOOL
    assert _dtypes.to_wire(np.float64(2.0))[0] == _dtypes.FLOAT64
    assert _dtypes.to_wire(1.5)[1] == ()


@pytest.mark.parametrize("bad", [np.zeros(3, np.uint32), np.zeros(2, np.complex64), np.array(["a"]), object()])
def test_unsupported_values_raise_type_error(bad):
    with pytest.raises(TypeError):
        _dtypes.to_wire(bad)


def test_from_wire_rejects_a_size_mismatch():
    with pytest.raises(ValueError):
        _dtypes.from_wire(_dtypes.FLOAT32, (3,), b"\0" * 8)


# --- Writer arguments ------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        (dict(out_dir="tensorkeep://127.0.0.1:1/bad trial"), ValueError),
        (dict(out_dir="tensorkeep://127.0.0.1:1/t", worker=""), ValueError),
        (dict(out_dir="tensorkeep://127.0.0.1:1/t", worker="w 0"), ValueError),
        (dict(out_dir="tensorkeep://127.0.0.1:1/t", worker=3), TypeError),
        (dict(out_dir="tensorkeep://127.0.0.1:1/t", num_workers=0), ValueError),
        (dict(out_dir="tensorkeep://127.0.0.1:1/t", num_workers="2"), TypeError),
        (dict(out_dir="tensorkeep://127.0.0.1:1/t", max_queue_bytes=0), ValueError),
    ],
)
def test_writer_constructor_rejects_bad_arguments(kwargs, exc):
    with pytest.raises(exc):
        Writer(**kwargs)


@pytest.mark.parametrize(
    "args,kwargs,exc,match",
    [
        (("", np.zeros(1), 0), {}, ValueError, "empty"),
        (("a\nb", np.zeros(1), 0), {}, ValueError, "non-printable"),
        (("x" * 257, np.zeros(1), 0), {}, ValueError, "256"),
        ((5, np.zeros(1), 0), {}, TypeError, "tensor name"),
        (("x", np.zeros(1), -1), {}, ValueError, "step"),
        (("x", np.zeros(1), 1.5), {}, TypeError, "step"),
        (("x", np.zeros(1), True), {}, TypeError, "step"),
        (("x", np.zeros(1), 0), dict(mode=7), ValueError, "mode"),
        (("x", np.zeros(1), 0), dict(mode="training"), ValueError, "mode"),
        (("x", np.zeros(1), 0), dict(mode_step=-3), ValueError, "mode_step"),
        (("x", np.zeros(1, np.uint64), 0), {}, TypeError, "dtype"),
        (("x", "text", 0), {}, TypeError, "tensor 'x'"),
        (("x", None, 0), {}, ValueError, "no reductions"),
        (("x", None, 0), dict(reductions={("median", False): 1.0}), ValueError, "median"),
        (("x", None, 0), dict(reductions={"mean": 1.0}), TypeError, "reduction key"),
        (("x", None, 0), dict(reductions={("mean", False): "a"}), TypeError, "number"),
        (("x", np.zeros(1), 0), dict(collections=("",)), ValueError, "collection"),
        (("x", np.zeros(1), 0), dict(collections=(3,)), TypeError, "collection"),
    ],
)
def test_write_tensor_rejects_bad_arguments_before_sending(fake, args, kwargs, exc, match):
    w = Writer(fake.url("t"))
    with pytest.raises(exc, match=match):
        w.write_tensor(*args, **kwargs)
    w.close()
    assert fake.servicer.records == {}


def test_end_step_rejects_a_negative_step(fake):
    w = Writer(fake.url("t"))
    with pytest.raises(ValueError):
        w.end_step(-1)
    w.close()


def test_mode_accepts_names_and_numbers(fake):
    w = Writer(fake.url("t"))
    w.write_tensor("a", np.zeros(1), step=0, mode="eval")
    w.write_tensor("b", np.zeros(1), step=0, mode=3)
    w.write_tensor("c", np.zeros(1), step=0, mode=modes.GLOBAL)
    w.close()
    got = {k[2]: r.mode for k, r in fake.servicer.records.items()}
    assert got == {"a": 2, "b": 3, "c": 4}
