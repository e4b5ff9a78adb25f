"""Deleting trials from Python against a real collector: trials.delete_trial and
Trial.delete, what readers and a writer of the deleted trial see, the name free again,
and the CLI's `tensorkeep delete` (asks nothing, prints what was deleted and reclaimed)."""

import os
import subprocess

import numpy as np
import pytest

import tkdata
from conftest import DEFAULT_BIN_DIR
from tensorkeep import Writer
from tensorkeep.exceptions import TensorkeepError, TrialNotFound
from tensorkeep.trials import create_trial, delete_trial


def _cli() -> str:
    return os.path.join(os.environ.get("TK_BIN_DIR", DEFAULT_BIN_DIR), "tensorkeep")


def test_delete_trial_returns_what_was_deleted_and_readers_get_trial_not_found(server, trial_name):
    tkdata.write_job(server.url(trial_name))
    tkdata.write_job(server.url("other-" + trial_name))
    before = create_trial(server.url("other-" + trial_name)).tensor("layer1.weight").value(3)
    deleted = delete_trial(trial_name, server=server.address)
    assert deleted["trial"] == trial_name
    assert deleted["deleted_by"] == "anonymous"
    assert deleted["steps"] == 10
    assert deleted["workers"] == 1
    assert deleted["tensor_names"] == 5
    assert deleted["reclaimed"] is True
    assert deleted["index_bytes"] > 0
    # As for a trial never written: listings are empty (live analysis waits for a job).
    assert create_trial(server.url(trial_name)).steps() == []
    with pytest.raises(TrialNotFound):
        delete_trial(server.url(trial_name))
    # The other trial is untouched.
    after = create_trial(server.url("other-" + trial_name)).tensor("layer1.weight").value(3)
    assert np.array_equal(before, after)
    assert np.array_equal(after, tkdata.value("layer1.weight", 3))


def test_a_writer_of_a_deleted_trial_gets_a_clear_error_and_the_name_is_free(server, trial_name):
    url = server.url(trial_name)
    w = Writer(url, retry_timeout=5)
    w.write_tensor("x", np.arange(4, dtype=np.float32), step=0)
    w.end_step(0)
    w.flush()
    with create_trial(url) as t:
        t.delete(wait_reclaimed=False)
    with pytest.raises(TensorkeepError, match=f"trial '{trial_name}' was deleted by anonymous"):
        for step in range(1, 50):
            w.write_tensor("x", np.arange(4, dtype=np.float32), step=step)
            w.end_step(step)
            w.flush()
    try:
        w.close()
    except TensorkeepError:
        pass
    # A new writer starts a new trial of the name.
    w2 = Writer(url, retry_timeout=5)
    w2.write_tensor("y", np.ones(3, dtype=np.float32), step=5)
    w2.end_step(5)
    w2.close()
    t = create_trial(url)
    assert t.steps() == [5]
    assert t.tensor_names() == ["y"]


def test_cli_delete_asks_nothing_and_prints_what_was_deleted(server, trial_name):
    cli = _cli()
    if not os.path.exists(cli):
        pytest.skip(f"tensorkeep CLI not built at {cli}")
    tkdata.write_job(server.url(trial_name))
    out = subprocess.run(
        [cli, "--server", server.address, "delete", trial_name],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert f"deleted trial {trial_name} (10 steps, 1 workers, 5 tensor names), by anonymous" in out.stdout
    assert "reclaimed:" in out.stdout
    again = subprocess.run(
        [cli, "--server", server.address, "delete", trial_name], capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 1
    assert "TRIAL_NOT_FOUND" in again.stderr
