"""What a fault holds is let go of before anything runs again (tools/selfcheck.py `let_go`): a
traceback keeps its frames' locals, and on a GPU the parent's views of a candidate's arena among
them keep the candidate's memory allocated after its worker is killed (an attacker helper's
design, stop 57: a wrong kernel announced all the card's free memory as its arena, the parent's
comparison ran out of memory, and the retry and the self-check ran short for as long as the two
exceptions lived, so the candidate's failure read as the evaluator's `error`)."""
from __future__ import annotations

import gc
import weakref

import torch

from tools.evaluate import CandidateRan
from tools.selfcheck import let_go


def compare(view: torch.Tensor, watched: list[weakref.ref]) -> None:
    held = view * 2  # a local of a finished frame, as a comparison's decoded outputs are
    watched.append(weakref.ref(held))
    raise RuntimeError(f"out of memory comparing {held.numel()} elements")


def fault_holding(view: torch.Tensor, watched: list[weakref.ref]) -> CandidateRan:
    try:
        try:
            compare(view, watched)
        except RuntimeError as exc:
            raise CandidateRan(exc) from exc
    except CandidateRan as ran:
        return ran
    raise AssertionError("compare() raised nothing")


def test_the_locals_of_a_faults_frames_are_released_and_its_message_kept():
    view, watched = torch.arange(8), []
    first, again = fault_holding(view, watched), fault_holding(view, watched)
    gc.collect()
    assert all(w() is not None for w in watched)  # what the faults keep while they live
    let_go(first, again)
    assert all(w() is None for w in watched)
    assert str(first.cause) == "out of memory comparing 8 elements"
