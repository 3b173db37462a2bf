"""`ratchet serve`: the multi-turn environment over OpenEnv's protocol (WebSocket sessions at /ws).

A full episode on the CPU: the policy is the scripted model behind a real loopback OpenAI server
(its replies read with the openai client), each reply stepped through the server as a trainer's
environment client would; rewards are tools/reward's. Malformed messages get OpenEnv's error
codes and the session goes on; a connection past --max-sessions is told so and closed.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from websockets.sync.client import connect

from agent.learn.env_server import EnvServer, ServerConfig
from loopback import Loopback, submit, text

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "examples" / "swish_problem.py"
CANDIDATE = (ROOT / "examples" / "swish_candidate.py").read_text()


@pytest.fixture(scope="module")
def server():
    config = ServerConfig(problems=[PROBLEM], port=0, max_sessions=1, env={"max_attempts": 3},
                          reward={"device": "cpu", "spares": 1})
    with EnvServer(config) as running:
        yield running


def ask(ws, message) -> dict:
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(ws.recv(timeout=300))


def assistant_reply(client, messages, tools) -> dict:
    """The scripted model's next reply, through the OpenAI client, as an assistant message dict."""
    response = client.chat.completions.create(model="scripted", messages=messages, tools=tools)
    return response.choices[0].message.model_dump(exclude_none=True)


def test_a_full_episode_with_the_scripted_model(server):
    from openai import OpenAI

    url = f"http://127.0.0.1:{server.port}"
    health = json.loads(urllib.request.urlopen(f"{url}/health", timeout=10).read())
    assert health["status"] == "healthy" and health["max_sessions"] == 1
    assert json.loads(urllib.request.urlopen(f"{url}/metadata", timeout=10).read())["problems"] == ["swish_problem"]
    # the third reply is the same kernel with a comment more: the same kernel (an attacker farmed rewards so)
    script = [text("I will think first."), submit(CANDIDATE), submit(CANDIDATE + "\n# now surely faster\n")]
    with Loopback(script) as model, connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        client = OpenAI(base_url=model.url, api_key="none", max_retries=0)
        reset = ask(ws, {"type": "reset", "data": {"problem": "swish_problem"}})
        assert reset["type"] == "observation" and reset["data"]["reward"] is None and not reset["data"]["done"]
        observation = reset["data"]["observation"]
        messages, tools = observation["messages"], observation["tools"]
        assert [m["role"] for m in messages] == ["system", "user"] and "submit_kernel" in json.dumps(tools)
        rewards, verdicts, done = [], [], False
        while not done:
            reply = assistant_reply(client, messages, tools)
            step = ask(ws, {"type": "step", "data": {"message": reply}})
            assert step["type"] == "observation", step
            data = step["data"]
            messages += [reply, *data["observation"]["messages"]]
            rewards.append(data["reward"])
            verdicts.append(data["observation"]["info"].get("verdict"))
            done = data["done"]
        state = ask(ws, {"type": "state"})
    # no tool call: a format error (an attempt, reward 0); then the honest kernel (0.4 on a CPU:
    # built and correct, not timed); then the same kernel again (not evaluated: repeat_reward 0)
    assert verdicts == ["format_error", "ok", "ok"] and rewards == [0.0, 0.4, 0.0]
    assert state["type"] == "state" and state["data"]["attempts_used"] == 3 and state["data"]["done"]
    assert state["data"]["total_reward"] == pytest.approx(0.4) and state["data"]["step_count"] == 3


def test_a_malformed_message_is_answered_and_the_session_goes_on(server):
    with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        assert ask(ws, "{not json")["data"]["code"] == "INVALID_JSON"
        assert ask(ws, "[" * 200000 + "]" * 200000)["data"]["code"] == "INVALID_JSON"  # deeper than json reads
        assert ask(ws, {"type": "jump"})["data"]["code"] == "UNKNOWN_TYPE"
        early = ask(ws, {"type": "step", "data": {"stop": True}})
        assert early["data"]["code"] == "SESSION_ERROR" and "reset" in early["data"]["message"]
        unknown = ask(ws, {"type": "reset", "data": {"problem": "nope"}})
        assert unknown["data"]["code"] == "VALIDATION_ERROR" and "swish_problem" in unknown["data"]["message"]
        assert ask(ws, {"type": "reset", "data": {"problem": "swish_problem", "entry": 5}})["data"]["code"] == "VALIDATION_ERROR"
        assert ask(ws, {"type": "reset", "data": {"entry": "Nope"}})["data"]["code"] == "VALIDATION_ERROR"  # no such class
        assert ask(ws, {"type": "reset", "data": {}})["type"] == "observation"  # the one problem, by default
        shapeless = ask(ws, {"type": "step", "data": {"tool_call": {"function": 5}}})
        assert shapeless["data"]["code"] == "EXECUTION_ERROR" and "could not be acted on" in shapeless["data"]["message"]
        both = ask(ws, {"type": "step", "data": {"stop": True, "message": {"role": "assistant"}}})
        assert both["data"]["code"] == "VALIDATION_ERROR"
        assert ask(ws, {"type": "step", "data": {"stop": False}})["data"]["code"] == "VALIDATION_ERROR"  # not a stop
        stopped = ask(ws, {"type": "step", "data": {"stop": True}})
        assert stopped["data"]["done"] and stopped["data"]["reward"] == 0.0
        after = ask(ws, {"type": "step", "data": {"stop": True}})
        assert after["data"]["code"] == "SESSION_ERROR"  # the episode is done: reset first
        ws.send(json.dumps({"type": "close"}))


def test_a_connection_past_max_sessions_is_told_and_closed(server):
    with connect(f"ws://127.0.0.1:{server.port}/ws") as first:
        assert ask(first, {"type": "state"})["type"] == "state"  # holds the one session
        with connect(f"ws://127.0.0.1:{server.port}/ws") as second:
            refused = json.loads(second.recv(timeout=30))
            assert refused["data"]["code"] == "CAPACITY_REACHED" and "1 sessions are busy" in refused["data"]["message"]
        assert ask(first, {"type": "state"})["type"] == "state"  # the first goes on
    deadline = time.monotonic() + 10  # its slot comes back when it closes
    while server.active and time.monotonic() < deadline:
        time.sleep(0.05)
    with connect(f"ws://127.0.0.1:{server.port}/ws") as third:
        assert ask(third, {"type": "state"})["type"] == "state"


def test_a_silent_session_is_closed_and_its_slot_freed():
    config = ServerConfig(problems=[PROBLEM], port=0, max_sessions=1, idle_timeout_s=1.0, reward={"device": "cpu"})
    with EnvServer(config) as server, connect(f"ws://127.0.0.1:{server.port}/ws") as idle:
        closed = json.loads(idle.recv(timeout=30))  # nothing sent: after a second the server says so
        assert closed["data"]["code"] == "SESSION_ERROR" and "slot freed" in closed["data"]["message"]
        deadline = time.monotonic() + 10
        while server.active and time.monotonic() < deadline:
            time.sleep(0.05)
        with connect(f"ws://127.0.0.1:{server.port}/ws") as next_one:
            assert ask(next_one, {"type": "state"})["type"] == "state"


def test_ratchet_serve_starts_listens_and_stops_on_ctrl_c(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RATCHET_"))}
    proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "serve", str(PROBLEM), "--port", "0", "--device", "cpu"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = proc.stderr.readline()
        assert "ws://127.0.0.1:" in line and "/ws" in line, line
        port = int(line.split("ws://127.0.0.1:")[1].split("/")[0])
        assert json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10).read())["status"] == "healthy"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
