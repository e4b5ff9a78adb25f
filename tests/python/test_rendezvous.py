"""Rendezvous hashing in Python against the vectors shared with C++
(tests/data/rendezvous_vectors.txt, computed with coreutils' sha256sum), and
collector lists as the environment and URLs give them."""

import os

import pytest

from tensorkeep import _address, _rendezvous

VECTORS = os.path.join(os.path.dirname(__file__), "..", "data", "rendezvous_vectors.txt")


def _lines(kind):
    with open(VECTORS) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                fields = line.split()
                if fields[0] == kind:
                    yield fields[1:]


def test_scores_match_the_shared_vectors():
    rows = list(_lines("score"))
    assert len(rows) >= 20
    for collector, trial, hex_score in rows:
        assert f"{_rendezvous.score(collector, trial):016x}" == hex_score, (collector, trial)


def test_rankings_match_the_shared_vectors():
    rows = list(_lines("ranking"))
    assert len(rows) >= 4
    for trial, expected in rows:
        expected = expected.split(",")
        assert _rendezvous.ranking(list(reversed(expected)), trial) == expected
        assert _rendezvous.owner(expected[::-1], trial) == expected[0]


def test_cluster_lists_from_urls_and_environment(monkeypatch):
    monkeypatch.delenv("TENSORKEEP_SERVER", raising=False)
    monkeypatch.setenv("TENSORKEEP_SERVERS", "a:1, b:2")
    assert _address.resolve_servers() == ["a:1", "b:2"]
    monkeypatch.setenv("TENSORKEEP_SERVER", "c:3")
    assert _address.resolve_servers() == ["a:1", "b:2"]  # the list wins
    assert _address.resolve_servers("d:4,e:5") == ["d:4", "e:5"]
    monkeypatch.delenv("TENSORKEEP_SERVERS")
    assert _address.resolve_servers() == ["c:3"]
    # One collector: nothing is asked, the trial is there.
    assert _address.parse("tensorkeep://h:1/t").servers == ("h:1",)


@pytest.mark.parametrize("bad", ["a:1,", "a:1,,b:2", "a:1,a:1", "a:1,b"])
def test_bad_cluster_lists_are_refused(bad):
    with pytest.raises(ValueError):
        _address.check_targets(bad)
    with pytest.raises(ValueError):
        _address.parse(f"tensorkeep://{bad}/t")
