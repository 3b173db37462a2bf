"""The reference worker dies: between evaluations it is restarted before the next one; during
one, it is restarted and the candidate evaluated again in a fresh worker, so its death is never
charged to the candidate and the evaluator goes on (batch and RL runs evaluate thousands of
candidates against one reference worker)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from helpers_eval import PROBLEMS, assert_verdict, options, source
from tools import Evaluator, Verdict

pytestmark = pytest.mark.timeout(300)

# relu(x + y) * scale (tests/problems/elementwise.py), whose forward kills its own process the
# first time it runs after the test drops a marker file next to it
DIES_ONCE = (PROBLEMS / "elementwise.py").read_text().replace(
    "    def forward(self, x, y):\n",
    "    def forward(self, x, y):\n"
    "        if MARK.exists():\n"
    "            MARK.unlink()\n"
    "            os._exit(7)\n",
).replace("import torch\n", "import os\nfrom pathlib import Path\n\nimport torch\n\nMARK = Path(__file__).with_name('die-once')\n", 1)


def reference_check(result) -> str:
    found = [c.detail for c in result.checks if c.name == "reference"]
    return found[0] if found else ""


def test_a_reference_killed_between_evaluations_is_restarted(tmp_path):
    with Evaluator(PROBLEMS / "elementwise.py", options(tmp_path / "cache", trials=2)) as ev:
        assert ev.evaluate(source("elementwise_ok")).verdict is Verdict.OK
        first = ev.reference.proc.pid
        os.killpg(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while ev.reference.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        result = ev.evaluate(source("elementwise_ok"))
        assert result.verdict is Verdict.OK, result.message
        assert ev.reference.restarts == 1 and ev.reference.proc.pid != first and ev.reference.alive()
        assert "own work redone with no candidate running" in reference_check(result)
        assert ev.evaluate(source("elementwise_ok")).verdict is Verdict.OK  # and it goes on


def test_a_reference_dying_during_an_evaluation_is_not_the_candidates_fault(tmp_path):
    problem = tmp_path / "dies_once.py"
    problem.write_text(DIES_ONCE)
    # no cache of reference outputs: every trial asks the reference worker
    with Evaluator(problem, options(tmp_path / "cache", trials=2, reference_cache_mb=0)) as ev:
        assert ev.evaluate(source("elementwise_ok")).verdict is Verdict.OK
        (tmp_path / "die-once").write_text("")
        result = ev.evaluate(source("elementwise_ok"))
        assert not (tmp_path / "die-once").exists(), "the reference never ran the forward"
        assert result.verdict is Verdict.OK, result.message
        assert ev.reference.restarts == 1
        assert "reference worker" in reference_check(result) and "evaluated again" in reference_check(result)
        wrong = ev.evaluate(source("elementwise_ok").replace("* scale", "* scale + 1.0"))
        assert wrong.verdict is Verdict.INCORRECT  # the restarted reference still judges


def test_reference_outputs_larger_than_the_cache_are_not_kept(tmp_path):
    """A trial's reference outputs and inputs larger than reference_cache_mb are used and let go
    (on a GPU read in place, not copied): kept by the parent, a multi-GB set took the room the
    timing needs on an 80 GiB GPU. Wrong outputs and inputs written into are still caught."""
    with Evaluator(PROBLEMS / "elementwise.py", options(tmp_path / "cache", trials=2, reference_cache_mb=0)) as ev:
        assert ev.evaluate(source("elementwise_ok")).verdict is Verdict.OK
        assert ev.reference.cache == {}
        assert ev.evaluate(source("elementwise_ok").replace("* scale", "* scale + 1.0")).verdict is Verdict.INCORRECT
        assert_verdict(ev.evaluate(source("writes_input")), Verdict.INCORRECT, "inputs-unchanged:values", "input[1]")
    with Evaluator(PROBLEMS / "elementwise.py", options(tmp_path / "cache", trials=2)) as ev:
        assert ev.evaluate(source("elementwise_ok")).verdict is Verdict.OK
        assert len(ev.reference.cache) >= 2  # small sets are kept for the next candidate
