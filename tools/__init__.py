"""ratchet's evaluator: usable with no agent at all (`ratchet eval`, or from an RL trainer).

    from tools import Evaluator, EvalOptions
    with Evaluator("problem.py", EvalOptions(device="cuda:0")) as ev:
        result = ev.evaluate(candidate_source)      # a tools.record.Result
        print(result.verdict, result.message, result.to_dict())
"""
from __future__ import annotations

import importlib
from typing import Any

from tools.record import SCHEMA_VERSION, Result, Verdict

_LAZY = {"EvalOptions": "tools.options", "Evaluator": "tools.evaluate", "evaluate": "tools.evaluate",
         "ProblemError": "tools.problem", "ProblemInfo": "tools.problem"}


def __getattr__(name: str) -> Any:  # torch loads only when the evaluator is used, not for records
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tools' has no attribute {name!r}")


__all__ = ["EvalOptions", "Evaluator", "evaluate", "ProblemError", "ProblemInfo", "Result", "Verdict", "SCHEMA_VERSION"]
