"""The package imports from the build directory, with the stubs the build generated."""

import os
import subprocess
import sys

import tensorkeep

SOURCE_PKG = os.path.join(os.path.dirname(__file__), "..", "..", "client", "python", "tensorkeep")


def test_imports_from_pythonpath_in_a_fresh_interpreter():
    code = (
        "import tensorkeep, tensorkeep._proto.tensorkeep_pb2 as pb, tensorkeep._proto.tensorkeep_pb2_grpc;"
        "from tensorkeep import Writer, modes;"
        "from tensorkeep.trials import create_trial, StepState;"
        "from tensorkeep.exceptions import (TensorUnavailableForStep, TensorUnavailable, StepUnavailable,"
        " StepNotYetAvailable, NoMoreData, RuleEvaluationConditionMet, InvalidWorker, TrialNotFound,"
        " TensorkeepError);"
        "from tensorkeep.rules import Rule, invoke_rule;"
        "from tensorkeep.analysis import no_refresh, refresh;"
        "print(tensorkeep.__file__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert out.returncode == 0, out.stderr
    path = os.path.realpath(out.stdout.strip())
    roots = [os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    assert any(path.startswith(r + os.sep) for r in roots), (path, roots)


def test_generated_stubs_live_next_to_the_package_not_in_the_source_tree():
    pkg = os.path.dirname(tensorkeep.__file__)
    assert os.path.exists(os.path.join(pkg, "_proto", "tensorkeep_pb2.py"))
    assert os.path.exists(os.path.join(pkg, "_proto", "tensorkeep_pb2_grpc.py"))
    src_proto = os.path.join(SOURCE_PKG, "_proto")
    assert not [f for f in os.listdir(src_proto) if "_pb2" in f], "stubs must not be committed"


def test_modes_are_smdebugs():
    from tensorkeep import modes

    assert (modes.TRAIN, modes.EVAL, modes.PREDICT, modes.GLOBAL) == (1, 2, 3, 4)
    assert modes.TRAIN.name == "TRAIN"
    from tensorkeep.modes import ModeKeys

    assert modes is ModeKeys


def test_every_exception_derives_from_the_base():
    from tensorkeep import exceptions as e

    for name in (
        "TensorUnavailableForStep TensorUnavailable StepUnavailable StepNotYetAvailable NoMoreData "
        "RuleEvaluationConditionMet InvalidWorker TrialNotFound CollectorUnavailable WaitTimeout "
        "Conflict BadRequest WriterClosed"
    ).split():
        assert issubclass(getattr(e, name), e.TensorkeepError), name
