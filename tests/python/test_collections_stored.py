"""The hook's collection configuration stored on the collector (issue 17):
a trial shows what smdebug shows from its collection files — every configured
collection (empty ones too) with its include_regex, save_config per mode and
reduction_config, and tensor_names(collection=) matching its regexes."""

import json
import os
import re
import subprocess

import numpy as np
import pytest

from tensorkeep import Writer
from tensorkeep.trials import create_trial


def _train(trial_url):
    torch = pytest.importorskip("torch", reason="the hook needs python3-torch")
    import torch.nn as nn

    import tensorkeep.pytorch as smd
    from tensorkeep import modes

    torch.manual_seed(0)
    hook = smd.Hook(
        out_dir=trial_url,
        save_config=smd.SaveConfig(
            mode_save_configs={
                modes.TRAIN: smd.SaveConfigMode(save_interval=2),
                modes.EVAL: smd.SaveConfigMode(save_interval=1, end_step=2),
            }
        ),
        include_collections=["weights", "gradients", "losses", "outs", "nothing_here"],
    )
    outs = hook.get_collection("outs")
    outs.include("_output_")
    outs.save_config = {modes.TRAIN: smd.SaveConfigMode(save_interval=1, save_steps=[3])}
    outs.reduction_config = smd.ReductionConfig(reductions=["mean"], abs_norms=["l2"], save_raw_tensor=True)
    # An include_collections entry whose regex matches nothing (smdebug
    # still writes it to its collection file).
    hook.get_collection("nothing_here").include("^no_such_tensor$")

    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    loss_fn = nn.CrossEntropyLoss()
    hook.register_module(net)
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    hook.set_mode(modes.TRAIN)
    for _ in range(4):
        opt.zero_grad()
        loss = loss_fn(net(torch.randn(5, 4)), torch.randint(0, 2, (5,)))
        loss.backward()
        opt.step()
    hook.set_mode(modes.EVAL)
    with torch.no_grad():
        for _ in range(2):
            loss_fn(net(torch.randn(5, 4)), torch.randint(0, 2, (5,)))
    expected = {n: c for n, c in hook.get_collections().items()}
    hook.close()
    return expected


def test_trial_shows_the_hooks_collections(server, trial_url, trial_name):
    from tensorkeep import modes

    expected = _train(trial_url)
    trial = create_trial(trial_url)
    got = trial.collections()
    # Every collection the hook had, empty ones included.
    assert set(expected) <= set(got), sorted(set(expected) - set(got))
    empty = got["nothing_here"]
    assert empty.include_regex == ["^no_such_tensor$"]
    assert empty.tensor_names == set()
    assert trial.tensor_names(collection="nothing_here") == []
    assert trial.collection("nothing_here") is empty

    for name, mine in expected.items():
        theirs = trial.collection(name)
        assert theirs.include_regex == mine.include_regex, name
        assert theirs.save_config == mine.save_config, name
        assert theirs.reduction_config == mine.reduction_config, name

    outs = trial.collection("outs")
    assert outs.save_config.get_save_config(modes.TRAIN).save_interval == 1
    assert outs.save_config.get_save_config(modes.TRAIN).save_steps == [3]
    # Modes the collection left unset took the hook's, as smdebug's hook does.
    assert outs.save_config.get_save_config(modes.EVAL).save_interval == 1
    assert outs.save_config.get_save_config(modes.EVAL).end_step == 2
    assert outs.reduction_config.reductions == ["mean"]
    assert outs.reduction_config.abs_norms == ["l2"]
    assert outs.reduction_config.save_raw_tensor is True

    # tensor_names(collection=): saved names matching the regexes (Python's
    # re.search, as smdebug), lookahead included (weights).
    everything = trial.tensor_names()
    for name, rx in (("weights", r"^(?!gradient).*weight"), ("outs", "_output_"), ("gradients", "^gradient")):
        want = sorted(n for n in everything if re.search(rx, n))
        assert want, name
        assert trial.tensor_names(collection=name) == want, name
    assert not any(n.startswith("gradient") for n in trial.tensor_names(collection="weights"))

    # A fresh Trial that never called collection(): the same answer.
    fresh = create_trial(trial_url)
    assert fresh.tensor_names(collection="weights") == sorted(
        n for n in everything if re.search(r"^(?!gradient).*weight", n)
    )

    # The CLI shows them.
    from conftest import server_binary

    cli = os.path.join(os.path.dirname(server_binary()), "tensorkeep")
    r = subprocess.run([cli, "--server", server.address, "collections", trial_name],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "nothing_here: 0 tensors" in r.stdout
    assert "include_regex:  ^no_such_tensor$" in r.stdout
    assert "TRAIN: every 1 from 0, and steps 3" in r.stdout
    assert "mean,abs_l2_norm (and the raw tensor)" in r.stdout
    r = subprocess.run([cli, "--server", server.address, "collections", trial_name, "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    listed = {c["name"]: c for c in json.loads(r.stdout)["collections"]}
    cfg = listed["nothing_here"]["config"]
    assert cfg.get("include_regex", cfg.get("includeRegex")) == ["^no_such_tensor$"]
    r = subprocess.run([cli, "--server", server.address, "info", trial_name],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "nothing_here(0, configured)" in r.stdout


def test_trial_without_stored_collections(trial_url):
    # Data as older collectors (and plain writers) leave it: collections only
    # from what was saved under them, no configuration.
    with Writer(trial_url) as w:
        w.write_tensor("a.weight", np.ones(3, np.float32), step=0, collections=("weights",))
    trial = create_trial(trial_url)
    got = trial.collections()
    assert list(got) == ["weights"]
    assert got["weights"].tensor_names == {"a.weight"}
    assert got["weights"].include_regex == []
    assert got["weights"].save_config is None
    assert trial.tensor_names(collection="weights") == ["a.weight"]
    assert trial.collection("unknown").tensor_names == set()
