"""Workers started from a thread that then ends still serve (tools/processes/launcher.py).

Linux sends a child's parent-death signal when the *thread* that started it ends. An evaluator
made on one thread (a reward's pool thread, a batch slot's thread, a server's connection thread)
and used after that thread ended found its spare worker and the bwrap holding its sandbox killed,
and judged an honest kernel `crashed`. Both tests run the real sandbox the machine has."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from helpers_eval import assert_ok, evaluator, source


def made_on_a_thread_that_ends(make):
    made: dict = {}
    thread = threading.Thread(target=lambda: made.update(value=make()))
    thread.start()
    thread.join()
    assert not thread.is_alive() and "value" in made
    return made["value"]


def test_an_evaluator_made_on_a_thread_that_ended_judges_an_honest_kernel_ok(tmp_path: Path) -> None:
    ev = made_on_a_thread_that_ends(lambda: evaluator("elementwise", tmp_path, spares=1))
    try:
        time.sleep(1.0)  # a parent-death signal has long arrived by now
        assert_ok(ev.evaluate(source("elementwise_ok")))
        assert_ok(ev.evaluate(source("elementwise_ok") + "\n# again, a fresh worker\n"))
    finally:
        ev.close()


def test_an_evaluation_on_a_thread_that_ends_leaves_the_next_one_working(tmp_path: Path) -> None:
    ev = evaluator("elementwise", tmp_path, spares=1)
    try:
        first = made_on_a_thread_that_ends(lambda: ev.evaluate(source("elementwise_ok")))  # starts the next spare there
        assert_ok(first)
        time.sleep(1.0)
        assert_ok(ev.evaluate(source("elementwise_ok") + "\n# the spare started on the ended thread\n"))
    finally:
        ev.close()


def test_a_spare_killed_before_it_was_handed_the_candidate_is_replaced_not_charged(tmp_path: Path) -> None:
    """Whoever kills a spare worker before it gets a candidate (a zygote killed under it, as CI saw:
    "the worker zygote ended before it forked this worker: exit status -9"), the candidate is not
    `crashed`: another worker is taken."""
    ev = evaluator("elementwise", tmp_path, spares=1)
    try:
        spare = ev._spares[0]
        spare.stop()  # SIGKILL its process group and its sandbox's holder
        spare.proc.wait(timeout=30)
        result = ev.evaluate(source("elementwise_ok"))
        assert_ok(result)
        assert result.phases.get("start_retries") == 1
    finally:
        ev.close()
