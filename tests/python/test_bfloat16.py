"""bfloat16 end to end against a real collector: torch.bfloat16 tensors written by
the Writer and the PyTorch hook are stored as bfloat16 (2 bytes an element), read
back as the float32 values they stand for, and reduced and histogrammed on the
collector exactly as torch computes them from the same values in float64."""

import os
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorkeep.pytorch as tkp  # noqa: E402
from tensorkeep import Writer  # noqa: E402
from tensorkeep import _dtypes  # noqa: E402
from tensorkeep.trials import create_trial  # noqa: E402


def _bf16_sample(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    # A wide range of magnitudes, where bfloat16 keeps float32's exponent range.
    x = torch.randn(shape, generator=g) * torch.pow(10.0, torch.randint(-20, 20, shape, generator=g).float())
    x.view(-1)[0] = 0.0 if x.numel() else 0.0
    return x.to(torch.bfloat16)


def test_wire_form_is_the_raw_16_bit_patterns():
    t = torch.tensor([1.0, -2.5, 3.140625, float("inf")], dtype=torch.bfloat16)
    code, shape, data = _dtypes.to_wire(t)
    assert code == _dtypes.BFLOAT16 and tuple(shape) == (4,)
    assert len(data) == 8
    # Independently: the top 16 bits of each float32.
    expected = (np.array([1.0, -2.5, 3.140625, np.inf], dtype="<f4").view("<u4") >> 16).astype("<u2")
    assert data == expected.tobytes()
    back = _dtypes.from_wire(code, shape, data)
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, t.float().numpy())


def test_values_reductions_and_histograms_of_bfloat16(trial_url):
    cases = {
        "bf16/matrix": _bf16_sample((17, 33), 1),
        "bf16/scalar": torch.tensor(0.333, dtype=torch.bfloat16),
        "bf16/empty": torch.zeros((0, 4), dtype=torch.bfloat16),
        "bf16/noncontiguous": _bf16_sample((8, 6), 2).t(),
    }
    with Writer(trial_url) as w:
        for name, value in cases.items():
            w.write_tensor(name, value, step=0)
    trial = create_trial(trial_url)
    for name, value in cases.items():
        got = trial.tensor(name).value(0)
        want = value.float().numpy()
        assert got.dtype == np.float32 and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    x = cases["bf16/matrix"].double().reshape(-1)
    ten = trial.tensor("bf16/matrix")
    expected = {
        "min": x.min(), "max": x.max(), "mean": x.mean(), "sum": x.sum(),
        "std": x.std(unbiased=False), "variance": x.var(unbiased=False),
        "l1": x.abs().sum(), "l2": x.norm(),
    }
    for red, want in expected.items():
        assert ten.reduction_value(0, red) == pytest.approx(float(want), rel=1e-12), red
    edges, counts = ten.histogram(0, bins=10)
    want_counts, want_edges = np.histogram(x.numpy(), bins=10)
    np.testing.assert_allclose(edges, want_edges, rtol=1e-12)
    np.testing.assert_array_equal(counts, want_counts)


def test_hook_saves_bfloat16_parameters_and_gradients(trial_url):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).to(torch.bfloat16)
    hook = tkp.Hook(trial_url, save_config=tkp.SaveConfig(save_interval=1), include_collections=["weights", "gradients"])
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = {}
    for step in range(2):
        opt.zero_grad()
        out = model(torch.randn(4, 8, dtype=torch.bfloat16))
        out.float().pow(2).mean().backward()
        seen[step] = {
            "weight": model[0].weight.detach().clone(),
            "grad": model[0].weight.grad.detach().clone(),
        }
        opt.step()
    hook.close()
    trial = create_trial(trial_url)
    weight = next(n for n in trial.tensor_names() if n.endswith("0.weight") and not n.startswith("gradient/"))
    grad = "gradient/" + weight
    for step in range(2):
        # The hook saves weights at the step's forward pass, before opt.step().
        np.testing.assert_array_equal(trial.tensor(weight).value(step), seen[step]["weight"].float().numpy())
        np.testing.assert_array_equal(trial.tensor(grad).value(step), seen[step]["grad"].float().numpy())
    trial.close()


def test_cli_writes_bfloat16_as_float32_npy(trial_url, server, tmp_path):
    t = _bf16_sample((3, 5), 7)
    with Writer(trial_url) as w:
        w.write_tensor("bf", t, step=0)
    from conftest import server_binary

    cli = os.path.join(os.path.dirname(server_binary()), "tensorkeep")
    assert os.access(cli, os.X_OK), f"the tensorkeep CLI is not next to the server at {cli}"
    trial = trial_url.rsplit("/", 1)[1]
    out = tmp_path / "bf.npy"
    r = subprocess.run(
        [cli, "--server", server.address, "value", trial, "bf", "--step", "0", "--out", str(out)],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "widened to float32" in r.stderr
    got = np.load(out)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, t.float().numpy())
