"""The demo, end to end: examples/pytorch_bad_init.py against a real collector.

It trains a badly initialised MLP while the rule worker (tensorkeep-rules) runs
VanishingGradient with the stop action; the rule must fire and the script must
stop itself through hook.should_stop(), then train a well initialised run and
save the comparison PNG, all well within the time limit, exiting 0.
"""

import os
import re
import pathlib
import subprocess
import sys
import time

import pytest

from conftest import server_binary

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "pytorch_bad_init.py"
TIMEOUT = 120  # seconds; the demo itself takes well under a minute on 2 cores


def _rules_binary() -> pathlib.Path:
    return (pathlib.Path(os.environ.get("TK_BIN_DIR", str(ROOT / "build" / "bin"))) / "tensorkeep-rules").resolve()


def test_demo_stops_the_bad_run_and_plots(server, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    rules = _rules_binary()
    if not os.access(rules, os.X_OK):
        pytest.skip(f"the rule worker is not built ({rules}); the demo needs it to stop the run")
    out = tmp_path / "out"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--server", server.address, "--rule-worker", str(rules), "--out-dir", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=tmp_path,
    )
    elapsed = time.monotonic() - t0
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout
    assert "The rule fired: VanishingGradient found an issue" in proc.stdout
    assert "the training loop stopped itself" in proc.stdout
    png = out / "gradients_comparison.png"
    assert png.exists() and png.stat().st_size > 10_000
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert elapsed < 60, f"the demo took {elapsed:.1f} s"


def test_demo_starts_its_own_collector(tmp_path):
    """Without --server, the demo starts build/bin/tensorkeep-server itself."""
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    binary = server_binary()
    rules = _rules_binary()
    if binary is None:
        pytest.skip("tensorkeep-server is not built")
    binary = os.path.abspath(binary)
    if not os.access(rules, os.X_OK):
        pytest.skip(f"the rule worker is not built ({rules}); the demo needs it to stop the run")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--server-binary", binary, "--rule-worker", str(rules), "--out-dir", str(tmp_path / "o")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout
    assert "Started a collector (tensorkeep-server)" in proc.stdout
    assert (tmp_path / "o" / "gradients_comparison.png").exists()
    # It ends with the web UI's address and both trials in it; without a
    # terminal (here) it does not wait for Ctrl-C.
    ui = re.search(r"both trials on one plot: (http://127\.0\.0\.1:\d+/compare\?trials=bad-init-\S+,good-init-\S+)", proc.stdout)
    assert ui, proc.stdout
    assert "press Ctrl-C" not in proc.stdout


def test_demo_falls_back_to_an_in_process_rule(server, tmp_path):
    """Without the rule-worker binary the demo runs the same rule through
    tensorkeep.rules, which reports to the collector like the binary does."""
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--server", server.address, "--rule-worker", str(tmp_path / "no-such-binary"),
         "--out-dir", str(tmp_path / "o"), "--good-steps", "100"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=tmp_path,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout
    assert "running VanishingGradient in-process with tensorkeep.rules" in proc.stdout
    assert "The rule fired: VanishingGradient found an issue" in proc.stdout
    assert "VanishingGradient on this trial: NoIssuesFound" in proc.stdout
    assert (tmp_path / "o" / "gradients_comparison.png").exists()
