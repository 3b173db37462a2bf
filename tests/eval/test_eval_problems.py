"""Malformed problem files: a one-line error naming the file and what is wrong, as a ProblemError
from the Python API and as `ratchet eval` exit code 3 with that one line on stderr (never a
traceback). And a user's module whose class is not called Model works with --entry.
"""
from __future__ import annotations

import pytest

from agent.cli import main
from helpers_eval import BAD_PROBLEMS, CANDIDATES, PROBLEMS, options
from tools import Evaluator, ProblemError
from agent.cli.exit_codes import EXIT_BAD_PROBLEM


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ratchet-cache")


BAD = [  # (file in tests/problems/bad, fragments of the one-line error)
    ("syntax_error", ["syntax error at line 5"]),
    ("no_model", ["defines no class Model", "classes here: Net", "--entry"]),
    ("no_get_inputs", ["defines no get_inputs()"]),
    ("get_inputs_raises", ["in get_inputs", "RuntimeError", "cannot be multiplied"]),
    ("get_inputs_not_list", ["get_inputs() returned dict, expected a list"]),
    ("model_init_raises", ["in __init__", "ValueError: unsupported width 7"]),
    ("forward_raises", ["in forward", "RuntimeError", "is invalid for input of size 64"]),
    ("returns_dict", ["forward() returns a dict, which ratchet cannot compare"]),
]


@pytest.mark.parametrize("name,fragments", BAD, ids=[b[0] for b in BAD])
def test_bad_problem_one_line_error(cache_dir, capsys, name, fragments):
    path = BAD_PROBLEMS / f"{name}.py"
    with pytest.raises(ProblemError) as caught:
        Evaluator(path, options(cache_dir))
    message = str(caught.value)
    assert "\n" not in message
    assert f"{name}.py: " in message
    for fragment in fragments:
        assert fragment in message, message

    code = main(["eval", str(path), str(CANDIDATES / "elementwise_ok.py"), "--device", "cpu", "--no-timing"])
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_PROBLEM
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("ratchet eval: ") and "Traceback" not in err
    assert message in err


def test_entry_names_the_class(capsys):
    candidate = str(CANDIDATES / "elementwise_ok.py")
    problem = str(PROBLEMS / "user_module.py")
    assert main(["eval", problem, candidate, "--device", "cpu", "--no-timing", "--entry", "GatedResidual"]) == 0
    out, _ = capsys.readouterr()
    assert "elementwise_ok.py: ok" in out
    # without --entry the error says which classes there are
    assert main(["eval", problem, candidate, "--device", "cpu", "--no-timing"]) == EXIT_BAD_PROBLEM
    _, err = capsys.readouterr()
    assert "defines no class Model (classes here: GatedResidual, Helper; pick one with --entry)" in err
    # an --entry that does not exist
    assert main(["eval", problem, candidate, "--device", "cpu", "--entry", "Missing"]) == EXIT_BAD_PROBLEM
    _, err = capsys.readouterr()
    assert "defines no class Missing" in err and err.count("\n") == 1
