"""smdebug 1.0.34's own documentation examples and test idioms, ported with
``sed s/smdebug/tensorkeep/`` and nothing else (issue 17), against a real collector.

Each example is smdebug's (docs/analysis.md, docs/api.md, docs/pytorch.md and
tests/analysis of awslabs/sagemaker-debugger), with its paths replaced by a
``tensorkeep://`` URL; the asserts compare with values computed independently
(numpy or torch on the data the test itself wrote, or smdebug's documented answer).
"""

import logging
import math
import threading

import numpy as np
import pytest

# --- the imports, exactly as smdebug's docs write them, with the package renamed ---
import tensorkeep as smd_root
from tensorkeep import modes
from tensorkeep import ReductionConfig, SaveConfig, SaveConfigMode
from tensorkeep.analysis.utils import no_refresh, refresh
from tensorkeep.core.collection import Collection, CollectionKeys
from tensorkeep.core.modes import ModeKeys
from tensorkeep.core.tensor import StepState
from tensorkeep.exceptions import *  # noqa: F401,F403 (smdebug's docs: "from smdebug.exceptions import *")
from tensorkeep.exceptions import (
    NoMoreData,
    ShapeUnavailableForStep,
    SMDebugError,
    StepNotYetAvailable,
    StepUnavailable,
    TensorUnavailable,
    TensorUnavailableForStep,
)
from tensorkeep.rules import Rule, invoke_rule
from tensorkeep.trials import create_trial

from tensorkeep import Writer  # tensorkeep's own writer stands in for smdebug's FileWriter

# Every class smdebug.exceptions defines (smdebug 1.0.34).
SMDEBUG_EXCEPTIONS = [
    "SMDebugError", "SMDebugCustomerError", "SMDebugTypeError", "SMDebugRuntimeError",
    "SMDebugNotImplementedError", "SMDebugValueError", "InvalidCollectionConfiguration",
    "StepNotYetAvailable", "MissingCollectionFiles", "IndexReaderException", "StepUnavailable",
    "TensorUnavailableForStep", "ShapeUnavailableForStep", "TensorUnavailable", "InvalidWorker",
    "NoMoreProfilerData", "NoMoreData", "RuleEvaluationConditionMet",
    "InsufficientInformationForRuleInvocation",
]


def generate_data(w, num_tensors, step, tname_prefix="foo", shape=(3, 3, 3), mode=modes.GLOBAL, mode_step=None):
    """smdebug's tests/analysis/utils.generate_data, over a Writer: tensors
    ``foo_0 .. foo_{n-1}`` at ``step``, each filled with ``step``; the step is committed."""
    for i in range(num_tensors):
        w.write_tensor(f"{tname_prefix}_{i}", np.full(shape, step, np.float32), step, mode, mode_step)
    w.end_step(step)
    w.flush()


# ---------------------------------------------------------------------------
# Import paths and names
# ---------------------------------------------------------------------------


def test_every_smdebug_path_and_name_exists():
    import tensorkeep.exceptions as ex

    for name in SMDEBUG_EXCEPTIONS:
        cls = getattr(ex, name)
        assert issubclass(cls, SMDebugError), name
        assert name in globals(), f"'from tensorkeep.exceptions import *' does not export {name}"
    assert issubclass(ex.SMDebugValueError, ValueError) and issubclass(ex.SMDebugTypeError, TypeError)
    assert str(ShapeUnavailableForStep("w", 3, modes.EVAL)) == (
        "Shape for tensor w is not available for step 3 with mode EVAL as it was not saved."
    )
    assert modes is ModeKeys and smd_root.modes is ModeKeys
    assert [m.value for m in (modes.TRAIN, modes.EVAL, modes.PREDICT, modes.GLOBAL)] == [1, 2, 3, 4]
    assert [s.value for s in (StepState.UNAVAILABLE, StepState.AVAILABLE, StepState.NOT_YET_AVAILABLE)] == [0, 1, 2]
    import tensorkeep.analysis as analysis

    assert analysis.no_refresh is no_refresh and analysis.refresh is refresh

    # docs/api.md: "import smdebug as smd"
    smd = smd_root
    save_config = smd.SaveConfig(mode_save_configs=None, save_interval=100, start_step=0, end_step=None, save_steps=None)
    assert save_config.get_save_config(smd.modes.TRAIN).save_interval == 100
    sc = smd.SaveConfig(mode_save_configs={
        smd.modes.TRAIN: smd.SaveConfigMode(save_interval=1),
        smd.modes.EVAL: smd.SaveConfigMode(save_interval=2),
        smd.modes.PREDICT: smd.SaveConfigMode(save_interval=3),
        smd.modes.GLOBAL: smd.SaveConfigMode(save_interval=4),
    })
    assert [sc.get_save_config(m).save_interval for m in (modes.TRAIN, modes.EVAL, modes.PREDICT, modes.GLOBAL)] == [1, 2, 3, 4]
    reduction_config = smd.ReductionConfig(
        reductions=None, abs_reductions=None, norms=None, abs_norms=None, save_raw_tensor=False
    )
    assert reduction_config.save_raw_tensor is False
    assert SaveConfigMode is smd.SaveConfigMode and ReductionConfig is smd.ReductionConfig and SaveConfig is smd.SaveConfig

    # smdebug.core.collection.Collection, as its tests build one.
    c = Collection("x", include_regex=["foo"], tensor_names=["a"])
    c.include("bar")
    c.add_tensor_name("b")
    assert c.include_regex == ["foo", "bar"] and c.tensor_names == {"a", "b"}
    assert c.save_config is None and c.reduction_config is None
    assert c == Collection("x", include_regex=["foo", "bar"], tensor_names=["a", "b"])
    assert CollectionKeys.ALL == "all" and CollectionKeys.INPUTS == "inputs"


# ---------------------------------------------------------------------------
# The loop over mode steps ends (issue 17: "loops that never end")
# ---------------------------------------------------------------------------


def test_skip_unavailable_stop_on_no_more_data_loop_ends_for_every_mode(trial_url):
    w = Writer(trial_url)
    train, evals = [0, 1, 3], [0, 1]
    g = 0
    for ms in train:
        generate_data(w, 1, g, mode=modes.TRAIN, mode_step=ms)
        g += 1
    for ms in evals:
        generate_data(w, 1, g, mode=modes.EVAL, mode_step=ms)
        g += 1
    w.close(end_of_training=True)
    trial = create_trial(trial_url)
    for mode, expected in ((modes.TRAIN, train), (modes.EVAL, evals), (modes.GLOBAL, list(range(g)))):
        seen, step = [], 0
        while step < 1000:  # smdebug's idiom, bounded
            try:
                trial.wait_for_steps([step], mode=mode)
                seen.append(step)
            except StepUnavailable:
                pass
            except NoMoreData:
                break
            step += 1
        assert seen == expected, mode
        assert step == expected[-1] + 1, f"{mode}: stopped at {step}"


# ---------------------------------------------------------------------------
# docs/pytorch.md + docs/analysis.md: train with the hook, analyse the trial
# ---------------------------------------------------------------------------


def test_pytorch_doc_example_then_analysis_doc_example(trial_url):
    torch = pytest.importorskip("torch", reason="the PyTorch example needs python3-torch")
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim

    import tensorkeep.pytorch as smd

    torch.manual_seed(0)
    hook = smd.Hook(
        out_dir=trial_url,
        save_config=smd.SaveConfig(save_interval=1),
        include_collections=["weights", "gradients", "losses", "std"],
        save_all=True,
    )
    hook.get_collection("std").include("fc.weight")
    hook.get_collection("std").reduction_config = smd.ReductionConfig(reductions=["std", "variance"])

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(784, 10)

        def forward(self, x):
            return F.relu(self.fc(x))

    net = Model()
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(net.parameters(), lr=0.01)
    hook.register_module(net)
    hook.register_loss(criterion)
    trainloader = [(torch.randn(8, 784), torch.randint(0, 10, (8,))) for _ in range(4)]
    losses = []
    for i, (inputs, labels) in enumerate(trainloader):
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
        hook.save_scalar("lr", 0.01 * (i + 1))
    hook.close()

    # docs/analysis.md
    trial = create_trial(path=trial_url, name="resnet_training_run")
    assert trial.name == "resnet_training_run"
    assert trial.steps() == [0, 1, 2, 3]
    loss_names = trial.tensor_names(regex="CrossEntropyLoss_output")
    assert len(loss_names) == 1
    got = [float(trial.tensor(loss_names[0]).value(s)) for s in trial.steps()]
    assert got == pytest.approx(losses, rel=1e-6)
    # save_scalar: a Python float is saved as smdebug saves it, float64 of shape (1,),
    # and "all" (save_all) holds it, as smdebug's ".*" regex finds it.
    lr = trial.tensor("scalar/lr").value(2)
    assert lr.dtype == np.float64 and lr.shape == (1,) and lr[0] == pytest.approx(0.03)
    assert "scalar/lr" in trial.tensor_names(collection="all")
    # std/variance saved by the hook as smdebug's PyTorch hook: torch's ddof=1.
    wname = trial.tensor_names(regex=r"^[A-Za-z]+_fc\.weight$")  # smdebug's names: Model_fc.weight
    assert wname == ["Model_fc.weight"]
    w = trial.tensor(wname[0])
    for step in trial.steps():
        value = w.value(step)
        assert w.shape(step) == value.shape == (10, 784)
        saved = w.reduction_value(step, "std")
        assert isinstance(saved, np.ndarray) and saved.shape == (1,)
        assert saved[0] == pytest.approx(float(np.std(value.astype(np.float64), ddof=1)), rel=1e-9)
        var = w.reduction_value(step, "variance")[0]
        assert var == pytest.approx(float(torch.from_numpy(value).double().var()), rel=1e-9)
        computed = w.reduction_value(step, "l2")  # not saved: computed, a numpy scalar
        assert isinstance(computed, np.float64)
        assert computed == pytest.approx(float(np.linalg.norm(value.astype(np.float64).ravel())), rel=1e-9)
        assert set(w.reduction_values(step)) == {("std", False), ("variance", False)}


# ---------------------------------------------------------------------------
# docs/analysis.md, Trial and Tensor API
# ---------------------------------------------------------------------------


@pytest.fixture
def mode_job(trial_url):
    """TRAIN global steps 0-3 (mode steps 0-3), EVAL 4-5 (0-1); inputs, labels,
    predictions as smdebug names them; 'acts' reductions only at step 0."""
    w = Writer(trial_url, worker="algo-1", num_workers=1)
    layout = [(0, modes.TRAIN, 0), (1, modes.TRAIN, 1), (2, modes.TRAIN, 2), (3, modes.TRAIN, 3),
              (4, modes.EVAL, 0), (5, modes.EVAL, 1)]
    for g, m, ms in layout:
        w.write_tensor("foo_1", np.arange(6, dtype=np.float32).reshape(2, 3) * (g + 1), g, m, ms, collections=("weights",))
        for i in (1, 0):
            w.write_tensor(f"inputs_{i}", np.full(2, 10 * g + i, np.float32), g, m, ms, collections=("inputs",))
        w.write_tensor("labels_0", np.array([g], np.int64), g, m, ms)
        w.write_tensor("predictions_0", np.array([g + 0.5]), g, m, ms)
        if g == 0:
            w.write_tensor("acts", None, g, m, ms, reductions={("mean", False): 0.5})
        w.end_step(g)
    w.close(end_of_training=True)
    return trial_url


def test_trial_api_of_analysis_md(mode_job):
    trial = create_trial(mode_job, profiler=False, parallel=True, check=False, index_mode=True, cache=False)
    assert trial.tensor_names(step=None, mode=modes.GLOBAL, regex=None, collection=None) == [
        "acts", "foo_1", "inputs_0", "inputs_1", "labels_0", "predictions_0"
    ]
    assert trial.tensor_names(show_prefixed_tensors=True) == trial.tensor_names()
    assert trial.steps(mode=None) == [0, 1, 2, 3, 4, 5]
    assert trial.steps(mode=modes.EVAL) == [0, 1]
    assert sorted(trial.modes()) == [modes.TRAIN, modes.EVAL]
    assert trial.mode(global_step=4) == modes.EVAL and trial.mode_step(global_step=4) == 0
    assert trial.mode_modestep(5) == (modes.EVAL, 1)
    assert trial.global_step(mode=modes.EVAL, mode_step=1) == 5
    assert trial.global_step(mode=modes.GLOBAL, mode_step=100) == 100  # smdebug: itself
    assert trial.mode(100) is None and trial.mode_step(100) is None and trial.global_step(modes.TRAIN, 9) is None
    assert trial.mode_modestep(100) == (None, None)
    assert trial.workers() == ["algo-1"] and trial.worker_set == {"algo-1"} and trial.num_workers == 1
    assert trial.last_complete_step == 5 and trial.loaded_all_steps
    assert trial.has_passed_step(3, mode=modes.TRAIN) == StepState.AVAILABLE
    assert trial.has_passed_step(7) == StepState.UNAVAILABLE
    trial.wait_for_steps([0, 1], mode=modes.EVAL)
    trial.maybe_refresh()
    trial.refresh_data()
    assert trial.logger is logging.getLogger("tensorkeep")
    # inputs / labels / predictions, ordered by the number ending the name (smdebug)
    ins = trial.inputs(2)
    assert [a.tolist() for a in ins] == [[20.0, 20.0], [21.0, 21.0]]
    assert [a.tolist() for a in trial.labels(5)] == [[5]]
    assert [a.tolist() for a in trial.predictions(1, mode=modes.TRAIN)] == [[1.5]]

    t = trial.tensor("foo_1")
    expected = {g: np.arange(6, dtype=np.float32).reshape(2, 3) * (g + 1) for g in range(6)}
    assert t.steps(mode=ModeKeys.GLOBAL, show_incomplete_steps=False) == list(range(6))
    np.testing.assert_array_equal(t.value(1, mode=modes.EVAL, worker=None), expected[5])
    assert t.shape(0) == (2, 3) and t.shapes(mode=modes.EVAL) == {0: (2, 3), 1: (2, 3)}
    values = t.values(mode=modes.TRAIN)
    assert sorted(values) == [0, 1, 2, 3]
    np.testing.assert_array_equal(values[3], expected[3])
    assert t.workers(2) == ["algo-1"]
    assert t.prev_steps(4, 2) == [3, 4]
    assert t.prev_steps(4) == [0, 1, 2, 3, 4] and t.prev_steps(4, n=None) == [0, 1, 2, 3, 4]
    assert t.prev_steps(1, 5, mode=modes.EVAL) == [0, 1]
    mean = t.reduction_value(2, "mean", mode=modes.GLOBAL, worker=None, abs=False)
    assert isinstance(mean, np.float64) and mean == pytest.approx(expected[2].mean())
    assert t.reduction_value(2, "std") == pytest.approx(np.std(expected[2].astype(np.float64)))
    assert t.reduction_values(2) == {}
    acts = trial.tensor("acts")
    saved = acts.reduction_value(0, "mean")
    assert isinstance(saved, np.ndarray) and saved.shape == (1,) and saved.dtype == np.float64 and saved[0] == 0.5
    assert {k: v.tolist() for k, v in acts.reduction_values(0).items()} == {("mean", False): [0.5]}
    with pytest.raises(TensorUnavailableForStep):
        acts.value(0)
    with pytest.raises(ShapeUnavailableForStep):
        acts.shape(0)
    with pytest.raises(TensorUnavailable):
        trial.tensor("nope")


def test_range_steps_restricts_names_values_and_mapping(mode_job):
    tr = create_trial(path=mode_job, name="resnet_training", range_steps=(1, 4))
    assert tr.steps() == [1, 2, 3] and tr.steps(modes.TRAIN) == [1, 2, 3] and tr.steps(modes.EVAL) == []
    assert "acts" not in tr.tensor_names()  # saved only at step 0
    assert tr.tensor_names(step=0) == [] and "foo_1" in tr.tensor_names(step=2)
    assert tr.mode(0) is None and tr.mode(2) == modes.TRAIN and tr.mode(4) is None
    assert tr.has_passed_step(0) == StepState.UNAVAILABLE and tr.has_passed_step(2) == StepState.AVAILABLE
    with pytest.raises(StepUnavailable):
        tr.tensor("foo_1").value(0)
    with pytest.raises(StepUnavailable):  # beyond the range of an ended trial
        tr.tensor("foo_1").value(0, mode=modes.EVAL)
    assert tr.tensor("foo_1").value(3).shape == (2, 3)


def test_collections(trial_url):
    w = Writer(trial_url)
    w.write_tensor("foo_0", np.zeros(2, np.float32), 0, collections=("weights",))
    w.write_tensor("bar_0", np.zeros(2, np.float32), 0)
    w.write_tensor("loss", np.float32(1), 0, collections=("losses",))
    w.close(end_of_training=True)
    trial = create_trial(trial_url)
    assert set(trial.collections()) == {"weights", "losses"}
    # smdebug's tests: collection() makes a collection on demand and lets the
    # caller edit it; tensor_names(collection=) follows the edits.
    c = trial.collection("mine")
    assert c.tensor_names == set() and c.include_regex == [] and c.save_config is None and c.reduction_config is None
    assert trial.tensor_names(collection="mine") == []
    c.include("^bar")
    assert trial.tensor_names(collection="mine") == ["bar_0"]
    trial.collection("mine").add_tensor_name("loss")
    assert trial.tensor_names(collection=c) == ["bar_0", "loss"]
    assert "mine" in trial.collections() and trial.collections()["mine"] is c  # empty ones too
    trial.collection("weights").include("bar")
    assert trial.tensor_names(collection="weights") == ["bar_0", "foo_0"]
    assert trial.collection("weights").tensor_names == {"foo_0"}


# ---------------------------------------------------------------------------
# smdebug's tests/analysis/trials/test_refresh.py and rules/test_rule_no_refresh.py
# ---------------------------------------------------------------------------


def test_no_refresh_shows_the_trial_as_of_the_last_refresh(trial_url):
    num_steps, num_tensors = 8, 10
    w = Writer(trial_url, worker="algo-1")
    for i in range(num_steps):
        generate_data(w, num_tensors, i)
    tr = create_trial(trial_url)
    assert "foo_" + str(num_tensors + 1) not in tr.tensor_names()
    assert "foo_1" in tr.tensor_names()
    assert len(tr.steps()) == num_steps
    assert len(tr.tensor("foo_1").steps()) == num_steps
    for i in range(num_steps, num_steps * 2):
        generate_data(w, num_tensors + 3, i)  # with new tensors foo_10 .. foo_12
    with no_refresh([tr]) as [tr]:
        assert len(tr.tensor("foo_1").steps()) == num_steps
        assert len(tr.steps()) == num_steps
        assert "foo_11" not in tr.tensor_names()
        assert sorted(tr.tensor("foo_1").values()) == list(range(num_steps))
        with pytest.raises(StepNotYetAvailable):
            tr.tensor("foo_1").value(num_steps)
        assert tr.has_passed_step(num_steps) == StepState.NOT_YET_AVAILABLE
    with no_refresh([tr]):
        assert len(tr.tensor("foo_1").steps()) == num_steps
        assert len(tr.steps()) == num_steps
    with no_refresh(tr):
        assert len(tr.tensor("foo_1").steps()) == num_steps
        assert len(tr.steps()) == num_steps
        with refresh(tr):
            assert len(tr.steps()) == num_steps * 2
        assert len(tr.steps()) == num_steps * 2  # as loaded inside refresh
    assert len(tr.tensor("foo_1").steps()) == num_steps * 2
    assert "foo_11" in tr.tensor_names()
    w.close()


def test_no_refresh_invocation(trial_url):
    class TestRule(Rule):
        def __init__(self, base_trial):
            super().__init__(base_trial=base_trial, action_str="")

        def set_required_tensors(self, step):
            for t in self.base_trial.tensor_names():
                self.req_tensors.add(t, steps=[step])

        def invoke_at_step(self, step):
            for t in self.req_tensors.get():
                if step == 0:
                    assert t.value(step + 1) is not None
                elif step == 1:
                    try:
                        t.value(step + 1)
                        assert False
                    except StepNotYetAvailable:
                        pass

    w = Writer(trial_url, worker="algo-1")
    generate_data(w, 3, 0)
    generate_data(w, 3, 1)
    tr = create_trial(trial_url)
    r = TestRule(tr)
    r.invoke(0)
    r.invoke(1)
    generate_data(w, 3, 2)
    # will not see step2 data
    with no_refresh(tr):
        r.invoke_at_step(1)
    # below will refresh
    try:
        r.invoke(1)
        assert False
    except AssertionError:
        pass
    w.close()


def test_rule_of_analysis_md_with_smdebug_constructor_and_report(trial_url):
    w = Writer(trial_url)
    for step in range(4):
        # gradients vanish from step 2
        w.write_tensor("gradient/w", np.full(4, 1.0 if step < 2 else 1e-9, np.float32), step, collections=("gradients",))
        w.end_step(step)
    w.close(end_of_training=True)

    class VanishingGradientRule(Rule):
        def __init__(self, base_trial, threshold=0.0000001):
            super().__init__(base_trial, other_trials=None)
            self.threshold = float(threshold)
            self.seen = []

        def invoke_at_step(self, step):
            for tensorname in self.base_trial.tensor_names(collection="gradients"):
                tensor = self.base_trial.tensor(tensorname)
                abs_mean = tensor.reduction_value(step, "mean", abs=True)
                self.report["Datapoints"] += 1
                self.seen.append(step)
                if abs_mean < self.threshold:
                    self.report["RuleTriggered"] += 1
                    return True
                return False

    trial = create_trial(trial_url)
    rule_obj = VanishingGradientRule(trial, threshold=0.0001)
    assert rule_obj.logger is not None and trial.logger is not None
    invoke_rule(rule_obj, start_step=0, end_step=None)
    assert rule_obj.seen == [0, 1, 2, 3]
    assert rule_obj.report["Datapoints"] == 4 and rule_obj.report["RuleTriggered"] == 2
    with pytest.raises(RuleEvaluationConditionMet) as ei:  # noqa: F405
        invoke_rule(VanishingGradientRule(trial, threshold=0.0001), raise_eval_cond=True)
    assert ei.value.step == 2

    # smdebug's positional order: (base_trial, action_str, other_trials)
    class Pair(Rule):
        def __init__(self, base_trial, other):
            super().__init__(base_trial, "", [other])

        def invoke_at_step(self, step):
            return False

    p = Pair(trial, trial)
    assert p.other_trials == [trial] and p.trials == [trial, trial] and p.action == ""

    class Stopper(Rule):
        def __init__(self, base_trial):
            super().__init__(base_trial, action_str='{"name": "StopTraining", "training_job_prefix": "x"}')

        def invoke_at_step(self, step):
            return False

    assert Stopper(trial).action == "stop"  # smdebug's StopTraining action


# ---------------------------------------------------------------------------
# A trial name with a typo
# ---------------------------------------------------------------------------


def test_a_trial_name_with_a_typo_warns_once_naming_the_nearest(server, caplog):
    with Writer(server.url("resnet-run-1")) as w:
        w.write_tensor("x", np.zeros(1, np.float32), 0)
    typo = create_trial(server.url("resnet-rnu-1"))
    with caplog.at_level(logging.WARNING, logger="tensorkeep"):
        assert typo.steps() == [] and typo.tensor_names() == []
        assert typo.workers() == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "resnet-rnu-1" in warnings[0] and server.address in warnings[0]
    assert "'resnet-run-1'" in warnings[0]


# ---------------------------------------------------------------------------
# Re-running a script into the same trial fails fast, saying what to do
# ---------------------------------------------------------------------------


SENTINELS = ("9223372036854775807", "-1")


def _no_sentinel(message, trial):
    rest = message.replace(trial, "")
    return not any(s in rest for s in SENTINELS)


def test_rerunning_a_hook_script_fails_at_hook(trial_url, trial_name):
    torch = pytest.importorskip("torch", reason="the hook needs python3-torch")
    import tensorkeep.pytorch as smd
    from tensorkeep.exceptions import Conflict

    def run():
        hook = smd.Hook(out_dir=trial_url, save_config=smd.SaveConfig(save_interval=1))
        net = torch.nn.Linear(3, 2)
        hook.register_module(net)
        for _ in range(2):
            net(torch.ones(1, 3)).sum().backward()
        hook.close()

    run()
    with pytest.raises(Conflict) as ei:
        run()
    msg = str(ei.value)
    assert f"trial '{trial_name}'" in msg and "new trial name" in msg and _no_sentinel(msg, trial_name), msg


def test_rerunning_a_writer_fails_at_its_first_flush(trial_url, trial_name):
    from tensorkeep.exceptions import Conflict

    def run(end_of_training):
        w = Writer(trial_url)
        for s in range(3):
            w.write_tensor("x", np.full(2, s + 0.5, np.float32), s)
            w.end_step(s)
        w.flush()
        w.close(end_of_training=end_of_training)

    run(end_of_training=False)  # an interrupted run: the trial goes on
    w = Writer(trial_url)
    w.write_tensor("x", np.zeros(2, np.float32), 0)  # other data at a committed step
    with pytest.raises(Conflict) as ei:
        w.flush()
    msg = str(ei.value)
    assert "writes step 0 again" in msg and "through 2" in msg and "new trial name" in msg, msg
    assert trial_name in msg and _no_sentinel(msg, trial_name), msg
    with pytest.raises(Conflict):
        w.close()

    w2 = Writer(trial_url)
    w2.close(end_of_training=True)  # ends the trial
    w3 = Writer(trial_url)
    with pytest.raises(Conflict) as ei:
        w3.write_tensor("x", np.zeros(2, np.float32), 0)
        w3.flush()
    msg = str(ei.value)
    assert f"trial '{trial_name}' has ended" in msg and "new trial name" in msg and _no_sentinel(msg, trial_name), msg
    with pytest.raises(Conflict):
        w3.close()


def _hooked_linear(trial_url, make_config=lambda smd: smd.SaveConfig(save_interval=100)):
    """A hook saving the "weights" of a Linear(3, 2), in TRAIN mode, with the
    save config ``make_config(tensorkeep.pytorch)``: (torch, tensorkeep.pytorch,
    the hook, the Linear, the save config of TRAIN)."""
    torch = pytest.importorskip("torch", reason="the hook needs python3-torch")
    import tensorkeep.pytorch as smd

    save_config = make_config(smd)
    hook = smd.Hook(out_dir=trial_url, save_config=save_config, include_collections=["weights"])
    net = torch.nn.Linear(3, 2)
    hook.register_module(net)
    hook.set_mode(smd.modes.TRAIN)
    return torch, smd, hook, net, save_config.get_save_config(smd.modes.TRAIN)


def test_save_steps_changed_after_the_hook_was_made_are_honoured(trial_url):
    torch, smd, hook, net, scm = _hooked_linear(trial_url)
    scm.save_steps.append(2)  # in place, as smdebug scripts do
    for step in range(6):
        if step == 3:
            scm.save_steps = [4]  # or replaced
        net(torch.ones(1, 3))
    hook.close()
    assert create_trial(trial_url).steps() == [0, 2, 4]  # interval 100: 0; appended: 2; replaced: 4


def test_changes_within_a_stretch_of_unsaved_steps_are_honoured(trial_url):
    """The hook leaves a step at once while nothing can save before the next
    saving step it computed (issue 16); every change made in the stretch must
    still be seen at the next step: the save config's attributes, its
    save_steps changed in place, a collection's new save config, and a
    scalar saved between two steps. The steps are checked against
    should_save_step asked at every step with the changes applied."""
    torch, smd, hook, net, scm = _hooked_linear(trial_url)
    weights = hook.get_collection("weights")
    changes = {
        5: lambda: scm.save_steps.append(7),  # in place
        10: lambda: setattr(scm, "save_interval", 6),  # 12, 18, 24, ...
        20: lambda: setattr(scm, "end_step", 20),  # the interval's steps end
        25: lambda: scm.save_steps.__setitem__(0, 27),  # 7 -> 27, in place
        32: lambda: setattr(weights, "save_config", smd.SaveConfig(save_steps=[35])),
    }
    expected = []
    for step in range(40):
        if step in changes:
            changes[step]()
        if step == 37:
            hook.save_scalar("between", 1.5)  # after step 36's forward: saved at step 36
        net(torch.ones(1, 3))
        wscm = weights.save_config.get_save_config(smd.modes.TRAIN)
        if wscm.should_save_step(step):
            expected.append(step)
    hook.flush()  # the scalar was written when step 36 ended, not kept until close()
    assert "scalar/between" in create_trial(trial_url).tensor_names()
    hook.close()
    assert expected == [0, 7, 12, 18, 27, 35]
    trial = create_trial(trial_url)
    assert trial.tensor("Linear_weight").steps() == expected
    assert trial.tensor("scalar/between").steps() == [36]
    np.testing.assert_array_equal(trial.tensor("scalar/between").value(36), [1.5])


@pytest.mark.parametrize("case", ["assigned list", "sorted in reverse", "subclass", "prepare again",
                                  "not a number", "a step between the change and its count"])
def test_changes_the_hook_saw_before_its_quiet_stretches_it_still_sees(trial_url, case):
    """What the hook saw at every step before it left unsaved steps at once
    (issue 16), it still sees: a list assigned to save_steps and changed in
    place later (kept as the script's own object), a sort(reverse=True), a
    SaveConfigMode subclass with its own should_save_step, include_collections
    changed with prepared_collections = False (smdebug's way to prepare again),
    a step that is not a number (never saved, no error), and a step that runs
    between a change of save_steps and its count (another thread)."""
    from tensorkeep.core import config_changes

    def every_3(smd):
        class Every3(smd.SaveConfigMode):
            __slots__ = ()

            def should_save_step(self, step_num):
                return step_num % 3 == 0 or super().should_save_step(step_num)

        modes = (smd.modes.TRAIN, smd.modes.EVAL, smd.modes.PREDICT, smd.modes.GLOBAL)
        return smd.SaveConfig(mode_save_configs={m: Every3(save_interval=100) for m in modes})

    if case == "subclass":
        torch, smd, hook, net, scm = _hooked_linear(trial_url, every_3)
    else:
        torch, smd, hook, net, scm = _hooked_linear(trial_url)
    x = torch.ones(1, 3)
    mine = []
    if case == "assigned list":
        scm.save_steps = mine
        assert scm.save_steps is mine
    if case == "prepare again":
        hook.get_collection("biases").save_config = smd.SaveConfig(save_interval=5)
    for step in range(20):
        if step == 5:
            if case == "assigned list":
                mine.append(7)
            elif case == "sorted in reverse":
                scm.save_steps.extend([9, 7])
                scm.save_steps.sort(reverse=True)
                assert scm.save_steps == [9, 7]
            elif case == "prepare again":
                hook.include_collections.append("biases")
                hook.prepared_collections = False
            elif case == "not a number":
                scm.save_steps.append("7")
            elif case == "a step between the change and its count":
                count = config_changes.bump
                config_changes.bump = lambda: (count(), net(x))  # step 5 runs in between
                try:
                    scm.save_steps.append(7)
                finally:
                    config_changes.bump = count
                continue  # step 5 ran
        net(x)
    hook.close()
    trial = create_trial(trial_url)
    expected = {
        "assigned list": [0, 7],
        "sorted in reverse": [0, 7, 9],
        "subclass": list(range(0, 20, 3)),
        "prepare again": [0],
        "not a number": [0],
        "a step between the change and its count": [0, 7],
    }[case]
    assert trial.tensor("Linear_weight").steps() == expected
    if case == "prepare again":
        assert trial.tensor("Linear_bias").steps() == [5, 10, 15]


def test_a_save_config_mode_pickles_as_the_public_class_and_still_counts_its_changes():
    import copy
    import pickle

    from tensorkeep.core import config_changes

    scm = SaveConfigMode(save_interval=7, start_step=2, end_step=50, save_steps=[3, 1])
    data = pickle.dumps(scm)
    assert b"_SaveSteps" not in data
    for back in (pickle.loads(data), copy.deepcopy(scm)):
        assert back == scm and back.save_steps == [1, 3]
        before = config_changes.count
        back.save_steps.append(9)
        assert config_changes.count > before
        assert back.next_save_step(4) == 7 and back.next_save_step(8) == 9
