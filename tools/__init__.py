"""ratchet's evaluator: usable with no agent at all (`ratchet eval`, or from an RL trainer).

    from tools import Evaluator, EvalOptions
    with Evaluator("problem.py", EvalOptions(device="cuda:0")) as ev:
        result = ev.evaluate(candidate_source)      # a tools.record.Result
        print(result.verdict, result.message, result.to_dict())
"""
from tools.evaluate import EvalOptions, Evaluator, evaluate
from tools.problem import ProblemError, ProblemInfo
from tools.record import SCHEMA_VERSION, Result, Verdict

__all__ = ["EvalOptions", "Evaluator", "evaluate", "ProblemError", "ProblemInfo", "Result", "Verdict", "SCHEMA_VERSION"]
