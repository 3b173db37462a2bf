"""The second clock against what an attacker helper found on an H200 (stop 48), on a GPU: a worker
median forged 3x on a 1024^2 matmul, with a 30 ms spin queued behind one of the parent's passes
so that the reference's passes of that round run slow and widen the rule's noise term (0.14 ms
per call: the forgery passed, paid 3x). The noise term is capped now (tools/timing/clocks.py
`Passes.noise`), and a median well below the parent's clock is not paid (tools/timing/paid.py):
a 1.2x forgery on a kernel of some 25 us passes the rule inside its 5 us allowance, and is paid
at the parent's clock. The same spin queued behind every pass slows each round's reference passes
and would raise the floor subtracted from the candidate's; it is held to a quiet device's now
(tools/timing/floor.py).

    python -m pytest -m gpu tests/eval/test_clocks_gpu.py
"""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers_eval import assert_ok, describe, source
from tools.evaluate import EvalOptions, Evaluator
from tools.record import Verdict
from tools.reward.score import score_record

pytestmark = pytest.mark.gpu
MATMUL = Path(__file__).parents[1] / "gpu_problems" / "matmul_fp32.py"
ELEMENTWISE = Path(__file__).parents[1] / "gpu_problems" / "elementwise_8m.py"
# what native code owning the process can do, in Python: every time its worker reads divided by 1.2
FORGE = """
import sys

_timing = sys.modules["tools.worker.timing"]
_real = _timing._elapsed
_timing._elapsed = lambda a, b: _real(a, b) / 1.2
"""


# noise_forge_mm's spin queued behind every one of its gated k-call passes, not one: each round's
# reference passes run beside it, the one-call pass first, so the floor they give grows (not only the
# noise term); its worker's times divided by 2
EVERY_PASS = """
FACTOR = 2.0
SPIN_NS = {ns}


def _after_every_pass(self):
    batch, self.calls = self.calls, 0
    if batch >= BURST_MIN and self.buf is not None:
        spin_kernel[(1,)](self.buf, SPIN_NS)


Spinner.freed = _after_every_pass
"""


def assert_not_paid(forged, honest) -> None:
    """Refused by the second clock (reward 0), or ok and paid no more than the honest kernel."""
    print(describe(forged), [c.detail for c in forged.checks if c.name == "timing:two-clocks"])
    if forged.verdict is Verdict.REJECTED:
        assert any(c.name == "timing:two-clocks" and not c.passed for c in forged.checks), describe(forged)
        assert score_record(forged).reward == 0.0
        return
    assert forged.verdict is Verdict.OK, describe(forged)  # paid at the parent's clock: no more than honest
    assert forged.speedup_vs_eager <= 1.1 * honest.speedup_vs_eager, (forged.speedup_vs_eager, honest.speedup_vs_eager)


def test_a_forged_median_cannot_buy_room_by_slowing_the_references_passes():
    options = EvalOptions(device="cuda:0", disabled_rules=frozenset({"import"}))  # the forgery reaches the timer
    with Evaluator(MATMUL, options) as ev:
        honest = ev.evaluate(source("mm_ieee_tiles_ok"))
        forged = ev.evaluate(source("noise_forge_mm"))
        every = [ev.evaluate(source("noise_forge_mm") + EVERY_PASS.format(ns=ms * 1_000_000)) for ms in (3, 30)]
    assert_ok(honest)
    for record in (forged, *every):  # the floor held to a quiet device's (tools/timing/floor.py)
        assert_not_paid(record, honest)


def test_a_forged_median_inside_the_allowance_is_paid_at_the_parents_clock():
    options = EvalOptions(device="cuda:0", disabled_rules=frozenset({"import"}))
    with Evaluator(ELEMENTWISE, options) as ev:
        honest = ev.evaluate(source("elementwise_ok"))
        forged = ev.evaluate(source("elementwise_ok") + FORGE)
    assert_ok(honest)
    if forged.verdict is Verdict.REJECTED:  # outside the allowance after all: refused, paid nothing
        assert any(c.name == "timing:two-clocks" and not c.passed for c in forged.checks), describe(forged)
        return
    assert forged.verdict is Verdict.OK, describe(forged)
    assert "the parent's clock" in forged.candidate_time.note, forged.candidate_time
    assert forged.speedup_vs_eager <= 1.1 * honest.speedup_vs_eager, (forged.speedup_vs_eager, honest.speedup_vs_eager)
