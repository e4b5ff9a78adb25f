"""tensor_names' regexes run in the collector with RE2: re.search semantics,
linear time, and a regex RE2 refuses raises BadRequest with the collector's reason."""

import time

import numpy as np
import pytest

from tensorkeep import Writer
from tensorkeep.exceptions import BadRequest
from tensorkeep.trials import create_trial

NAMES = ["Net_fc1.weight", "gradient/Net_fc1.weight", "a" * 36 + "!", "a" * 36]


@pytest.fixture
def job(trial_url):
    with Writer(trial_url, worker="worker_0") as w:
        for n in NAMES:
            w.write_tensor(n, np.zeros(2, np.float32), step=0)
    with create_trial(trial_url) as t:
        yield t


def test_search_semantics(job):
    assert job.tensor_names(regex="fc1") == ["Net_fc1.weight", "gradient/Net_fc1.weight"]
    assert job.tensor_names(regex="^gradient/") == ["gradient/Net_fc1.weight"]
    assert job.tensor_names(regex=["weight$", "!"]) == sorted(
        ["Net_fc1.weight", "gradient/Net_fc1.weight", "a" * 36 + "!"]
    )


def test_catastrophic_pattern_answers_at_once(job):
    start = time.monotonic()
    assert job.tensor_names(regex="(a+)+$") == ["a" * 36]
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(
    "regex,message",
    [
        (r"(a)\1", "backreferences are not supported"),
        ("(?=a)", "lookahead and lookbehind are not supported"),
        ("fc[1", "invalid regex 'fc[1'"),
    ],
)
def test_bad_regex_raises_bad_request_with_the_reason(job, regex, message):
    with pytest.raises(BadRequest) as raised:
        job.tensor_names(regex=regex)
    assert message in str(raised.value)
