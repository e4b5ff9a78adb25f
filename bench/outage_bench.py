#!/usr/bin/python3
"""The longest a training step blocks during a collector outage, with the
agent's journal (max_stall_seconds) and without it (issue 13, point 3).

    PYTHONPATH=build/python /usr/bin/python3 bench/outage_bench.py [--bin-dir build/bin]
        [--outage 5] [--max-stall 0.5] [--step-ms 10]

Starts a collector (port 0, a temporary data directory) and trains with a
Python Writer (1 MiB queue; two 64 KiB tensors a step, one step every
--step-ms): 2 s with the collector up, then the collector is killed for
--outage seconds (training goes on; a step that blocks past the outage's
end counts in it), restarted on the same port and data
directory, 2 s more, and close(). Twice: ``journal`` (max_stall_seconds =
--max-stall) and ``no journal`` (max_stall_seconds = inf: a full queue
blocks the step until the collector is back, the behaviour before the
journal). Per run: the longest step with the collector up, during the outage
and after it, the bytes journaled, and that every step read back equal.
Prints a table and, as its last line, one JSON object.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import numpy as np


def val(name, step):
    return np.random.default_rng(hash((name, step)) % (1 << 32)).standard_normal(16 << 10).astype(np.float32)


class Collector:
    def __init__(self, binary, data_dir, log):
        self.binary, self.data_dir, self.log = binary, data_dir, log
        self.proc = None
        self.port = 0

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data_dir],
            stdout=subprocess.PIPE,
            stderr=self.log,
            stdin=subprocess.DEVNULL,
        )
        line = self.proc.stdout.readline().decode()
        m = re.match(r"listening on (\S+):(\d+)", line)
        if not m:
            raise RuntimeError(f"tensorkeep-server did not start: {line!r}")
        self.port = int(m.group(2))

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def run(bin_dir, outage, max_stall, step_s):
    from tensorkeep import Writer
    from tensorkeep.trials import create_trial

    with tempfile.TemporaryDirectory(prefix="tk-outage-") as tmp, open(os.path.join(tmp, "log"), "ab") as log:
        c = Collector(os.path.join(bin_dir, "tensorkeep-server"), tmp, log)
        c.start()
        url = f"tensorkeep://127.0.0.1:{c.port}/outage-{uuid.uuid4().hex[:8]}"
        w = Writer(url, max_queue_bytes=1 << 20, max_stall_seconds=max_stall, retry_timeout=120)
        phases = {"up": [], "outage": [], "after": []}
        step = 0

        def train(phase, seconds):
            nonlocal step
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                t = time.monotonic()
                for n in ("a", "b"):
                    w.write_tensor(n, val(n, step), step=step)
                w.end_step(step)
                phases[phase].append(time.monotonic() - t)
                step += 1
                time.sleep(step_s)

        train("up", 2)
        c.kill()
        # Restarted from another thread: without the journal, the training
        # thread is blocked until then.
        restarter = threading.Timer(outage, c.start)
        restarter.start()
        train("outage", outage)
        restarter.join()
        train("after", 2)
        w.close(end_of_training=True)
        t = create_trial(url)
        ok = all(
            sorted(t.tensor(n).steps()) == list(range(step))
            and all(np.array_equal(v, val(n, s)) for s, v in t.tensor(n).values().items())
            for n in ("a", "b")
        )
        t.close() if hasattr(t, "close") else None
        c.stop()
        return {
            "max_step_ms_up": round(max(phases["up"]) * 1e3, 1),
            "max_step_ms_outage": round(max(phases["outage"]) * 1e3, 1),
            "max_step_ms_after": round(max(phases["after"]) * 1e3, 1),
            "steps": step,
            "journaled_mib": round(w.journaled_bytes / (1 << 20), 1),
            "all_read_back_equal": ok,
        }


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(root, "build", "bin"))
    ap.add_argument("--outage", type=float, default=5)
    ap.add_argument("--max-stall", type=float, default=0.5)
    ap.add_argument("--step-ms", type=float, default=10)
    a = ap.parse_args()
    os.environ.setdefault("TENSORKEEP_AGENT", os.path.join(a.bin_dir, "tensorkeep-agent"))
    tmp = tempfile.mkdtemp(prefix="tk-outage-agent-")
    os.environ.setdefault("TENSORKEEP_AGENT_SOCKET", os.path.join(tmp, "agent.sock"))
    os.environ.setdefault("TENSORKEEP_AGENT_IDLE_EXIT_SECONDS", "2")
    out = {
        "outage_s": a.outage,
        "max_stall_s": a.max_stall,
        "journal": run(a.bin_dir, a.outage, a.max_stall, a.step_ms / 1e3),
        "no journal": run(a.bin_dir, a.outage, math.inf, a.step_ms / 1e3),
    }
    print(f"{'':12} {'max step up':>12} {'in outage':>10} {'after':>8} {'journaled':>10} read back")
    for k in ("journal", "no journal"):
        r = out[k]
        print(
            f"{k:12} {r['max_step_ms_up']:>9.1f} ms {r['max_step_ms_outage']:>7.1f} ms "
            f"{r['max_step_ms_after']:>5.1f} ms {r['journaled_mib']:>6.1f} MiB {r['all_read_back_equal']}"
        )
    print(json.dumps(out))
    return 0 if all(out[k]["all_read_back_equal"] for k in ("journal", "no journal")) else 1


if __name__ == "__main__":
    sys.exit(main())
