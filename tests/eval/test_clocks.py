"""The second clock's arithmetic (tools/timing/clocks.py): what the parent concludes from the walls of
its passes. The passes themselves need a GPU (tests/eval/test_timing_gpu.py, benchmarks/two_clocks.py);
here the walls follow the model every pass obeys: overhead + calls x time per call."""
from __future__ import annotations

import pytest

from tools.record import TimeStats
from tools.timing.clocks import (BURST_MAX, GAP_ALLOWANCE_MS, INTERCEPT_ALLOWANCE_MS, MORE_REPS, MORE_TIME, NOISE_MAX_FRACTION,
                                 NOISE_MAX_MS, PASS_MS, RATIO, REPS, Passes, burst_size, settle)
from tools.timing.floor import FLOOR_SLACK_MS, QuietPasses
from tools.timing.paid import paid_time


def walls(overhead: float, per_call: float, k: int, reps: int = 3) -> tuple[list[float], list[float]]:
    return [overhead + k * per_call] * reps, [overhead + per_call] * reps


def test_an_honest_candidate_with_more_overhead_than_the_reference_gets_its_true_time():
    eager_k, eager_one = walls(0.28, 0.2, 10)
    # a pass of the candidate's costs a little more besides its calls (honest ones measured up to 0.011 ms more)
    cand_k, cand_one = walls(0.29, 0.1, 10)
    parent, overhead = Passes(cand_k, cand_one, eager_one, eager_k).per_call(10, 0.2)
    assert parent == pytest.approx(0.1) and overhead == pytest.approx(0.29)


def test_padding_the_single_call_gains_at_most_the_allowance():
    """A forger's true time is 0.3 ms; it pads its one-call pass by 5 ms to shrink its slope."""
    eager_k, eager_one = walls(0.5, 0.2, 10)
    cand_k, cand_one = walls(0.5, 0.3, 10)
    padded = [w + 5.0 for w in cand_one]
    parent, overhead = Passes(cand_k, padded, eager_one, eager_k).per_call(10, 0.2)
    assert overhead == pytest.approx(0.5 + INTERCEPT_ALLOWANCE_MS)
    assert parent == pytest.approx(0.3 - INTERCEPT_ALLOWANCE_MS / 10)


def test_reading_a_pass_ahead_pads_the_one_call_pass_and_is_refused():
    """The passes an H200 measured (2026-11-28) for a candidate that computes a pass's later input
    sets in its first call (tests/eval/test_timing_gpu.py, READS_AHEAD at 2^22 elements): its
    one-call pass carries the work of the nine, so its own overhead looks 0.11 ms above the
    reference's; its true time is about 0.0138 ms per call, its worker reported 0.00483."""
    k, median = 9, 0.004832
    p = Passes([0.575, 0.431, 0.431], [0.404, 0.404, 0.405], [0.315, 0.315, 0.313], [0.48, 0.481, 0.483])
    parent, allowed, overhead = p.judge(k, median, 0.0138)
    assert overhead == pytest.approx(0.313 - (0.48 - 0.313) / 8 + INTERCEPT_ALLOWANCE_MS)
    assert parent > allowed, (parent, allowed)


def test_the_references_passes_slowed_beside_the_candidate_cannot_raise_the_floor():
    """A forger's worker reports 0.1 ms for a true 5 ms call (k = 2) and leaves a spin queued behind
    its pass's DONE, so the reference's one-call passes of the same rounds read 11.4 ms (the case
    docs/integrity.md worked out from the formulas): measured beside it, the floor is 11.4 - 5.3
    and the forgery passes; held to the floor a quiet device gave (0.3 ms), it is refused."""
    k, true_ms, reported = 2, 5.0, 0.1
    cand_k, _ = walls(0.3, true_ms, k)
    cand_one = [12.0] * 3  # its own one-call pass padded past the slowed reference's
    eager_one, eager_k = [11.4] * 3, [0.3 + 2 * 5.3] * 3
    beside = Passes(cand_k, cand_one, eager_one, eager_k)
    parent, allowed, _ = beside.judge(k, reported, 5.3)
    assert parent <= allowed, (parent, allowed)  # the hole, without a quiet floor
    quiet = Passes(cand_k, cand_one, eager_one, eager_k, quiet=QuietPasses(0.3, 0.0, k))
    parent, allowed, overhead = quiet.judge(k, reported, 5.3)
    assert overhead == pytest.approx(0.3 + FLOOR_SLACK_MS + INTERCEPT_ALLOWANCE_MS)
    assert parent > allowed and parent == pytest.approx(true_ms - (FLOOR_SLACK_MS + INTERCEPT_ALLOWANCE_MS) / k)


def test_a_quiet_floor_above_the_one_measured_beside_the_candidate_changes_nothing():
    eager_k, eager_one = walls(0.28, 0.2, 10)
    cand_k, cand_one = walls(0.29, 0.1, 10)
    for quiet in (None, QuietPasses(0.28, 0.0, 10), QuietPasses(0.5, 0.0, 10)):
        parent, overhead = Passes(cand_k, cand_one, eager_one, eager_k, quiet=quiet).per_call(10, 0.2)
        assert parent == pytest.approx(0.1) and overhead == pytest.approx(0.29)


def test_one_call_per_pass_charges_the_reference_overhead_plus_the_allowance():
    eager_k, eager_one = walls(1.0, 1.0, 1)
    cand_k, _ = walls(1.5, 0.5, 1)
    parent, overhead = Passes(cand_k, [], eager_one, eager_k).per_call(1, 1.0)
    assert overhead == pytest.approx(1.0 + INTERCEPT_ALLOWANCE_MS)
    assert parent == pytest.approx(0.5 + 0.5 - INTERCEPT_ALLOWANCE_MS)


def test_noise_only_adds_time_so_the_smallest_wall_is_used():
    eager_k, eager_one = walls(0.5, 0.2, 8)
    cand_k, cand_one = walls(0.51, 2.0, 8)
    cand_k[1] += 3.0  # a preemption in one pass
    parent, _ = Passes(cand_k, cand_one, eager_one, eager_k).per_call(8, 0.2)
    assert parent == pytest.approx(2.0)


def test_a_forged_factor_of_one_point_two_is_caught_on_a_fifty_microsecond_kernel():
    """Worker reports 0.05 ms / 1.2; the parent's gated passes (a fixed 0.28 ms each besides the
    calls, as measured on an H200) see 0.05 ms per call."""
    true_ms, reported = 0.05, 0.05 / 1.2
    eager_k, eager_one = walls(0.28, 0.08, 32)
    cand_k, cand_one = walls(0.29, true_ms, 32)
    p = Passes(cand_k, cand_one, eager_one, eager_k)
    parent, _ = p.per_call(32, 0.08)
    assert parent > RATIO * reported + GAP_ALLOWANCE_MS + p.noise(32, 0.08)
    assert parent <= RATIO * true_ms + GAP_ALLOWANCE_MS + p.noise(32, 0.08)  # the honest report passes


def rounds_of(passes: Passes, walls_per_round: list[tuple[float, float, float, float]]):
    """A `measure` for settle(): round n adds the n-th (candidate k, candidate 1, eager 1, eager k)
    walls; it records how many rounds were asked for. Each round takes one second on the returned
    clock: on the real one these rounds take microseconds, and a pause of the test machine during
    the first three made the added rounds' time limit cut them short (CI, stop 32)."""
    asked: list[int] = []
    now = [0.0]

    def measure(rep: int) -> bool:
        asked.append(rep)
        now[0] += 1.0
        cand_k, cand_one, eager_one, eager_k = walls_per_round[min(rep, len(walls_per_round) - 1)]
        passes.candidate.append(cand_k)
        passes.candidate_one.append(cand_one)
        passes.eager_one.append(eager_one)
        passes.eager_k.append(eager_k)
        return True
    return measure, asked, lambda: now[0]


# an honest kernel of 0.19 ms, k = 2, whose first three rounds were each slowed a little (another
# process's work time-sliced with its passes): (candidate k, candidate 1, eager 1, eager k) walls
BUSY_HOST = [(0.70, 0.49, 0.63, 0.98), (0.69, 0.48, 0.62, 0.99), (0.70, 0.49, 0.63, 0.98)]


def test_an_honest_kernel_on_a_busy_host_is_judged_on_more_rounds_not_rejected():
    passes = Passes([], [], [], [])
    quiet = (0.66, 0.47, 0.63, 0.98)  # a fourth round with the device to itself
    measure, asked, clock = rounds_of(passes, [*BUSY_HOST, quiet])
    parent, allowed, _, first = settle(passes, 2, 0.1836, 0.35, measure, clock=clock)
    assert first == pytest.approx(0.21) and first > allowed  # three rounds alone rejected it
    assert len(asked) == REPS + 1 and parent <= allowed
    # its own overhead (0.47 - 0.19) is 0.02 ms above the reference's (0.62 - 0.36): 0.005 ms of it
    # beyond the allowance, 0.0025 ms per call
    assert parent == pytest.approx(0.19 + (0.02 - INTERCEPT_ALLOWANCE_MS) / 2)


def test_a_forged_time_stays_rejected_through_every_added_round():
    """The worker reports 4 ms / 1.5: every round tells the parent the same truth."""
    eager_k, eager_one = walls(0.6, 5.0, 5, reps=1)
    cand_k, cand_one = walls(1.0, 4.0, 5, reps=1)
    passes = Passes([], [], [], [])
    measure, asked, clock = rounds_of(passes, [(cand_k[0], cand_one[0], eager_one[0], eager_k[0])])
    parent, allowed, _, first = settle(passes, 5, 4.0 / 1.5, 5.0, measure, clock=clock)
    assert len(asked) == REPS + MORE_REPS
    assert parent > allowed and first == pytest.approx(parent)


def test_the_added_rounds_never_widen_the_allowance():
    """Only the first REPS rounds' reference spread counts as noise: a candidate that loads the GPU
    while the reference runs its later passes cannot buy itself room."""
    passes = Passes([], [], [], [])
    rounds = [*BUSY_HOST, *[(0.75, 0.5, 0.63, 9.0)] * MORE_REPS]  # slow eager passes from round four on
    measure, asked, clock = rounds_of(passes, rounds)
    parent, allowed, _, _ = settle(passes, 2, 0.1836, 0.35, measure, clock=clock)
    assert len(asked) == REPS + MORE_REPS and parent > allowed
    assert passes.noise(2, 0.35) == pytest.approx((0.99 - 0.98) / 2)
    assert allowed == pytest.approx(RATIO * 0.1836 + GAP_ALLOWANCE_MS + (0.99 - 0.98) / 2)


def test_a_worker_that_stalls_its_answers_does_not_hold_the_check_for_every_added_round():
    """Each round takes one second by the check's clock; the first three took three, so the added
    rounds stop once they have taken MORE_TIME times that, still rejected."""
    eager_k, eager_one = walls(0.6, 5.0, 5, reps=1)
    cand_k, cand_one = walls(1.0, 4.0, 5, reps=1)
    passes = Passes([], [], [], [])
    measure, asked, _ = rounds_of(passes, [(cand_k[0], cand_one[0], eager_one[0], eager_k[0])])
    now = [0.0]

    def clock() -> float:
        return now[0]

    def slow(rep: int) -> bool:
        now[0] += 1.0 if rep < REPS else 4.0  # the added rounds stall
        return measure(rep)
    parent, allowed, _, _ = settle(passes, 5, 4.0 / 1.5, 5.0, slow, clock=clock)
    assert parent > allowed
    assert len(asked) == REPS + int(MORE_TIME * REPS // 4.0) + 1 < REPS + MORE_REPS


def test_a_round_that_sets_the_verdict_ends_the_check():
    passes = Passes([], [], [], [])
    assert settle(passes, 2, 0.2, 0.3, lambda rep: False) is None


def test_calls_per_pass_respect_the_pool_memory_and_work_bounds():
    assert burst_size(4096, 4096, 64, 0.004) == BURST_MAX
    assert burst_size(4096, 4096, 5, 0.004) == 5
    assert burst_size(1 << 30, 1 << 30, 2, 0.5) == 1  # a 1 GiB set: one at a time
    assert burst_size(4096, 4096, 64, 5.0) == int(PASS_MS / 5.0)


def test_every_call_of_a_run_must_be_answered_and_right():
    """The outputs of timed blocks and back-to-back passes (tools.judge.trial_checks.calls_mismatch):
    a worker that answers fewer calls than asked, or not with a list, leaves none unchecked."""
    import torch

    from tools.record import Verdict
    from tools.judge.trial_checks import calls_mismatch

    refs = [torch.arange(4.0), torch.arange(4.0) + 1]
    assert calls_mismatch(refs, [r.clone() for r in refs], None, 0, "timed") is None
    kind, verdict, message = calls_mismatch(refs, refs[:1], None, 0, "timed")
    assert (kind, verdict) == ("count", Verdict.REJECTED) and "2 timed calls with outputs 1" in message
    assert calls_mismatch(refs, {"0": refs[0]}, None, 0, "timed")[:2] == ("count", Verdict.REJECTED)
    kind, verdict, message = calls_mismatch(refs, [refs[0], refs[0]], None, 10, "back-to-back")
    assert (kind, verdict) == ("values", Verdict.INCORRECT) and message.startswith("back-to-back call 12 ")


def test_the_record_says_where_each_pass_went_besides_its_copies():
    """The record keeps, per pass, the gate's opening to the worker's DONE, the busy-wait it took,
    and whether the host's time was on the clock."""
    passes = Passes([4.3, 4.4], [], [7.1, 7.2], [7.1, 7.2], phases=["4.21@1.25", "4.3@2.5 host on clock"])
    text = passes.describe()
    assert text.endswith("gate to done@busy-wait: 4.21@1.25, 4.3@2.5 host on clock")
    assert Passes([], [], [], []).describe().endswith("busy-wait: -")


def test_slowing_the_references_passes_buys_no_room():
    """An attacker's passes on an H200 (stop 48): a 1024^2 matmul (0.0617 ms per call, k = 16) whose
    worker reported a third of it, with a 30 ms spin queued behind one round's reference passes.
    The spread of those passes (2.2 ms) would have been 0.14 ms of noise per call: the forgery
    passed. Capped, the noise is about 2% of eager's time per call."""
    k, eager_ms = 16, 0.0625
    eager_one, eager_k = [0.355, 0.355, 0.356], [1.35, 3.6, 1.351]
    cand_k, cand_one = walls(0.29, 0.0617, k)
    p = Passes(cand_k, cand_one, eager_one, eager_k)
    assert p.noise(k, eager_ms) == pytest.approx(NOISE_MAX_MS + NOISE_MAX_FRACTION * eager_ms)
    parent, allowed, _ = p.judge(k, 0.0617 / 3, eager_ms)
    assert parent > allowed
    honest_parent, honest_allowed, _ = p.judge(k, 0.0617, eager_ms)
    assert honest_parent <= honest_allowed


def test_the_noise_is_held_to_what_a_quiet_devices_passes_spread():
    """The same slowed reference passes, with the quiet passes measured at open (spread 0.004 ms
    over 12 calls): the room per call is that spread's, not 2% of eager's. A forgery of 1.2x on a
    0.05 ms kernel (k = 32) passes with the capped noise and is refused with the held one."""
    k, eager_ms, true_ms = 32, 0.2, 0.05
    eager_one, eager_k = [0.3 + eager_ms] * 3, [0.3 + k * eager_ms, 4.0 + k * eager_ms, 0.3 + k * eager_ms]
    cand_k, cand_one = walls(0.3, true_ms, k)
    capped = Passes(cand_k, cand_one, eager_one, eager_k)
    assert capped.noise(k, eager_ms) == pytest.approx(NOISE_MAX_MS + NOISE_MAX_FRACTION * eager_ms)
    parent, allowed, _ = capped.judge(k, true_ms / 1.2, eager_ms)
    assert parent <= allowed  # the room a slowed reference bought
    held = Passes(cand_k, cand_one, eager_one, eager_k, quiet=QuietPasses(0.3, 0.004, 12))
    assert held.noise(k, eager_ms) == pytest.approx((0.004 + FLOOR_SLACK_MS) / 12)
    parent, allowed, _ = held.judge(k, true_ms / 1.2, eager_ms)
    assert parent > allowed
    honest_parent, honest_allowed, _ = held.judge(k, true_ms, eager_ms)
    assert honest_parent <= honest_allowed


def test_a_quiet_spread_above_the_one_measured_beside_the_candidate_changes_nothing():
    eager_k, eager_one = [2.31, 2.312, 2.311], [0.5, 0.5, 0.5]
    for quiet in (None, QuietPasses(0.3, 0.01, 10), QuietPasses(0.3, 0.5, 4)):
        assert Passes([], [], eager_one, eager_k, quiet=quiet).noise(10, 0.2) == pytest.approx(0.002 / 10)


def test_a_median_below_the_parents_clock_is_paid_at_the_parents_clock():
    reported = TimeStats(measured=True, median_ms=0.0028, ci_low_ms=0.0027, ci_high_ms=0.0030, samples=70, note="n")
    paid = paid_time(reported, 0.0072)
    assert paid.median_ms == 0.0072 and paid.samples == 70
    assert paid.ci_low_ms == pytest.approx(0.0071) and paid.ci_high_ms == pytest.approx(0.0074)
    assert "0.0072 ms per call" in paid.note and "0.0028" in paid.note
