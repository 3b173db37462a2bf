"""The model is chosen by name, never by an exported key (agent/model_choice.py), against the
loopback server's `/v1/models` list. The whole command line is in tests/loop/test_agent_e2e.py and
tests/builtin/test_builtin_e2e.py."""
from __future__ import annotations

import pytest

from agent.cli import build_parser
from agent.cli.batch import settings_from
from agent.config import load_config
from agent.model import ModelUnreachable
from agent.model_choice import NoModelNamed, choose_model
from loopback import Loopback

BUILTIN_LINE = "no model named (--model/RATCHET_MODEL): using the built-in policy"


def choose(cli: dict | None = None, env: dict | None = None, **kw) -> tuple[str, list[str], object]:
    env = {"RATCHET_RETRY_ATTEMPTS": "2", "RATCHET_RETRY_BASE_S": "0.01", **(env or {})}
    config = load_config(cli or {}, env=env, **kw)
    logs: list[str] = []
    return choose_model(config, logs.append, env=env), logs, config


@pytest.mark.parametrize("env, ignored", [
    ({}, None),
    ({"OPENAI_API_KEY": "sk-test"}, "OPENAI_API_KEY"),
    ({"OPENAI_API_KEY": "sk-test", "RATCHET_API_KEY": "sk-other"}, "RATCHET_API_KEY"),
])
def test_no_model_named_is_the_builtin_policy_whatever_key_is_exported(env, ignored):
    name, logs, config = choose(env=env)
    assert name == config.model == "builtin"
    assert logs == [BUILTIN_LINE + (f"; {ignored} is ignored" if ignored else "")]


def test_a_key_in_the_config_file_is_named_as_ignored(tmp_path):
    file = tmp_path / "ratchet.toml"
    file.write_text('api_key = "sk-file"\n')
    name, logs, _ = choose(config_file=str(file))
    assert name == "builtin" and logs == [f"{BUILTIN_LINE}; api_key in the config file {file} is ignored"]


def test_a_named_model_is_taken_as_named():
    assert choose({"model": "builtin"}, {"OPENAI_API_KEY": "sk"})[:2] == ("builtin", [])
    assert choose({"model": "gpt-x"}, {"OPENAI_API_KEY": "sk"})[:2] == ("gpt-x", [])  # the OpenAI API itself
    assert choose({"model": "m", "base_url": "http://127.0.0.1:9/v1"})[:2] == ("m", [])  # never asked
    with pytest.raises(NoModelNamed, match="has no endpoint: pass --model NAME --base-url URL"):
        choose({"model": "gpt-x"})


def test_an_endpoint_without_a_name_uses_the_one_model_it_lists():
    with Loopback([], models=["qwen-coder"], api_key="sk-local") as server:
        name, logs, config = choose({"base_url": server.url}, {"OPENAI_API_KEY": "sk-local"})
        assert [r.path for r in server.requests] == ["/v1/models"]
    assert name == config.model == "qwen-coder"
    assert logs == [f"no model named (--model/RATCHET_MODEL): using qwen-coder, the only model {server.url} lists"]
    assert config.sources()["model"] == f"the only model {server.url} lists"


@pytest.mark.parametrize("models, says", [
    (["a", "b"], "lists 2: a, b; pass --model NAME"),
    ([f"m{i}" for i in range(8)], "lists 8: m0, m1, m2, m3, m4, ... (3 more); pass --model NAME"),
    ([], "lists no model: pass --model NAME"),
    (None, "GET /models failed: HTTP 404"),  # a server with no list
])
def test_an_endpoint_without_a_name_and_not_one_model_needs_a_name(models, says):
    with Loopback([], models=models) as server:
        with pytest.raises(NoModelNamed) as info:
            choose({"base_url": server.url})
    line = str(info.value)
    assert "\n" not in line and line.startswith("no model named (--model/RATCHET_MODEL), and ") and says in line
    assert line.endswith("pass --model NAME")


def test_an_unreachable_endpoint_is_a_model_error():
    server = Loopback([]).start()
    url = server.url
    server.stop()
    with pytest.raises(ModelUnreachable, match="unreachable after 2 tries"):
        choose({"base_url": url})


def test_batch_chooses_once_and_passes_the_name_to_its_workers(tmp_path, monkeypatch):
    for name in ("OPENAI_BASE_URL", "RATCHET_CONFIG", "RATCHET_MODEL", "RATCHET_BASE_URL", "RATCHET_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    args = build_parser().parse_args(["batch", str(tmp_path), "--workspace", str(tmp_path / "ws"),
                                      "--sandbox", "best-effort"])
    lines: list[str] = []
    settings = settings_from(args, lines.append)
    assert settings["model"] == "builtin" and "api_key" not in settings
    assert lines == [f"batch: {BUILTIN_LINE}; OPENAI_API_KEY is ignored"]
    with Loopback([], models=["only"]) as server:
        args = build_parser().parse_args(["batch", str(tmp_path), "--base-url", server.url, "--request-timeout", "30",
                                          "--sandbox", "best-effort"])
        settings = settings_from(args, lines.append)
    assert settings["model"] == "only" and settings["request_timeout_s"] == 30.0
