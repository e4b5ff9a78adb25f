#!/usr/bin/python3
"""The ``ui-series`` benchmark of tensorkeep-bench: what the web UI asks of the
collector's HTTP API (docs/http-api.md), against the same data fetched through
the Python client and computed with numpy, in the same run.

    PYTHONPATH=build/python /usr/bin/python3 bench/ui_bench.py \\
        --server 127.0.0.1:PORT --http 127.0.0.1:HTTP_PORT \\
        [--curve-steps 100000] [--dist-steps 1000] [--dist-elements 1000000]

1. curve: a scalar (a loss) over ``curve-steps`` steps; the page's request
   ``/scalars?tensor=loss&points=1000`` cold (first request: every step read)
   and warm (cached, as a live page re-asks), against the Python client's
   ``tensor.values()`` of the same steps (target: cold <= 1 s).
2. distributions: one tensor of ``dist-elements`` float32 over ``dist-steps``
   steps; ``/distributions?tensor=act&bins=30`` cold, against the Python client
   fetching every step's value and numpy computing the same percentiles and
   histograms. The default is the issue's size (1,000 steps of 1 M elements:
   4 GB written, and held by the Python client's baseline); tensorkeep-bench
   --quick passes far smaller sizes and scales the target to them.

Prints one JSON object of numbers as its last line (tensorkeep-bench parses it).
"""

import argparse
import json
import os
import sys
import time
import urllib.request
import uuid

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_agent_env  # noqa: E402,F401  (an agent of its own)
from quiet import settle  # noqa: E402


def get(http: str, path: str) -> dict:
    with urllib.request.urlopen(f"http://{http}{path}", timeout=600) as r:
        return json.loads(r.read())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--http", required=True)
    ap.add_argument("--curve-steps", type=int, default=100_000)
    ap.add_argument("--dist-steps", type=int, default=1000)
    ap.add_argument("--dist-elements", type=int, default=1_000_000)
    ap.add_argument("--settle", type=float, default=20.0, help="seconds to wait at most for a quiet machine")
    ap.add_argument("--no-python", action="store_true", help="skip the comparison with the Python client")
    args = ap.parse_args()
    if not (0 < args.curve_steps <= 1_000_000 and 0 < args.dist_steps <= 10_000 and 0 < args.dist_elements <= 10_000_000):
        ap.error("sizes out of range")

    from tensorkeep import Writer, modes
    from tensorkeep.trials import create_trial

    out = {}
    # 1. The curve.
    trial = f"bench-ui-curve-{uuid.uuid4().hex[:8]}"
    url = f"tensorkeep://{args.server}/{trial}"
    w = Writer(url)
    losses = (2.0 / (1.0 + np.arange(args.curve_steps))).astype(np.float32)
    losses[args.curve_steps // 3] = 50.0  # a spike the envelope must keep
    for step in range(args.curve_steps):
        w.write_tensor("loss", losses[step], step=step, mode=modes.TRAIN)
    w.close(end_of_training=True)
    settle(args.settle)
    t0 = time.perf_counter()
    r = get(args.http, f"/api/v1/trials/{trial}/scalars?tensor=loss&points=1000")
    out["curve_cold_s"] = time.perf_counter() - t0
    [series] = r["series"]
    assert series["total_steps"] == args.curve_steps, series["total_steps"]
    assert max(series["max"]) == 50.0, "the envelope lost the spike"
    t0 = time.perf_counter()
    get(args.http, f"/api/v1/trials/{trial}/scalars?tensor=loss&points=1000")
    out["curve_warm_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    values = create_trial(url).tensor("loss").values()
    out["curve_python_s"] = time.perf_counter() - t0
    assert len(values) == args.curve_steps
    out["curve_steps"] = args.curve_steps

    # 2. Distributions.
    trial = f"bench-ui-dist-{uuid.uuid4().hex[:8]}"
    url = f"tensorkeep://{args.server}/{trial}"
    w = Writer(url)
    rng = np.random.default_rng(0)
    base = rng.standard_normal(args.dist_elements, dtype=np.float32)
    for step in range(args.dist_steps):
        w.write_tensor("act", base * (1 + step / args.dist_steps), step=step, mode=modes.TRAIN)
    w.close(end_of_training=True)
    settle(args.settle)
    t0 = time.perf_counter()
    r = get(args.http, f"/api/v1/trials/{trial}/distributions?tensor=act&bins=30&points=1000")
    out["dist_cold_s"] = time.perf_counter() - t0
    assert r["total_steps"] == args.dist_steps
    t0 = time.perf_counter()
    get(args.http, f"/api/v1/trials/{trial}/distributions?tensor=act&bins=30&points=1000")
    out["dist_warm_s"] = time.perf_counter() - t0
    out["dist_steps"] = args.dist_steps
    out["dist_elements"] = args.dist_elements
    if args.no_python:
        print(json.dumps(out))
        return 0
    # The same through the Python client: every value, numpy's percentiles and
    # histograms on the shared range.
    t0 = time.perf_counter()
    tensor = create_trial(url).tensor("act")
    fetched = tensor.values()  # every step's value, read once
    lo, hi, per_step = np.inf, -np.inf, []
    for v in fetched.values():
        per_step.append(np.percentile(v, [0, 6.68, 15.87, 30.85, 50, 69.15, 84.13, 93.32, 100]))
        lo, hi = min(lo, float(v.min())), max(hi, float(v.max()))
    for v in fetched.values():
        np.histogram(v, bins=30, range=(lo, hi))
    del fetched
    out["dist_python_s"] = time.perf_counter() - t0
    np.testing.assert_allclose(r["bands"][0][0], per_step[0][0])
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
