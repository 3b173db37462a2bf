"""The second clock's arithmetic (tools/clocks.py): what the parent concludes from the walls of
its passes. The passes themselves need a GPU (tests/eval/test_timing_gpu.py, benchmarks/two_clocks.py);
here the walls follow the model every pass obeys: overhead + calls x time per call."""
from __future__ import annotations

import pytest

from tools.clocks import BURST_MAX, HOST_ALLOWANCE_MS, PASS_MS, RATIO, REQUEST_ALLOWANCE_MS, Passes, burst_size


def walls(overhead: float, per_call: float, k: int, reps: int = 3) -> tuple[list[float], list[float]]:
    return [overhead + k * per_call] * reps, [overhead + per_call] * reps


def test_an_honest_candidate_with_more_overhead_than_the_reference_gets_its_true_time():
    eager_k, eager_one = walls(0.5, 0.2, 10)
    cand_k, cand_one = walls(0.95, 0.1, 10)  # a sandboxed worker answers 0.45 ms slower
    parent, overhead = Passes(cand_k, cand_one, eager_one, eager_k).per_call(10, 0.2)
    assert parent == pytest.approx(0.1) and overhead == pytest.approx(0.95)


def test_padding_the_single_call_gains_at_most_the_allowance():
    """A forger's true time is 0.3 ms; it pads its one-call pass by 5 ms to shrink its slope."""
    eager_k, eager_one = walls(0.5, 0.2, 10)
    cand_k, cand_one = walls(0.5, 0.3, 10)
    padded = [w + 5.0 for w in cand_one]
    parent, overhead = Passes(cand_k, padded, eager_one, eager_k).per_call(10, 0.2)
    assert overhead == pytest.approx(0.5 + REQUEST_ALLOWANCE_MS)
    assert parent == pytest.approx(0.3 - REQUEST_ALLOWANCE_MS / 10)


def test_one_call_per_pass_charges_the_reference_overhead_plus_the_allowance():
    eager_k, eager_one = walls(1.0, 1.0, 1)
    cand_k, _ = walls(1.5, 0.5, 1)
    parent, overhead = Passes(cand_k, [], eager_one, eager_k).per_call(1, 1.0)
    assert overhead == pytest.approx(1.0 + REQUEST_ALLOWANCE_MS)
    assert parent == pytest.approx(0.5 + 0.5 - REQUEST_ALLOWANCE_MS)


def test_noise_only_adds_time_so_the_smallest_wall_is_used():
    eager_k, eager_one = walls(0.5, 0.2, 8)
    cand_k, cand_one = walls(0.6, 2.0, 8)
    cand_k[1] += 3.0  # a preemption in one pass
    parent, _ = Passes(cand_k, cand_one, eager_one, eager_k).per_call(8, 0.2)
    assert parent == pytest.approx(2.0)


def test_a_forged_factor_of_one_and_a_half_is_caught_on_a_few_millisecond_kernel():
    """Worker reports 4 ms / 1.5; the parent sees 4 ms per call."""
    true_ms, reported = 4.0, 4.0 / 1.5
    eager_k, eager_one = walls(0.6, 5.0, 5)
    cand_k, cand_one = walls(1.0, true_ms, 5)
    p = Passes(cand_k, cand_one, eager_one, eager_k)
    parent, _ = p.per_call(5, 5.0)
    assert parent > RATIO * reported + HOST_ALLOWANCE_MS + p.noise(5)
    assert parent <= RATIO * true_ms + HOST_ALLOWANCE_MS + p.noise(5)  # the honest report passes


def test_calls_per_pass_respect_the_pool_memory_and_work_bounds():
    assert burst_size(4096, 4096, 64, 0.004) == BURST_MAX
    assert burst_size(4096, 4096, 5, 0.004) == 5
    assert burst_size(1 << 30, 1 << 30, 2, 0.5) == 1  # a 1 GiB set: one at a time
    assert burst_size(4096, 4096, 64, 5.0) == int(PASS_MS / 5.0)


def test_every_call_of_a_run_must_be_answered_and_right():
    """The outputs of timed blocks and back-to-back passes (tools.trial_checks.calls_mismatch):
    a worker that answers fewer calls than asked, or not with a list, leaves none unchecked."""
    import torch

    from tools.record import Verdict
    from tools.trial_checks import calls_mismatch

    refs = [torch.arange(4.0), torch.arange(4.0) + 1]
    assert calls_mismatch(refs, [r.clone() for r in refs], None, 0, "timed") is None
    kind, verdict, message = calls_mismatch(refs, refs[:1], None, 0, "timed")
    assert (kind, verdict) == ("count", Verdict.REJECTED) and "2 timed calls with outputs 1" in message
    assert calls_mismatch(refs, {"0": refs[0]}, None, 0, "timed")[:2] == ("count", Verdict.REJECTED)
    kind, verdict, message = calls_mismatch(refs, [refs[0], refs[0]], None, 10, "back-to-back")
    assert (kind, verdict) == ("values", Verdict.INCORRECT) and message.startswith("back-to-back call 12 ")
