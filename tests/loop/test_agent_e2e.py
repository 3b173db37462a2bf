"""`ratchet optimize` end to end on the CPU: the real CLI, graph, evaluator (Triton under the
interpreter) and git workspace, against a scripted model on the loopback HTTP server."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.workspace.root import Workspace
from helpers_agent import quiet_agent_env
from loopback import Loopback, error, hold, submit, text, tool_call, tool_calls

HERE = Path(__file__).parents[1]
PROBLEM = HERE / "agent_problems" / "relu_add.py"
sys.path.insert(0, str(PROBLEM.parent))
from relu_add_candidates import BROKEN, CHEAT, FASTER, FIXED, WRONG  # noqa: E402

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def fast_settings(monkeypatch):
    quiet_agent_env(monkeypatch)


def optimize(server: Loopback, workspace: Path, capsys, *extra: str) -> tuple[int, dict, str]:
    code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url,
                 "--workspace", str(workspace), "--json", *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def committed(workspace: Path) -> list:
    with Workspace(workspace).open_existing(PROBLEM) as repo:
        return repo.attempts()


def trajectory(workspace: Path) -> dict:
    with Workspace(workspace).open_existing(PROBLEM) as repo:
        [saved] = repo.trajectories()  # one run
        return json.loads(saved.text)


def test_build_error_then_fix_then_faster(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RATCHET_STOP_UNTIMED", "0")  # go on past the first correct kernel, as on a GPU
    script = [submit(BROKEN), submit(FIXED, reasoning="The import was wrong; drop it."),
              submit(FASTER, content="Process two elements per thread.\nThe rest is unchanged.")]
    with Loopback(script) as server:
        code, summary, err = optimize(server, tmp_path, capsys, "--max-attempts", "3")
    assert code == 0, err
    attempts = committed(tmp_path)
    assert [a.number for a in attempts] == [1, 2, 3]
    assert [a.verdict.value for a in attempts] in (["compile_error", "ok", "ok"], ["runtime_error", "ok", "ok"])
    assert summary["verdicts"] == [a.verdict.value for a in attempts]
    assert summary["stop_reason"].startswith("attempt budget spent")
    # the best is the fastest correct attempt; on the CPU nothing is timed, so the first correct one stays
    best = next(a for a in attempts if a.is_best)
    assert best.ok and summary["best"]["attempt"] == best.number
    assert best.number == (3 if attempts[2].timed and attempts[1].timed and attempts[2].median_ms < attempts[1].median_ms else 2)
    assert Path(summary["best_path"]).read_text() == (FIXED if best.number == 2 else FASTER)
    # the model saw the evaluator's message for the failed build, as the result of its own call
    second = server.requests[1].messages
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == second[-2]["tool_calls"][0]["id"]
    assert "no_such_name" in second[-1]["content"]
    assert all("reasoning_content" not in m for r in server.requests for m in r.messages)
    # progress on stderr, one line per attempt
    assert "[1/3] attempt 1" in err and "[3/3] attempt 3: ok" in err
    # the full trajectory is in the workspace: three model turns, their usage, reasoning kept
    saved = trajectory(tmp_path)
    assert [m["role"] for m in saved["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert saved["messages"][4]["reasoning_content"].startswith("The import")
    assert len(saved["usage"]) == 3 and saved["tokens_used"] == summary["tokens_used"] > 0
    assert saved["stop_reason"] == summary["stop_reason"]
    # the history reads like a review: the reference and one commit per attempt on main, each
    # body saying what changed and what it measured; the trajectory as of each attempt on its own ref
    with Workspace(tmp_path).open_existing(PROBLEM) as repo:
        log = subprocess.run(["git", "-C", str(repo.path), "log", "--format=%s%x1f%b%x1e", "main"],
                             capture_output=True, text=True, check=True).stdout
        entries = [e.strip("\n").split("\x1f") for e in log.split("\x1e") if e.strip()]
        assert [subject for subject, _ in entries] == [a.subject for a in reversed(attempts)] + [f"reference: {PROBLEM.name}"]
        third = entries[0][1]
        assert "Change: Process two elements per thread.\n" in third and "The rest" not in third
        assert "Verdict: ok" in third and "Time: none, unavailable: no GPU" in third
        assert "Diff: +" in third and "lines against attempt 2, the best before it" in third
        assert "Change:" not in entries[2][1] and "Failed check:" in entries[2][1]  # attempt 1 did not build
        for att in attempts:
            at_commit = json.loads(repo.trajectory(att))
            call = at_commit["messages"][-1]["tool_calls"][0]["function"]
            assert json.loads(call["arguments"])["source"] == repo.source(att)  # up to the turn that submitted it


def test_cheating_and_wrong_kernels_are_never_best(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RATCHET_STOP_UNTIMED", "0")  # go on past the first correct kernel, as on a GPU
    script = [submit(CHEAT), submit(WRONG), tool_calls(("get_profile", {"attempt": 2}), ("diff_against_best", {})),
              submit(FIXED), tool_calls(("get_best", {}), ("diff_against_best", {"source": FASTER})), submit(FIXED)]
    with Loopback(script) as server:
        code, summary, err = optimize(server, tmp_path, capsys, "--max-attempts", "4", "--context-tokens", "2600")
    assert code == 0, err
    attempts = committed(tmp_path)
    assert [a.verdict.value for a in attempts] == ["rejected", "incorrect", "ok"]
    assert [a.is_best for a in attempts] == [False, False, True]
    assert "try-except" in server.requests[1].messages[-1]["content"]
    assert "differs" in server.requests[2].messages[-1]["content"]
    # auxiliary tools: answered from the workspace, not counted as attempts
    profile, diff = (m["content"] for m in server.requests[3].messages[-2:])
    assert json.loads(profile)["verdict"] == "incorrect" and json.loads(diff)["diff"] is None
    # get_ncu_profile is offered only where counters can be read (a GPU, bubblewrap, ncu): not on a CPU
    offered = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert offered == ["submit_kernel", "get_best", "diff_against_best", "get_profile"]
    best, diff = (m["content"] for m in server.requests[5].messages[-2:])
    assert json.loads(best)["attempt"] == 3 and json.loads(best)["source"] == FIXED
    assert "-BLOCK_SIZE = 256" in diff and "+BLOCK_SIZE = 1024" in diff
    # the same source again: not evaluated again, and the model is told so
    assert summary["attempts_used"] == 4 and summary["attempts"] == 3
    assert "[4/4] attempt 3: ok (already committed)" in err
    # the context budget: the task is never trimmed, older sources are
    last = server.requests[-1].messages
    first = server.requests[0].messages
    assert last[:2] == first[:2]
    assert any("omitted to save context" in (c["function"]["arguments"]) for m in last for c in m.get("tool_calls") or [])
    assert last[-1]["role"] == "tool" and last[-2]["role"] == "tool"


def test_invalid_problem_exits_3_without_a_workspace(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\n\ndef get_inputs():\n    return []\n")
    with Loopback([]) as server:
        code = main(["optimize", str(bad), "--model", "m", "--base-url", server.url, "--workspace", str(tmp_path / "ws")])
    assert code == 3 and "defines no class Model" in capsys.readouterr().err
    assert not (tmp_path / "ws" / "bad").exists()


def test_malformed_replies_get_format_errors_and_count(tmp_path, capsys):
    script = [
        text("Here is my plan: first, I will think.", reasoning="long thoughts"),  # no tool call
        tool_call("submit_kernel", '{"source": "class ModelNew(nn.Module):\n'),  # arguments not JSON
        submit("def forward(x:\n    return x\n"),  # not a Python module
        tool_calls(("get_best", {}), ("get_profile", {})),  # auxiliary only: answered, not counted
        submit(FIXED),
    ]
    with Loopback(script) as server:
        code, summary, err = optimize(server, tmp_path, capsys, "--max-attempts", "4")
    assert code == 0, err
    assert summary["format_errors"] == 3 and summary["attempts_used"] == 4 and summary["attempts"] == 1
    assert [a.verdict.value for a in committed(tmp_path)] == ["ok"]
    after_text = server.requests[1].messages[-1]
    assert after_text["role"] == "user" and "called no tool" in after_text["content"]
    after_json = server.requests[2].messages[-1]
    assert after_json["role"] == "tool" and "not valid JSON" in after_json["content"]
    assert "SyntaxError" in server.requests[3].messages[-1]["content"]
    aux = server.requests[4].messages[-2:]
    assert [m["role"] for m in aux] == ["tool", "tool"]
    assert json.loads(aux[0]["content"])["source"] is None  # get_best before any correct kernel
    assert "1 attempt left" in server.requests[3].messages[-1]["content"]


def test_rate_limit_then_success(tmp_path, capsys):
    with Loopback([error(429, "slow down", retry_after=0), submit(FIXED)]) as server:
        code, summary, err = optimize(server, tmp_path, capsys, "--max-attempts", "1")
    assert code == 0, err
    assert len(server.requests) == 2 and "HTTP 429" in err and "retry 1/2" in err
    assert summary["verdicts"] == ["ok"]


def test_server_errors_until_the_retry_limit_then_resume(tmp_path, capsys):
    with Loopback([submit(BROKEN)] + [error(500, "upstream exploded")] * 5) as server:
        code, summary, err = optimize(server, tmp_path, capsys, "--max-attempts", "3")
        assert len(server.requests) == 1 + 3  # one answer, then three tries of the second turn
    assert code == 11
    assert "HTTP 500" in summary["error"] and "upstream exploded" in summary["error"] and "\n" not in summary["error"]
    assert summary["status"] == "model_error"
    assert [a.number for a in committed(tmp_path)] == [1]  # the evaluated attempt was not lost

    with Loopback([submit(FIXED)]) as server:
        code, summary, err = optimize(server, tmp_path, capsys, "--max-attempts", "2", "--resume")
    assert code == 0, err
    assert [a.verdict.value for a in committed(tmp_path)][1:] == ["ok"]
    assert len(committed(tmp_path)) == 2  # attempt 1 was not evaluated or committed again
    resumed = server.requests[0].messages
    assert resumed[-1]["role"] == "tool" and "no_such_name" in resumed[-1]["content"]
    assert summary["verdicts"][1] == "ok" and summary["attempts"] == 2


def test_refused_request_is_not_retried(tmp_path, capsys):
    with Loopback([error(401, "invalid api key"), submit(FIXED)]) as server:
        code, summary, err = optimize(server, tmp_path, capsys)
        assert len(server.requests) == 1
    assert code == 11 and "HTTP 401" in summary["error"] and "refused" in summary["error"]
    assert committed(tmp_path) == []


RATCHET = [sys.executable, "-c", "import sys; from agent.cli import main; sys.exit(main())"]  # the `ratchet` script


def test_a_model_without_an_endpoint_is_a_one_line_usage_error(tmp_path):
    """With no model at all the built-in policy runs (tests/builtin/test_builtin_e2e.py); naming a
    model but no endpoint is a mistake, reported in one line saying how to configure one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RATCHET_"))}
    proc = subprocess.run([*RATCHET, "optimize", str(PROBLEM), "--model", "some-model", "--workspace", str(tmp_path)],
                          capture_output=True, text=True, cwd=HERE.parent, timeout=60, env=env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--model NAME --base-url URL" in lines[0] and "OPENAI_BASE_URL" in lines[0]


def test_resume_without_a_run_is_a_usage_error(tmp_path, capsys):
    with Loopback([]) as server:
        code = main(["optimize", str(PROBLEM), "--model", "m", "--base-url", server.url, "--workspace", str(tmp_path),
                     "--resume"])
    assert code == 2 and "nothing to resume" in capsys.readouterr().err


def test_an_endpoint_without_a_model_name_uses_the_one_it_lists(tmp_path, capsys):
    with Loopback([submit(FIXED)], models=["the-only-one"]) as server:
        code = main(["optimize", str(PROBLEM), "--base-url", server.url, "--workspace", str(tmp_path), "--json"])
        out, err = capsys.readouterr()
    assert code == 0, err
    assert [r.path for r in server.requests] == ["/v1/models", "/v1/chat/completions"]
    assert server.requests[1].body["model"] == "the-only-one" and json.loads(out)["model"] == "the-only-one"
    assert f"no model named (--model/RATCHET_MODEL): using the-only-one, the only model {server.url} lists" in err


def test_an_endpoint_listing_several_models_needs_a_name(tmp_path, capsys):
    with Loopback([submit(FIXED)], models=["big", "small"]) as server:
        code = main(["optimize", str(PROBLEM), "--base-url", server.url, "--workspace", str(tmp_path)])
        assert len(server.requests) == 1  # the list, nothing else
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("ratchet optimize: no model named (--model/RATCHET_MODEL), and ")
    assert "lists 2: big, small; pass --model NAME" in err
    assert not (tmp_path / "relu_add").exists()  # nothing started


def test_a_model_that_never_answers_is_visible_and_ends_the_run(tmp_path, capsys, monkeypatch):
    """A server that accepts and never answers: a heartbeat line while waiting (every 30 s by
    default; RATCHET_HEARTBEAT_S shortens it here), each request given up after --request-timeout
    and tried twice in all, then one line and exit 11 (EXIT_MODEL)."""
    monkeypatch.setenv("RATCHET_HEARTBEAT_S", "0.3")
    with Loopback([hold(), hold(), submit(FIXED)]) as server:
        code, summary, err = optimize(server, tmp_path, capsys, "--request-timeout", "1.5")
        assert len(server.requests) == 2
    assert code == 11 and summary["status"] == "model_error"
    waiting = [line for line in err.splitlines() if line.startswith(f"waiting on the model at {server.url}: ")]
    assert waiting and waiting[0].endswith("s (timeout 1.5 s per try; slow reasoning models may need --request-timeout)")
    assert "did not answer within 1.5 s (2 tries); slow reasoning models may need --request-timeout" in summary["error"]
    assert [line for line in err.splitlines() if line.startswith("model error: ")] == [f"model error: {summary['error']}"]


def test_request_timeout_must_be_a_positive_number(tmp_path, capsys):
    for value in ("0", "-3", "nan"):
        assert main(["optimize", str(PROBLEM), "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                     "--request-timeout", value, "--workspace", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "request_timeout_s must be" in err and "command line" in err
