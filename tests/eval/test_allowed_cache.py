"""What a problem allows (its input distributions, the sizes its float64 evaluation fits) is decided
when its first evaluator opens, before any candidate, and kept with the baselines
(tools/timing/baseline_cache.py, "allowed/"): the next evaluator of the same problem, environment
and setting reads it back instead of deciding again (issue 36: decided once per problem, on a quiet
device; an evaluator opened beside another's running candidate must not decide under its load)."""
from __future__ import annotations

import json
import warnings

from helpers_eval import assert_ok, evaluator, source
from tools.timing.baseline_cache import CacheWarning


def entries(cache_dir):
    return sorted((cache_dir / "baselines" / "allowed").glob("*.json"))


def test_the_decision_is_kept_and_read_back_by_the_next_evaluator(tmp_path):
    with evaluator("log_mul", tmp_path) as ev:
        first = dict(ev.dropped)
    assert list(first) == ["signed"], first
    [path] = entries(tmp_path)
    entry = json.loads(path.read_text())
    assert entry["kind"] == "allowed" and entry["value"]["distributions"]["dropped"] == first
    assert entry["value"]["distributions"]["names"] == ["problem", "shifted", "signed:1", "stress:1000"]

    # a decision this problem would not make (stress dropped too): read back, not decided again
    entry["value"]["distributions"]["names"] = ["problem", "shifted", "signed:1"]
    entry["value"]["distributions"]["dropped"]["stress"] = "kept from an earlier open"
    path.write_text(json.dumps(entry))
    with evaluator("log_mul", tmp_path) as ev:
        assert ev.dropped["stress"] == "kept from an earlier open"
        result = ev.evaluate(source("log_mul_ok"))
    assert_ok(result)
    assert result.distributions == ["problem", "shifted", "signed:1", "problem", "shifted"], result.distributions


def test_an_entry_that_is_not_a_decision_is_decided_again(tmp_path):
    with evaluator("log_mul", tmp_path):
        pass
    [path] = entries(tmp_path)
    entry = json.loads(path.read_text())
    entry["value"]["distributions"]["names"] = ["stress:1000", "problem"]  # out of the rotation's order
    path.write_text(json.dumps(entry))
    with evaluator("log_mul", tmp_path) as ev:
        assert "stress" not in ev.dropped
        result = ev.evaluate(source("log_mul_ok"))
    assert result.distributions == ["problem", "shifted", "signed:1", "stress:1000", "problem"]
    assert json.loads(path.read_text())["value"]["distributions"]["names"][0] == "problem"  # written again

    path.write_text("{ not json")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with evaluator("log_mul", tmp_path) as ev:
            assert list(ev.dropped) == ["signed"]
    assert any(issubclass(w.category, CacheWarning) for w in caught)
