"""Hook.create_from_json_file and get_hook(create_if_not_exists=True) from
SageMaker's JSON hook configuration (smdebug's json_config), against a real
collector: the steps saved per mode and per collection are what the file says,
computed here independently of the hook's SaveConfig code."""

import json

import pytest

torch = pytest.importorskip("torch")

import tensorkeep.pytorch as tkp  # noqa: E402
from tensorkeep import modes  # noqa: E402
from tensorkeep.pytorch import hook as hook_module  # noqa: E402
from tensorkeep.trials import create_trial  # noqa: E402


@pytest.fixture(autouse=True)
def no_current_hook():
    hook_module.del_hook()
    yield
    hook_module.del_hook()


def _write(tmp_path, config) -> str:
    path = tmp_path / "debughookconfig.json"
    path.write_text(json.dumps(config))
    return str(path)


def _train(hook, train_steps=12, eval_steps=6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    loss_fn = torch.nn.CrossEntropyLoss()
    hook.register_module(model)
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook.set_mode(modes.TRAIN)
    for _ in range(train_steps):
        opt.zero_grad()
        loss_fn(model(torch.randn(4, 8)), torch.randint(0, 3, (4,))).backward()
        opt.step()
    hook.set_mode(modes.EVAL)
    with torch.no_grad():
        for _ in range(eval_steps):
            loss_fn(model(torch.randn(4, 8)), torch.randint(0, 3, (4,)))
    hook.close()


def test_steps_saved_per_mode_and_collection_follow_the_file(server, trial_url, tmp_path):
    path = _write(tmp_path, {
        "S3Path": "s3://ignored/prefix",
        "LocalPath": trial_url,
        "HookParameters": {
            "save_interval": "4",
            "eval.save_interval": "3",
            "reductions": "mean,abs_l2_norm",
        },
        "CollectionConfigurations": [
            {"CollectionName": "losses", "CollectionParameters": {"save_interval": "1"}},
            {"CollectionName": "weights", "CollectionParameters": {"train.save_steps": "1,5", "include_regex": "nothing.*"}},
        ],
    })
    hook = tkp.Hook.create_from_json_file(path)
    assert hook_module.get_hook() is hook
    _train(hook)
    trial = create_trial(trial_url)
    # Independently, by smdebug's rules: a collection's save keys go over the
    # hook's (per mode), and a step is saved when it is in save_steps OR a
    # multiple of save_interval. Losses: every step. Weights: TRAIN steps 1, 5
    # (its save_steps) and 0, 4, 8 (the hook's save_interval 4); EVAL mode steps
    # 0 and 3 (the hook's eval.save_interval 3).
    loss = next(n for n in trial.tensor_names() if "CrossEntropyLoss" in n)
    assert trial.tensor(loss).steps(mode=modes.TRAIN) == list(range(12))
    assert trial.tensor(loss).steps(mode=modes.EVAL) == list(range(6))
    weight = "Sequential_0.0.weight" if trial.has_tensor("Sequential_0.0.weight") else next(
        n for n in trial.tensor_names(collection="weights") if n.endswith("weight"))
    assert trial.tensor(weight).steps(mode=modes.TRAIN) == sorted({1, 5} | {s for s in range(12) if s % 4 == 0})
    assert trial.tensor(weight).steps(mode=modes.EVAL) == [s for s in range(6) if s % 3 == 0]
    # The hook's reductions apply to the saved tensors.
    reds = trial.tensor(weight).reduction_values(1, mode=modes.TRAIN)
    assert set(reds) == {("mean", False), ("l2", True)}
    # Only the configured collections were included: no gradients.
    assert not [n for n in trial.tensor_names() if n.startswith("gradient/")]
    trial.close()


def test_get_hook_creates_from_the_environment_path_once(server, trial_url, tmp_path, monkeypatch):
    path = _write(tmp_path, {"LocalPath": trial_url, "HookParameters": {"save_steps": "0,2"}})
    monkeypatch.setenv("SMDEBUG_CONFIG_FILE_PATH", path)
    hook = hook_module.get_hook(create_if_not_exists=True)
    assert isinstance(hook, tkp.Hook) and hook.out_dir == trial_url
    assert hook_module.get_hook(create_if_not_exists=True) is hook  # the singleton
    _train(hook, train_steps=4, eval_steps=0)
    trial = create_trial(trial_url)
    assert trial.steps(mode=modes.TRAIN) == [0, 2]
    trial.close()


def test_without_a_file_get_hook_is_none_and_create_raises(tmp_path, monkeypatch):
    monkeypatch.setenv("SMDEBUG_CONFIG_FILE_PATH", str(tmp_path / "missing.json"))
    assert hook_module.get_hook(create_if_not_exists=True) is None
    with pytest.raises(FileNotFoundError):
        tkp.Hook.create_from_json_file()


@pytest.mark.parametrize("config, message", [
    ({"LocalPath": "/opt/ml/output/tensors"}, "LocalPath must be the trial's URL"),
    ({"LocalPath": "tensorkeep://127.0.0.1:1/t", "HookParameters": {"save_interval": "often"}}, "save_interval must be an integer"),
    ({"LocalPath": "tensorkeep://127.0.0.1:1/t", "CollectionConfigurations": [{"CollectionParameters": {}}]}, "CollectionName"),
    ({"LocalPath": "tensorkeep://127.0.0.1:1/t", "HookParameters": {"save_all": "yes"}}, "boolean argument expected"),
])
def test_invalid_configurations_are_refused_naming_the_problem(tmp_path, config, message):
    path = _write(tmp_path, config)
    with pytest.raises(ValueError, match=message):
        tkp.Hook.create_from_json_file(path)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        tkp.Hook.create_from_json_file(str(tmp_path / "bad.json"))
