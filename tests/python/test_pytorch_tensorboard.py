"""The PyTorch hook's TensorBoard export (export_tensorboard / tensorboard_dir)
against a real collector: the hook runs ``tensorkeep export-tensorboard
--follow``, and after hook.close() the event files hold every saved step's loss
and weight histograms, equal to what the trial holds (read independently with
tfrecord_reader.py); without the CLI the hook refuses at construction instead
of silently exporting nothing."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorkeep.pytorch as tkp  # noqa: E402
from tensorkeep.trials import create_trial  # noqa: E402
from conftest import server_binary  # noqa: E402
import tfrecord_reader as tfr  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture
def cli(monkeypatch):
    path = os.path.join(os.path.dirname(server_binary()), "tensorkeep")
    assert os.access(path, os.X_OK), f"the tensorkeep CLI is not next to the server at {path}"
    monkeypatch.setenv("TENSORKEEP_CLI", path)
    return path


def _train(hook, steps=4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    loss_fn = torch.nn.CrossEntropyLoss()
    hook.register_module(model)
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook.set_mode(tkp.modes.TRAIN)
    for _ in range(steps):
        x, y = torch.randn(32, 8), torch.randint(0, 3, (32,))
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()


def _events(run_dir):
    files = [f for f in os.listdir(run_dir) if f.startswith("events.out.tfevents.")]
    assert len(files) == 1, files
    recs, cut = tfr.read_records(open(os.path.join(run_dir, files[0]), "rb").read(), "real")
    assert cut is None
    out = {}
    for _, payload in recs[1:]:
        e = tfr.decode_event(payload)
        for v in e["values"]:
            out[(v["tag"], e["step"])] = v
    return out


def test_hook_exports_the_trial_to_tensorboard(server, trial_url, cli, tmp_path):
    tb = tmp_path / "tb"
    hook = tkp.Hook(out_dir=trial_url, tensorboard_dir=str(tb), save_config=tkp.SaveConfig(save_interval=1),
                    include_collections=["weights", "losses"])
    assert hook.tensorboard_dir == str(tb)
    _train(hook)
    hook.close()
    assert hook._tensorboard.process.returncode == 0, open(hook._tensorboard.log_path).read()
    got = _events(tb / "worker_0")
    trial = create_trial(trial_url)
    assert trial.steps() == [0, 1, 2, 3]
    for step in trial.steps():
        loss = trial.tensor("CrossEntropyLoss_output_0").value(step)
        assert got[("CrossEntropyLoss_output_0", step)]["simple_value"] == np.float32(loss.reshape(-1)[0])
        for name in ("Sequential_0.weight", "Sequential_2.weight"):
            w = trial.tensor(name).value(step).astype(np.float64)
            h = got[(name, step)]["histo"]
            assert (h["num"], h["min"], h["max"]) == (w.size, w.min(), w.max())
            assert h["bucket"] == np.histogram(w, bins=30)[0].astype(float).tolist()
            assert got[(f"{name}/mean", step)]["simple_value"] == np.float32(w.mean())


def test_export_tensorboard_alone_writes_to_the_default_directory(server, trial_url, trial_name, cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hook = tkp.Hook(out_dir=trial_url, export_tensorboard=True, save_config=tkp.SaveConfig(save_interval=1))
    assert hook.tensorboard_dir == os.path.join("tensorboard", trial_name)
    _train(hook, steps=2)
    hook.close()
    got = _events(tmp_path / "tensorboard" / trial_name / "worker_0")
    assert {("CrossEntropyLoss_output_0", 0), ("CrossEntropyLoss_output_0", 1)} <= set(got)


def test_hook_refuses_tensorboard_without_the_cli(trial_url, tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKEEP_CLI", str(tmp_path / "no-such-tensorkeep"))
    with pytest.raises(RuntimeError, match="TENSORKEEP_CLI"):
        tkp.Hook(out_dir=trial_url, tensorboard_dir=str(tmp_path / "tb"))
