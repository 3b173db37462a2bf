"""What a run costs, end to end on the CPU: `ratchet optimize` against a scripted model on the
loopback HTTP server (its usage reports, cached tokens included), the dollars in each attempt's
trailers, in `ratchet log` and in the run's summary, across an interrupted run and its --resume;
and "no price" (never $0) where the model has none. The expected dollars are worked out from the
requests the server received, with the server's own token counts (loopback.usage_of)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.cost import NO_PRICE, Price
from agent.workspace.root import Workspace
from helpers_agent import quiet_agent_env
from loopback import Loopback, error, submit, usage_of

HERE = Path(__file__).parents[1]
PROBLEM = HERE / "agent_problems" / "relu_add.py"
sys.path.insert(0, str(PROBLEM.parent))
from relu_add_candidates import BROKEN  # noqa: E402

BROKEN_TOO = BROKEN + "\n# another try, as broken\n"  # failed builds: no kernel runs in the interpreter, the test stays fast

pytestmark = pytest.mark.timeout(120)
PRICE = Price(0.2, 0.6, 0.05)


@pytest.fixture(autouse=True)
def fast_settings(monkeypatch):
    quiet_agent_env(monkeypatch, "RATCHET_PRICE", RATCHET_RETRY_ATTEMPTS="2")


def optimize(server: Loopback, workspace: Path, capsys, *extra: str) -> tuple[int, dict, str]:
    code = main(["optimize", str(PROBLEM), "--model", "scripted", "--base-url", server.url,
                 "--workspace", str(workspace), "--json", *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def answered_costs(server: Loopback, script: list) -> list[tuple[int, float]]:
    """(tokens, dollars) of each request the server answered with a completion, by its own counts."""
    out = []
    for request, step in zip(server.requests, script):
        if step.kind != "tool_calls":
            continue
        prompt, completion = usage_of(request.body, step)
        out.append((prompt + completion, PRICE.cost(prompt, completion, min(step.cached_tokens or 0, prompt))))
    return out


def log_lines(workspace: Path, capsys) -> list[str]:
    assert main(["log", str(PROBLEM), "--workspace", str(workspace)]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_cost_of_a_priced_run_interrupted_and_resumed(tmp_path, capsys):
    price = ["--price", "0.2,0.6,0.05", "--max-attempts", "2"]
    first = [submit(BROKEN), error(400, "scripted refusal")]
    with Loopback(first) as server:
        code, summary, err = optimize(server, tmp_path, capsys, *price)
        [(tokens1, cost1)] = answered_costs(server, first)
    assert code == 11, err  # the model refused: the run stops, to be resumed
    assert summary["cost_usd"] == pytest.approx(cost1) and summary["price"]["from"] == "command line"
    second = [submit(BROKEN_TOO, cached_tokens=300)]
    with Loopback(second) as server:
        code, summary, err = optimize(server, tmp_path, capsys, *price, "--resume")
        [(tokens2, cost2)] = answered_costs(server, second)
    assert code == 10, err  # the attempt budget spent
    # the resumed run's total holds both sessions' turns; each attempt carries its own turns
    assert summary["cost_usd"] == pytest.approx(cost1 + cost2) and summary["tokens_used"] == tokens1 + tokens2
    with Workspace(tmp_path).open_existing(PROBLEM) as repo:
        one, two = repo.attempts()
        [saved] = repo.trajectories()
        trajectory = json.loads(saved.text)
    assert (one.tokens, two.tokens) == (tokens1, tokens2)
    assert one.cost_usd == pytest.approx(cost1) and two.cost_usd == pytest.approx(cost2)
    assert one.run_cost_usd == pytest.approx(cost1) and two.run_cost_usd == pytest.approx(cost1 + cost2)
    assert two.eval_s is not None and two.eval_s > 0  # the evaluation's own seconds (record phases.total)
    assert trajectory["schema"] == 3 and trajectory["cost_usd"] == pytest.approx(cost1 + cost2)
    assert trajectory["usage"][-1]["cached_tokens"] == 300 and trajectory["price"]["cached_input"] == 0.05
    # plain git reads the trailers; numbers written with repr parse back exactly
    trailers = subprocess.run(["git", "-C", str(tmp_path / PROBLEM.stem), "log", "-1",
                               "--format=%(trailers:key=Ratchet-Cost-Usd,valueonly,separator=)"],
                              capture_output=True, text=True, check=True).stdout.strip()
    assert float(trailers) == two.cost_usd
    lines = log_lines(tmp_path, capsys)
    assert all(f"  {name}  " in lines[0] for name in ("tokens", "cost", "run cost", "eval s"))
    assert f"${two.cost_usd:.3g}" in lines[2] and str(tokens2) in lines[2]
    assert lines[-2].startswith("cost over 1 run(s): $") and f"{tokens1 + tokens2} tokens" in lines[-2]


def test_a_model_without_a_price_reads_no_price(tmp_path, capsys):
    config = tmp_path / "ratchet.toml"  # a table pricing another model: allowed, and said
    config.write_text('[prices."llama-3-70b"]\ninput = 0.5\noutput = 0.9\n')
    with Loopback([submit(BROKEN)]) as server:
        code, summary, err = optimize(server, tmp_path / "ws", capsys, "--config", str(config), "--max-attempts", "1")
    assert code == 10, err
    assert summary["cost_usd"] is None and summary["price"] is None and summary["tokens_used"] > 0
    assert f"no price for model 'scripted'; config file {config} prices llama-3-70b" in err
    with Workspace(tmp_path / "ws").open_existing(PROBLEM) as repo:
        [attempt] = repo.attempts()
    body = subprocess.run(["git", "-C", str(tmp_path / "ws" / PROBLEM.stem), "log", "-1", "--format=%B"],
                          capture_output=True, text=True, check=True).stdout
    assert attempt.tokens == summary["tokens_used"] and attempt.cost_usd is None
    assert f"Ratchet-Cost-Usd: {NO_PRICE}" in body and f"Ratchet-Run-Cost-Usd: {NO_PRICE}" in body
    lines = log_lines(tmp_path / "ws", capsys)
    assert NO_PRICE in lines[1] and "$0" not in lines[1]
    assert lines[-2].startswith(f"cost over 1 run(s): {NO_PRICE} for 1 run(s)")
