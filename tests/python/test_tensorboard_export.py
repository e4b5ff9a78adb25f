"""export-tensorboard against a real collector, read back with an independent
reader (tfrecord_reader.py: TFRecord framing, both masked CRC-32Cs computed in
Python from the definition, Event/Summary/HistogramProto decoded by hand):
every scalar, reduction and histogram is checked against what was pushed; a
file cut mid-record reads as its whole records and a clean truncated end;
--follow writes steps as they complete and stops cleanly on SIGINT or at the
trial's end. TensorBoard's own loader is used too when installed."""

import os
import select
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import server_binary
from tensorkeep import Writer
import tfrecord_reader as tfr


def _cli_path():
    return os.path.join(os.path.dirname(server_binary()), "tensorkeep")


def _cli(server, *args):
    r = subprocess.run([_cli_path(), "--server", server.address, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"tensorkeep {' '.join(args)}: {r.stderr}"
    return r


def _read_run(run_dir):
    """(events of the run's single event file, truncated_at)."""
    files = [f for f in os.listdir(run_dir) if f.startswith("events.out.tfevents.")]
    assert len(files) == 1, files
    data = open(os.path.join(run_dir, files[0]), "rb").read()
    recs, cut = tfr.read_records(data, "real")
    return [tfr.decode_event(p) for _, p in recs], cut, os.path.join(run_dir, files[0])


def _by_tag(events):
    out = {}
    for e in events:
        for v in e["values"]:
            out[(v["tag"], e["step"])] = v
    return out


def _data(worker_index, step):
    rng = np.random.default_rng(100 * worker_index + step)
    return {
        "loss": np.float64(rng.normal()),
        "weights/w": rng.normal(size=(4, 5)).astype(np.float32),
        "labels": rng.integers(0, 10, size=7).astype(np.int64),
    }


def _push(trial_url, workers=2, steps=3, end=True):
    writers = [Writer(trial_url, worker=f"worker_{i}", num_workers=workers) for i in range(workers)]
    for step in range(steps):
        for i, w in enumerate(writers):
            for name, value in _data(i, step).items():
                w.write_tensor(name, value, step=step)
            # A gradient saved as reductions only.
            w.write_tensor("gradient/w", None, step=step, reductions={("mean", True): 0.25 * step + i, ("max", False): 1.5})
            w.end_step(step)
    for w in writers:
        w.close(end_of_training=end)


def _check_histogram(h, values):
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    assert h["min"] == x.min() and h["max"] == x.max() and h["num"] == x.size
    assert h["sum"] == pytest.approx(x.sum(), rel=1e-12, abs=1e-12)
    assert h["sum_squares"] == pytest.approx((x * x).sum(), rel=1e-12)
    counts, edges = np.histogram(x, bins=30)
    assert h["bucket"] == counts.astype(float).tolist()
    assert h["bucket_limit"] == pytest.approx(edges[1:].tolist(), rel=1e-12, abs=1e-15)
    assert sum(h["bucket"]) == x.size


def test_export_writes_every_value(server, trial_url, trial_name, tmp_path):
    _push(trial_url)
    out = tmp_path / "tb"
    r = _cli(server, "export-tensorboard", trial_name, str(out), "--reductions", "mean,abs_max,l2")
    assert "exported 3 steps" in r.stdout and "2 runs" in r.stdout, r.stdout
    assert sorted(os.listdir(out)) == ["worker_0", "worker_1"]
    for i in range(2):
        events, cut, _ = _read_run(out / f"worker_{i}")
        assert cut is None
        assert events[0]["file_version"] == "brain.Event:2"
        got = _by_tag(events[1:])
        for step in range(3):
            d = _data(i, step)
            assert got[("loss", step)]["simple_value"] == np.float32(d["loss"])
            for name in ("weights/w", "labels"):
                x = d[name].astype(np.float64).reshape(-1)
                assert got[(f"{name}/mean", step)]["simple_value"] == np.float32(x.mean())
                assert got[(f"{name}/abs_max", step)]["simple_value"] == np.float32(np.abs(x).max())
                assert got[(f"{name}/l2", step)]["simple_value"] == pytest.approx(np.float32(np.sqrt((x * x).sum())), rel=1e-6)
                _check_histogram(got[(name, step)]["histo"], d[name])
            assert got[("gradient/w/abs_mean", step)]["simple_value"] == np.float32(0.25 * step + i)
            assert got[("gradient/w/max", step)]["simple_value"] == np.float32(1.5)
        # Nothing else: 1 loss + 2 x (3 reductions + 1 histogram) + 2 saved reductions a step.
        assert len(got) == 3 * (1 + 2 * 4 + 2)
        assert all(e["step"] in range(3) for e in events[1:])


def test_a_file_cut_mid_record_reads_as_a_clean_truncated_end(server, trial_url, trial_name, tmp_path):
    _push(trial_url, workers=1, steps=2)
    out = tmp_path / "tb"
    _cli(server, "export-tensorboard", trial_name, str(out))
    events, _, path = _read_run(out / "worker_0")
    data = open(path, "rb").read()
    recs, _ = tfr.read_records(data, "real")
    for cut_at in (recs[-1][0] + 5, recs[-1][0] + 13, len(data) - 1):  # in the header, data, footer
        with open(path, "wb") as f:
            f.write(data[:cut_at])
        got, truncated = tfr.read_records(open(path, "rb").read(), "real")
        assert truncated == recs[-1][0]
        assert [p for _, p in got] == [p for _, p in recs[:-1]]
    # A flipped bit is corruption, not a truncation.
    bad = bytearray(data)
    bad[recs[1][0] + 14] ^= 1
    with pytest.raises(tfr.Corrupt):
        tfr.read_records(bytes(bad), "real")


def _read_line(stream, deadline):
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            return stream.readline()
    raise AssertionError("no output from export-tensorboard --follow in time")


def _wait_for(proc, text, timeout=60):
    deadline = time.monotonic() + timeout
    lines = []
    while True:
        line = _read_line(proc.stdout, deadline)
        assert line, f"export-tensorboard exited early: {lines} {proc.stderr.read()}"
        lines.append(line)
        if text in line:
            return lines


def test_follow_writes_steps_as_they_complete_and_stops_on_sigint(server, trial_url, trial_name, tmp_path):
    out = tmp_path / "tb"
    w = Writer(trial_url, worker="worker_0", num_workers=1)
    w.write_tensor("loss", np.float64(0.5), step=0)
    w.end_step(0)
    w.flush()
    proc = subprocess.Popen([_cli_path(), "--server", server.address, "export-tensorboard", trial_name, str(out), "--follow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(proc, "step 0 exported")
        w.write_tensor("loss", np.float64(0.25), step=1)
        w.end_step(1)
        w.flush()
        _wait_for(proc, "step 1 exported")
        events, cut, _ = _read_run(out / "worker_0")
        assert cut is None
        assert [(e["step"], e["values"][0]["simple_value"]) for e in events[1:]] == [(0, 0.5), (1, 0.25)]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, proc.stderr.read()
        assert "interrupted: exported 2 steps" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        w.close(end_of_training=True)
    events, cut, _ = _read_run(out / "worker_0")
    assert cut is None and len(events) == 3


def test_follow_exits_when_the_trial_ends(server, trial_url, trial_name, tmp_path):
    out = tmp_path / "tb"
    proc = subprocess.Popen([_cli_path(), "--server", server.address, "export-tensorboard", trial_name, str(out), "--follow"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The trial does not exist yet: the exporter says so and waits for it.
        line = _read_line(proc.stderr, time.monotonic() + 60)
        assert "waiting for trial" in line, line
        _push(trial_url, workers=2, steps=2, end=True)
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        assert "exported 2 steps" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for i in range(2):
        events, cut, _ = _read_run(out / f"worker_{i}")
        assert cut is None
        assert {(v["tag"], e["step"]) for e in events[1:] for v in e["values"]} >= {("loss", 0), ("loss", 1)}


def test_tensorboards_own_loader_reads_the_export(server, trial_url, trial_name, tmp_path):
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        why = "TensorBoard is not installed (Debian 12 has no python3-tensorboard)"
        print(f"SKIP reason: {why}")
        pytest.skip(why)
    _push(trial_url, workers=1, steps=2)
    out = tmp_path / "tb"
    _cli(server, "export-tensorboard", trial_name, str(out))
    acc = event_accumulator.EventAccumulator(str(out / "worker_0"))
    acc.Reload()
    assert [s.value for s in acc.Scalars("loss")] == pytest.approx([float(np.float32(_data(0, s)["loss"])) for s in range(2)])
    assert len(acc.Histograms("weights/w")) == 2
