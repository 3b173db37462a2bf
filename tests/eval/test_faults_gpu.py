"""Faults and disturbances a candidate causes on the evaluator's side, on a GPU (issue 36): a
candidate that fills the device's memory after answering is charged (rule `resource`, reward 0),
never an evaluator `error`, and the evaluator serves the next candidate; GPU work a candidate queues
after its last synchronisation (a finalizer) cannot raise its speedup, the eager baseline being
never slower than on a quiet device (tools/timing/quiet.py).

    python -m pytest -m gpu tests/eval/test_faults_gpu.py
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from helpers_eval import assert_ok, describe, source
from tools.evaluate import EvalOptions, Evaluator
from tools.record import Verdict
from tools.reward.score import RewardConfig, score_record

pytestmark = pytest.mark.gpu
PROBLEM = Path(__file__).parents[1] / "gpu_problems" / "elementwise_8m.py"
TRANSIENT = Path(__file__).parents[1] / "gpu_problems" / "transient_workspace.py"
FLOAT64_WORKSPACE = Path(__file__).parents[1] / "gpu_problems" / "float64_workspace.py"
REFERENCE_WORKSPACE = Path(__file__).parents[1] / "gpu_problems" / "reference_workspace.py"
OFF = frozenset({"import", "private-api"})  # the attacks' weakref and torch.cuda private calls reach the run


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    options = EvalOptions(device="cuda:0", timing_budget_s=1.0, trial_timeout=30.0, disabled_rules=OFF,
                          cache_dir=tmp_path_factory.mktemp("ratchet-cache"))
    with Evaluator(PROBLEM, options) as evaluator:
        yield evaluator


def fresh(problem: Path, tmp_path: Path) -> Evaluator:
    """An evaluator of its own for a memory test: its reference's needs measured from its open."""
    options = EvalOptions(device="cuda:0", timing_budget_s=1.0, trial_timeout=60.0, disabled_rules=OFF,
                          cache_dir=tmp_path / "ratchet-cache")
    return Evaluator(problem, options)


def test_filling_device_memory_after_answering_is_the_candidates_fault(ev):
    """Whichever process runs out first: the candidate's own next allocation (its runtime_error, as
    on an H200 in stop 45), or the evaluator's side (rule resource, after the retry and the
    self-check): never an evaluator `error`, never more than a failing candidate earns."""
    dropped = dict(ev.dropped)
    result = ev.evaluate(source("memory_hog"))
    assert result.verdict in (Verdict.REJECTED, Verdict.RUNTIME_ERROR), describe(result)
    if result.verdict is Verdict.REJECTED:
        assert any(c.name == "resource" and not c.passed for c in result.checks), describe(result)
    else:
        assert "out of GPU memory" in result.message, describe(result)
    outcome = score_record(result)
    assert outcome.reward <= RewardConfig().compiled and not outcome.evaluator_fault
    assert ev.dropped == dropped  # the distributions were decided before any candidate, and stay
    assert_ok(ev.evaluate(source("elementwise_ok")))  # the evaluator serves the next candidate


def test_device_memory_announced_beyond_the_requests_cap_is_refused_on_the_gpu(ev):
    """A reply announcing a terabyte of device memory is refused before the parent maps anything
    (tools/processes/replies.py `arena_limit`): rejected, the candidate's, and the evaluator serves
    the next one (on the CPU the same reply is tested in tests/sandbox/test_sandbox_attacks.py)."""
    forgery = frozenset({*OFF, "dunder", "threads-processes", "dynamic-code", "file-io", "own-kernel"})
    with Evaluator(PROBLEM, dataclasses.replace(ev.options, disabled_rules=forgery)) as forged_ev:
        result = forged_ev.evaluate((Path(__file__).parents[1] / "candidates" / "forge_huge_arena.py").read_text())
        assert result.verdict is Verdict.REJECTED and "announces 1099511627776 bytes" in result.message, describe(result)
        assert not score_record(result).evaluator_fault
        assert_ok(forged_ev.evaluate(source("elementwise_ok")))


def test_the_reference_gives_back_a_transient_workspace_before_the_candidate_runs(tmp_path):
    """The reference's forward needs 60% of the card while it runs, the candidate's 45% (returned
    before it answers): both fit one after the other, so the honest candidate is `ok`. Kept cached by
    the reference worker's allocator, the 60% left the candidate too little (its out-of-memory: a
    ResNet BasicBlock's candidates on an H200, whose workers could not even start)."""
    with fresh(TRANSIENT, tmp_path) as evaluator:
        result = evaluator.evaluate(source("transient_workspace_ok"))
    assert_ok(result)


def test_the_reference_keeps_what_its_trials_need_while_a_greedy_candidate_holds_the_card(tmp_path):
    """The reference's forward needs a transient 20% of the card; the candidate holds all but 8% from
    its constructor on and computes honestly. The reference reserved its need at the evaluator's
    open (tools/worker/memory.py), so its trials run and the honest kernel is `ok`: without the
    reservation the reference ran out of memory and the candidate was charged (rule resource)."""
    with fresh(REFERENCE_WORKSPACE, tmp_path) as evaluator:
        result = evaluator.evaluate(source("greedy_hold_ok"))
    assert_ok(result)


def test_a_restarted_reference_reserves_its_need_before_a_greedy_candidate_runs(tmp_path):
    """As above, after the reference worker died between evaluations: the new worker's need starts
    at zero and the parent's cached outputs spare it the trials that measure it, so it redoes the
    evaluator's own work before the next candidate runs (Evaluator._revive_reference). Without that,
    its first request under the greedy candidate ran out of memory and the candidate was charged."""
    import os
    import signal
    import time

    with fresh(REFERENCE_WORKSPACE, tmp_path) as evaluator:
        assert_ok(evaluator.evaluate(source("greedy_hold_ok")))
        os.killpg(evaluator.reference.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while evaluator.reference.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        result = evaluator.evaluate(source("greedy_hold_ok"))
    assert_ok(result)
    assert any(c.name == "reference" and "own work redone" in c.detail for c in result.checks), describe(result)


def test_a_float64_evaluation_starved_of_memory_by_the_candidate_is_its_fault_not_skipped(tmp_path):
    """The reference's float64 evaluation (a transient half of the card, of which the reference keeps a
    quarter reserved) fit when the evaluator opened (tried there, before any candidate); a candidate
    holding the card down to 15% free makes it run out of memory. Recorded
    as "does not fit", that set would be judged by the float32 tolerance alone, and the answer,
    cached per seed, would leave the next candidates unjudged too (attack50 H1): instead the
    candidate is charged (rule resource, or its own out-of-memory), and the next one is judged in
    float64 on every set."""
    with fresh(FLOAT64_WORKSPACE, tmp_path) as evaluator:
        hog = evaluator.evaluate(source("float64_workspace_hog"))
        honest = evaluator.evaluate(source("float64_workspace_ok"))
    assert "does not fit" not in (hog.errors.float64 or ""), describe(hog)
    assert hog.verdict in (Verdict.REJECTED, Verdict.RUNTIME_ERROR), describe(hog)
    if hog.verdict is Verdict.REJECTED:
        assert any(c.name == "resource" and not c.passed for c in hog.checks), describe(hog)
        assert "float64" in hog.message, describe(hog)
    assert not score_record(hog).evaluator_fault
    assert_ok(honest)
    assert (honest.errors.float64 or "").startswith("judged (") and "does not fit" not in honest.errors.float64, honest.errors


def test_gpu_work_queued_after_the_last_sync_does_not_raise_the_speedup(ev):
    """Rejected (the spins lengthen its own back-to-back passes too) or paid no more than the same
    kernel without them: the speedup's eager is never slower than on the quiet device."""
    honest = ev.evaluate(source("elementwise_ok"))
    spun = ev.evaluate(source("finalizer_spin"))
    assert_ok(honest)
    if spun.verdict is Verdict.REJECTED:
        assert any(c.name == "timing:two-clocks" and not c.passed for c in spun.checks), describe(spun)
        assert score_record(spun).reward == 0.0
        return
    assert_ok(spun)
    baseline = [c.detail for c in spun.checks if c.name == "eager-baseline"]
    assert baseline, describe(spun)
    assert spun.speedup_vs_eager <= 1.15 * honest.speedup_vs_eager, (spun.speedup_vs_eager, honest.speedup_vs_eager, baseline)
    assert spun.eager_time.median_ms <= spun.eager_quiet.median_ms
