#!/usr/bin/python3
"""tensorkeep demo: a rule catches a badly initialised network live and stops it.

The story of SageMaker Debugger's "tensor analysis" example, on synthetic data:

1. A small MLP (784-128-64-10) is trained on synthetic data (random inputs, labels
   from a fixed random linear "teacher") with a poor initialisation: every weight
   drawn from N(0, 1e-4). Its gradients vanish. The tensorkeep PyTorch hook
   (smdebug's API) streams weights, biases, gradients and the loss to a collector
   while a rule worker watches the trial live with the VanishingGradient rule and
   the "stop" action. When the rule fires, the collector raises the trial's stop
   request, ``hook.should_stop()`` turns True and the training loop stops itself.
2. The same network, well initialised (PyTorch's default), is trained again as a
   second trial under the same rule, which finds no issue.
3. The gradient distributions of the two trials are compared through the
   analysis API (``create_trial``, ``Tensor.reduction_value``, ``Tensor.value``)
   and saved as a PNG.

Run it with Debian's Python (torch, numpy, matplotlib and grpcio come from
Debian's packages)::

    /usr/bin/python3 examples/pytorch_bad_init.py [--server HOST:PORT]
        [--rule-worker build/bin/tensorkeep-rules] [--out-dir ./tensorkeep-demo-output]

Without ``--server`` it starts ``build/bin/tensorkeep-server`` on a free port
with a temporary data directory, and stops it at the end. Without the rule-worker
binary it runs the same rule in-process with ``tensorkeep.rules`` and reports
its status to the collector the way the rule worker does.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
RULE = "VanishingGradient"
THRESHOLD = 1e-7  # the rule's documented default


def say(msg: str = "") -> None:
    print(msg, flush=True)


def import_tensorkeep() -> None:
    """Makes ``import tensorkeep`` work from a build tree when it is not installed."""
    try:
        import tensorkeep  # noqa: F401

        if hasattr(tensorkeep, "Writer"):
            return
    except ImportError:
        pass
    for p in (ROOT / "build" / "python",):
        if (p / "tensorkeep").is_dir():
            sys.path.insert(0, str(p))
            for name in [m for m in sys.modules if m == "tensorkeep" or m.startswith("tensorkeep.")]:
                del sys.modules[name]
            return


# ---------------------------------------------------------------------------
# The collector
# ---------------------------------------------------------------------------
class Collector:
    """An existing collector (``--server``) or a tensorkeep-server started here."""

    def __init__(self, server: Optional[str], binary: pathlib.Path, data_dir: Optional[str] = None):
        self.address = server
        self.binary = binary
        self.proc: Optional[subprocess.Popen] = None
        self.data_dir: Optional[str] = data_dir
        self.keep_data = data_dir is not None
        # HOST:PORT of the web UI (--http-listen) of a collector started here.
        self.http_address: Optional[str] = None

    def __enter__(self) -> "Collector":
        if self.address:
            say(f"Using the collector at {self.address}.")
            return self
        if not self.binary.exists():
            raise SystemExit(
                f"error: {self.binary} does not exist: build the project first "
                "(cmake -S . -B build && cmake --build build) or pass --server HOST:PORT"
            )
        if self.data_dir is None:
            self.data_dir = tempfile.mkdtemp(prefix="tensorkeep-demo-")
        line, errors = self._start()
        if (not line.startswith("listening on ") and self.keep_data
                and ("older tensorkeep" in errors or "storage format" in errors)):
            # The demo's own directory, from a tensorkeep of another storage
            # format: keep it, aside, and start afresh.
            aside = f"{self.data_dir}.old-{int(time.time())}"
            os.rename(self.data_dir, aside)
            say(f"{self.data_dir} holds another storage format: moved it to {aside}.")
            line, errors = self._start()
        if not line.startswith("listening on "):
            raise SystemExit(f"error: tensorkeep-server did not start: {errors.strip() or repr(line)}")
        self.address = line[len("listening on "):]
        assert self.proc is not None and self.proc.stdout is not None
        second = self.proc.stdout.readline().strip()
        if second.startswith("http listening on "):
            self.http_address = second[len("http listening on "):]
        say(f"Started a collector (tensorkeep-server) at {self.address}, data in {self.data_dir}"
            + (f", web UI at http://{self.http_address}/" if self.http_address else "") + ".")
        return self

    def wait(self) -> None:
        """Until the collector started here exits (or Ctrl-C)."""
        if self.proc is not None:
            self.proc.wait()

    def _start(self) -> Tuple[str, str]:
        """Starts the server; returns its first line and, if it exited, what it said on stderr."""
        assert self.data_dir is not None
        log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [str(self.binary), "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
             "--data-dir", self.data_dir, "--log-level", "warn"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line.startswith("listening on "):
            return line, ""
        self.proc.kill()
        self.proc.wait()
        self.proc = None
        log.seek(0)
        return line, log.read()

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.data_dir and not self.keep_data:
            shutil.rmtree(self.data_dir, ignore_errors=True)


# ---------------------------------------------------------------------------
# The rule worker
# ---------------------------------------------------------------------------
class RuleWorker:
    """VanishingGradient with the "stop" action, watching one trial live.

    The C++ rule worker (``tensorkeep-rules``) when it exists, else the same rule
    in a thread of this process through ``tensorkeep.rules``; both report their
    status to the collector, which raises the trial's stop request when the rule
    finds an issue.
    """

    def __init__(self, binary: pathlib.Path, server: str, trial: str):
        self.binary, self.server, self.trial = binary, server, trial
        self.proc: Optional[subprocess.Popen] = None
        self.thread: Optional[threading.Thread] = None
        self.output: List[str] = []
        self.error: Optional[BaseException] = None
        self.kind = "rule worker"

    def start(self) -> None:
        if self.binary.exists():
            self.kind = f"rule worker ({self.binary.name})"
            cmd = [str(self.binary), "--server", self.server, "--trial", self.trial, "--rule", RULE, "--action", "stop"]
            say("  $ " + " ".join([self.binary.name] + cmd[1:]))
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.thread = threading.Thread(target=self._pump, daemon=True)
        else:
            self.kind = "in-process rule (tensorkeep.rules)"
            say(f"  ({self.binary} is not built: running {RULE} in-process with tensorkeep.rules)")
            self.thread = threading.Thread(target=self._run_in_process, daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line.rstrip())

    def _run_in_process(self) -> None:
        from tensorkeep.exceptions import RuleEvaluationConditionMet
        from tensorkeep.rules import Rule, invoke_rule
        from tensorkeep.trials import create_trial

        class VanishingGradient(Rule):
            """Fires when the mean of absolute values of a gradient is below threshold."""

            def __init__(self, base_trial: Any, threshold: str = str(THRESHOLD), **kw: Any):
                super().__init__(base_trial, **kw)
                self.threshold = float(threshold)
                self.found: Optional[Tuple[str, int, float]] = None

            def invoke_at_step(self, step: int) -> bool:
                for tname in self.base_trial.tensor_names(collection="gradients"):
                    v = self.base_trial.tensor(tname).reduction_value(step, "mean", abs=True)
                    if v < self.threshold:
                        self.found = (tname, step, v)
                        return True
                return False

        try:
            trial = create_trial(f"tensorkeep://{self.server}/{self.trial}")
            # report_to_collector: statuses go to the collector as the C++ rule worker's
            # do; with action "stop", IssuesFound raises the trial's stop request.
            rule = VanishingGradient(trial, name=RULE, report_to_collector=True, action="stop")
            try:
                invoke_rule(rule, raise_eval_cond=True)
            except RuleEvaluationConditionMet:
                if rule.found is not None:
                    tname, step, v = rule.found
                    trial.report_rule_status(
                        RULE, "IssuesFound", step=step, action="stop", last_evaluated_step=step,
                        message=f"mean(|{tname}|) = {v:.3g} < threshold {THRESHOLD:g}",
                    )
        except BaseException as e:  # noqa: BLE001 - shown in the narrative
            self.error = e

    def wait(self, timeout: float) -> Optional[int]:
        """Waits for the rule worker to finish; returns its exit code (0 in-process)."""
        if self.proc is not None:
            try:
                rc = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                return None
            if self.thread:
                self.thread.join(timeout=2)
            return rc
        assert self.thread is not None
        self.thread.join(timeout)
        return None if self.thread.is_alive() else (1 if self.error else 0)


# ---------------------------------------------------------------------------
# The model, the data and the training loop
# ---------------------------------------------------------------------------
def make_data(torch: Any, n: int = 4096, seed: int = 1234) -> Tuple[Any, Any]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 784, generator=g)
    teacher = torch.randn(784, 10, generator=g)
    y = (x @ teacher).argmax(dim=1)
    return x, y


def make_net(torch: Any, bad_init: bool) -> Any:
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(784, 128)
            self.relu1 = nn.ReLU()
            self.fc2 = nn.Linear(128, 64)
            self.relu2 = nn.ReLU()
            self.fc3 = nn.Linear(64, 10)

        def forward(self, x: Any) -> Any:
            return self.fc3(self.relu2(self.fc2(self.relu1(self.fc1(x)))))

    torch.manual_seed(0)
    net = Net()
    if bad_init:
        for name, p in net.named_parameters():
            if name.endswith("weight"):
                nn.init.normal_(p, mean=0.0, std=1e-4)
            else:
                nn.init.zeros_(p)
    return net


def train(torch: Any, url: str, bad_init: bool, max_steps: int, save_interval: int, batch: int = 64) -> Dict[str, Any]:
    import tensorkeep.pytorch as tkp
    from tensorkeep import modes

    x, y = make_data(torch)
    net = make_net(torch, bad_init)
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)

    # --- the three lines smdebug asks of a training script ---
    hook = tkp.Hook(
        out_dir=url,
        save_config=tkp.SaveConfig(save_interval=save_interval),
        include_collections=["weights", "biases", "gradients", "losses"],
    )
    hook.register_module(net)
    hook.register_loss(loss_fn)

    hook.set_mode(modes.TRAIN)
    n = x.shape[0]
    stopped_at: Optional[int] = None
    loss_v = float("nan")
    t0 = time.monotonic()
    step = 0
    for step in range(max_steps):
        i = (step * batch) % n
        xb, yb = x[i:i + batch], y[i:i + batch]
        opt.zero_grad()
        loss = loss_fn(net(xb), yb)
        loss.backward()
        opt.step()
        loss_v = loss.item()
        if step % 100 == 0:
            say(f"    step {step:4d}  loss {loss_v:.4f}")
        if hook.should_stop():
            stopped_at = step
            break
    steps_run = step + 1
    result: Dict[str, Any] = dict(steps=steps_run, stopped_at=stopped_at, loss=loss_v, seconds=time.monotonic() - t0)
    if stopped_at is None:
        hook.set_mode(modes.EVAL)
        net.eval()
        with torch.no_grad():
            correct = 0
            for j in range(0, n, 1024):
                correct += int((net(x[j:j + 1024]).argmax(1) == y[j:j + 1024]).sum())
        result["accuracy"] = correct / n
    hook.close()
    return result


# ---------------------------------------------------------------------------
# The comparison
# ---------------------------------------------------------------------------
def compare(server: str, bad: str, good: str, png: pathlib.Path) -> Dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from tensorkeep.trials import create_trial

    trials = {"poor init": create_trial(f"tensorkeep://{server}/{bad}"), "default init": create_trial(f"tensorkeep://{server}/{good}")}
    colors = {"poor init": "tab:red", "default init": "tab:blue"}
    summary: Dict[str, Any] = {}
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))

    # (a) mean |gradient| of each layer's weights, per saved step, from the collector.
    ax = axes[0]
    for label, t in trials.items():
        names = sorted(t.tensor_names(regex=r"^gradient/.*weight$"))
        summary[label] = {}
        for k, name in enumerate(names):
            tensor = t.tensor(name)
            steps = tensor.steps()
            means = [tensor.reduction_value(s, "mean", abs=True) for s in steps]
            summary[label][name] = means[0] if means else float("nan")
            ax.plot(steps, means, color=colors[label], ls=["-", "--", ":"][k % 3], marker="o", ms=3,
                    label=f"{label}: {name.split('/', 1)[1]}")
    ax.axhline(THRESHOLD, color="black", lw=1, ls="-.", label=f"{RULE} threshold {THRESHOLD:g}")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("mean |gradient|")
    ax.set_title("Gradients per layer (weights)")
    ax.legend(fontsize=7)

    # (b) the distribution of the first layer's gradients at step 0, log scale.
    ax = axes[1]
    for label, t in trials.items():
        name = sorted(t.tensor_names(regex=r"^gradient/.*fc1\.weight$"))[0]
        g = np.abs(t.tensor(name).value(0).astype(np.float64).ravel())
        g = g[g > 0]
        ax.hist(np.log10(g), bins=60, alpha=0.6, color=colors[label], label=f"{label}: {name}")
    ax.axvline(np.log10(THRESHOLD), color="black", lw=1, ls="-.")
    ax.set_xlabel("log10 |gradient| (step 0)")
    ax.set_ylabel("count")
    ax.set_title("Distribution of fc1 weight gradients")
    ax.legend(fontsize=7)

    # (c) the training loss of both runs.
    ax = axes[2]
    for label, t in trials.items():
        loss_name = t.tensor_names(collection="losses")[0]
        tensor = t.tensor(loss_name)
        from tensorkeep import modes

        vals = tensor.values(mode=modes.TRAIN)
        steps = sorted(vals)
        ax.plot(steps, [float(vals[s]) for s in steps], color=colors[label], marker="o", ms=3, label=label)
    ax.set_xlabel("training step")
    ax.set_ylabel("loss")
    ax.set_title("Training loss")
    ax.legend(fontsize=8)

    fig.suptitle(f"tensorkeep: trial '{bad}' (poor init) vs '{good}' (default init)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)
    for t in trials.values():
        t.close()
    return summary


# ---------------------------------------------------------------------------
def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", help="HOST:PORT of a running collector (default: start one)")
    ap.add_argument("--server-binary", default=str(ROOT / "build" / "bin" / "tensorkeep-server"))
    ap.add_argument("--rule-worker", default=str(ROOT / "build" / "bin" / "tensorkeep-rules"),
                    help="the rule worker binary (default build/bin/tensorkeep-rules; "
                         "when missing, the rule runs in-process)")
    ap.add_argument("--data-dir", help="collector data directory to keep (default: a temporary one)")
    ap.add_argument("--out-dir", default="./tensorkeep-demo-output", help="where the PNG goes")
    ap.add_argument("--max-steps", type=int, default=2000, help="steps of the poorly initialised run at most")
    ap.add_argument("--good-steps", type=int, default=300, help="steps of the well initialised run")
    ap.add_argument("--save-interval", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest for this small MLP)")
    ap.add_argument("--verbose", action="store_true", help="show the client's log messages")
    args = ap.parse_args(argv)
    # The narrative below says what happens; the client's own warnings (e.g. a rule
    # reporting before the trial's first write) only clutter it.
    logging.basicConfig(format="  [%(name)s] %(message)s")
    logging.getLogger("tensorkeep").setLevel(logging.INFO if args.verbose else logging.ERROR)

    try:
        import torch
    except ImportError:
        say("error: PyTorch is missing: run this with Debian's /usr/bin/python3 (python3-torch)")
        return 1
    torch.set_num_threads(args.threads)
    import_tensorkeep()
    from tensorkeep.trials import create_trial

    out_dir = pathlib.Path(args.out_dir)
    png = out_dir / "gradients_comparison.png"
    tag = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    bad, good = f"bad-init-{tag}", f"good-init-{tag}"
    rule_bin = pathlib.Path(args.rule_worker)
    t_start = time.monotonic()

    with Collector(args.server, pathlib.Path(args.server_binary), args.data_dir) as collector:
        server = collector.address
        assert server
        # ----------------------------------------------------------------- run 1
        say()
        say(f"Run 1, trial '{bad}': an MLP 784-128-64-10 whose weights all start from N(0, 1e-4).")
        say(f"A rule worker watches the trial live: {RULE} (threshold {THRESHOLD:g}) with the 'stop' action.")
        rw = RuleWorker(rule_bin, server, bad)
        rw.start()
        r1 = train(torch, f"tensorkeep://{server}/{bad}", bad_init=True, max_steps=args.max_steps, save_interval=args.save_interval)
        rc = rw.wait(timeout=30)
        with create_trial(f"tensorkeep://{server}/{bad}") as t1:
            statuses = {s.rule: s for s in t1.rule_statuses()}
        st = statuses.get(RULE)
        fired = st is not None and st.state == "IssuesFound"
        if r1["stopped_at"] is not None and fired:
            say(f"  The rule fired: {RULE} found an issue at step {st.step}: {st.message}")
            say(f"  hook.should_stop() turned True at step {r1['stopped_at']}: the training loop stopped itself "
                f"after {r1['steps']} of {args.max_steps} steps ({r1['seconds']:.1f} s), loss still {r1['loss']:.4f}.")
        else:
            say(f"  The rule did NOT stop the run: status {st.state if st else 'none'}"
                f"{' (' + st.message + ')' if st and st.message else ''}; trained {r1['steps']} steps.")
            if rw.error:
                say(f"  in-process rule failed: {rw.error!r}")
            for line in rw.output[-10:]:
                say(f"    [rule worker] {line}")
        if rc not in (0, None):
            say(f"  (the {rw.kind} exited with status {rc})")

        # ----------------------------------------------------------------- run 2
        say()
        say(f"Run 2, trial '{good}': the same network with PyTorch's default initialisation, same rule.")
        rw2 = RuleWorker(rule_bin, server, good)
        rw2.start()
        r2 = train(torch, f"tensorkeep://{server}/{good}", bad_init=False, max_steps=args.good_steps, save_interval=args.save_interval)
        rc2 = rw2.wait(timeout=30)
        with create_trial(f"tensorkeep://{server}/{good}") as t2:
            st2 = {s.rule: s for s in t2.rule_statuses()}.get(RULE)
        acc = r2.get("accuracy")
        say(f"  Trained all {r2['steps']} steps in {r2['seconds']:.1f} s: loss {r2['loss']:.4f}"
            + (f", accuracy {acc:.1%}" if acc is not None else "")
            + (" (the rule asked it to stop!)" if r2["stopped_at"] is not None else "") + ".")
        say(f"  {RULE} on this trial: {st2.state if st2 else 'no status yet'}"
            + (f" ({st2.message})" if st2 and st2.message else "") + ".")
        if rc2 not in (0, None):
            say(f"  (the {rw2.kind} exited with status {rc2})")

        # ----------------------------------------------------------------- compare
        say()
        say("Comparing the gradients of the two trials through the analysis API ...")
        summary = compare(server, bad, good, png)
        for label, per in summary.items():
            parts = ", ".join(f"{n.split('/', 1)[1]} {v:.2g}" for n, v in per.items())
            say(f"  {label:12s} mean |gradient| at step 0: {parts}")
        say(f"  Saved the comparison to {png}")

        # ----------------------------------------------------------------- the web UI
        if collector.http_address:
            ui = f"http://{collector.http_address}"
            say()
            say(f"The web UI, served by the collector: {ui}/")
            say(f"  both trials on one plot: {ui}/compare?trials={bad},{good}")
            say(f"  the poorly initialised one: {ui}/trial/{bad}")
            if sys.stdin.isatty() and sys.stdout.isatty():
                say("  The collector stays up for the web UI: press Ctrl-C to stop it.")
                try:
                    collector.wait()
                except KeyboardInterrupt:
                    say()

    say()
    say(f"Done in {time.monotonic() - t_start:.1f} s.")
    ok = fired and r1["stopped_at"] is not None and png.exists()
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
