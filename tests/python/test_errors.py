"""Mapping of failed gRPC calls to tensorkeep's exceptions (tk-reason trailing metadata)."""

import grpc
import pytest

from tensorkeep import _errors, modes
from tensorkeep import exceptions as e


class FakeRpcError(grpc.RpcError, grpc.Call):
    def __init__(self, code, details="", reason=None):
        self._code, self._details = code, details
        self._md = (("tk-reason", reason),) if reason else ()

    def code(self):
        return self._code

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._md

    def initial_metadata(self):
        return ()

    def is_active(self):
        return False

    def time_remaining(self):
        return None

    def cancel(self):
        return False

    def add_callback(self, cb):
        return False


S = grpc.StatusCode


@pytest.mark.parametrize(
    "code,reason,cls",
    [
        (S.NOT_FOUND, "TRIAL_NOT_FOUND", e.TrialNotFound),
        (S.FAILED_PRECONDITION, "TENSOR_UNAVAILABLE", e.TensorUnavailable),
        (S.ABORTED, "TENSOR_UNAVAILABLE_FOR_STEP", e.TensorUnavailableForStep),
        (S.OUT_OF_RANGE, "STEP_UNAVAILABLE", e.StepUnavailable),
        (S.UNAVAILABLE, "STEP_NOT_YET_AVAILABLE", e.StepNotYetAvailable),
        (S.INVALID_ARGUMENT, "INVALID_WORKER", e.InvalidWorker),
        (S.RESOURCE_EXHAUSTED, "NO_MORE_DATA", e.NoMoreData),
        (S.ALREADY_EXISTS, "CONFLICT", e.Conflict),
        (S.INVALID_ARGUMENT, "BAD_REQUEST", e.BadRequest),
        (S.DEADLINE_EXCEEDED, "TIMEOUT", e.WaitTimeout),
        (S.UNAVAILABLE, None, e.CollectorUnavailable),
        (S.RESOURCE_EXHAUSTED, "STORAGE_FULL", e.CollectorUnavailable),
        (S.FAILED_PRECONDITION, "WRONG_COLLECTOR", e.WrongCollector),
        (S.DEADLINE_EXCEEDED, None, e.WaitTimeout),
        (S.INTERNAL, "SOMETHING_NEW", e.TensorkeepError),
    ],
)
def test_reason_decides_the_exception(code, reason, cls):
    err = _errors.translate(
        FakeRpcError(code, "details here", reason), trial="t", tname="w", step=3, mode=modes.TRAIN, worker="worker_9"
    )
    assert type(err) is cls
    assert err.reason == reason and err.details == "details here" and err.code == code.name


def test_smdebug_arguments_and_messages():
    err = _errors.translate(
        FakeRpcError(S.ABORTED, "", "TENSOR_UNAVAILABLE_FOR_STEP"), tname="w", step=3, mode=modes.EVAL
    )
    assert (err.tname, err.step, err.mode) == ("w", 3, modes.EVAL)
    assert str(err) == "Value for tensor w is not available for step 3 with mode EVAL as it was not saved."
    err = _errors.translate(FakeRpcError(S.OUT_OF_RANGE, "", "STEP_UNAVAILABLE"), step=5)
    assert str(err) == "Step 5 of mode GLOBAL is not available as it was not saved"
    err = _errors.translate(FakeRpcError(S.INVALID_ARGUMENT, "", "INVALID_WORKER"), worker="worker_3")
    assert str(err) == "Invalid Worker: worker_3"
    err = _errors.translate(FakeRpcError(S.FAILED_PRECONDITION, "", "TENSOR_UNAVAILABLE"), tname="foo")
    assert str(err) == "Tensor foo was not saved."
    err = _errors.translate(
        FakeRpcError(S.RESOURCE_EXHAUSTED, "trial ended; last step 41", "NO_MORE_DATA"), step=50, mode=modes.GLOBAL
    )
    assert (err.step, err.last_step) == (50, 41)
    assert "Max step available is 41" in str(err)


def test_unknown_reason_keeps_the_servers_message():
    err = _errors.translate(FakeRpcError(S.INTERNAL, "disk on fire", "DISK"))
    assert "disk on fire" in str(err)


def test_connection_failures_and_a_full_disk_are_transient():
    assert _errors.is_transient(FakeRpcError(S.UNAVAILABLE))
    assert not _errors.is_transient(FakeRpcError(S.UNAVAILABLE, reason="STEP_NOT_YET_AVAILABLE"))
    assert not _errors.is_transient(FakeRpcError(S.INVALID_ARGUMENT))
    assert _errors.is_transient(FakeRpcError(S.RESOURCE_EXHAUSTED, reason="STORAGE_FULL"))
    assert not _errors.is_transient(FakeRpcError(S.RESOURCE_EXHAUSTED))  # a cap: resending will not help


def test_exceptions_are_picklable_enough_to_print():
    assert "Evaluation of the rule R at step 4" in str(e.RuleEvaluationConditionMet("R", 4))
    assert str(e.StepNotYetAvailable(3, modes.TRAIN)) == "Step 3 of mode TRAIN not yet available"
