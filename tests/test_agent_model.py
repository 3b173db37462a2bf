"""The OpenAI-compatible client and the retry policy, against the loopback server."""
from __future__ import annotations

import time

import pytest

from agent.model import ModelRefused, ModelUnreachable, OpenAIChatClient, Reply, RetryPolicy, list_models
from loopback import Loopback, error, hold, submit, text, tool_call

FAST = RetryPolicy(attempts=4, base_s=0.01, max_s=0.05, retry_after_cap_s=0.2)
MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]
TOOLS = [{"type": "function", "function": {"name": "submit_kernel", "description": "d",
                                           "parameters": {"type": "object", "properties": {}}}}]


def client(server: Loopback, **kw) -> OpenAIChatClient:
    logs: list[str] = []
    c = OpenAIChatClient(model="test-model", base_url=server.url, api_key="k", retry=FAST, log=logs.append,
                         **{"timeout_s": 10, **kw})
    c.logs = logs  # type: ignore[attr-defined]
    return c


def test_tool_call_reply_with_reasoning_and_usage():
    with Loopback([submit("class ModelNew: pass", reasoning="let me think")]) as server:
        reply = client(server).complete(MESSAGES, TOOLS)
    assert isinstance(reply, Reply)
    assert reply.tool_calls[0].name == "submit_kernel"
    assert '"source"' in reply.tool_calls[0].arguments
    assert reply.reasoning == "let me think"
    assert reply.usage.prompt_tokens and reply.usage.completion_tokens
    message = reply.to_message()
    assert message["tool_calls"][0]["function"]["name"] == "submit_kernel"
    sent = server.requests[0]
    assert sent.body["model"] == "test-model"
    assert sent.body["messages"] == MESSAGES
    assert sent.body["tools"] == TOOLS
    assert sent.headers["authorization"] == "Bearer k"
    assert "stream" not in sent.body or sent.body["stream"] is False


def test_plain_text_reply():
    with Loopback([text("no tools today")]) as server:
        reply = client(server).complete(MESSAGES, TOOLS)
    assert reply.content == "no tools today" and reply.tool_calls == []
    assert reply.finish_reason == "stop"


def test_429_with_retry_after_then_success():
    with Loopback([error(429, "slow down", retry_after="0"), tool_call("get_best", {})]) as server:
        c = client(server)
        reply = c.complete(MESSAGES, TOOLS)
    assert reply.tool_calls[0].name == "get_best"
    assert len(server.requests) == 2
    assert any("429" in line and "retry 1/3" in line for line in c.logs)


def test_retry_after_is_honored_but_capped():
    with Loopback([error(429, retry_after="0.15"), text("ok")]) as server:
        start = time.monotonic()
        client(server).complete(MESSAGES, TOOLS)
        assert time.monotonic() - start >= 0.15


def test_500_until_the_retry_limit():
    with Loopback([error(500, "boom")] * 10) as server:
        with pytest.raises(ModelUnreachable) as info:
            client(server).complete(MESSAGES, TOOLS)
    assert len(server.requests) == FAST.attempts
    line = str(info.value)
    assert "\n" not in line and "HTTP 500" in line and "boom" in line and "4 tries" in line


@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_are_never_retried(status):
    with Loopback([error(status, "nope"), text("never reached")]) as server:
        with pytest.raises(ModelRefused) as info:
            client(server).complete(MESSAGES, TOOLS)
    assert len(server.requests) == 1
    assert f"HTTP {status}" in str(info.value) and "nope" in str(info.value)
    assert info.value.status == status


def test_wrong_api_key_is_a_clear_401():
    with Loopback([text("x")], api_key="right") as server:
        with pytest.raises(ModelRefused, match="401.*invalid api key"):
            client(server).complete(MESSAGES, TOOLS)


def test_connection_refused_is_retried_then_unreachable():
    server = Loopback([]).start()
    url = server.url
    server.stop()
    c = OpenAIChatClient(model="m", base_url=url, retry=FAST, timeout_s=2, log=lambda _: None)
    with pytest.raises(ModelUnreachable, match="unreachable after 4 tries"):
        c.complete(MESSAGES, TOOLS)


def test_dropped_connection_is_retried():
    with Loopback([hold(), text("second try")]) as server:
        server.release()  # the held request returns at once, dropping the connection
        reply = client(server).complete(MESSAGES, TOOLS)
    assert reply.content == "second try"
    assert len(server.requests) == 2


def test_a_model_that_never_answers_is_visible_and_tried_twice():
    """A server that accepts and never answers: a heartbeat line while waiting, then the request
    times out; a timeout is tried twice in all (not `attempts` times), then one line says so."""
    with Loopback([hold(), hold(), text("never reached")]) as server:
        c = client(server, heartbeat_s=0.1, timeout_s=0.5)
        with pytest.raises(ModelUnreachable) as info:
            c.complete(MESSAGES, TOOLS)
        assert len(server.requests) == 2 == FAST.timeout_tries < FAST.attempts
    line = str(info.value)
    assert "\n" not in line and "did not answer within 0.5 s (2 tries)" in line and "--request-timeout" in line
    waiting = [entry for entry in c.logs if entry.startswith(f"waiting on the model at {server.url}: ")]
    assert waiting and "(timeout 0.5 s per try; slow reasoning models may need --request-timeout)" in waiting[0]
    assert any("request timed out; retry 1/1" in entry for entry in c.logs)  # one retry of a timeout, not 3


def test_no_heartbeat_for_a_prompt_answer():
    with Loopback([text("quick")]) as server:
        c = client(server, heartbeat_s=30.0)
        assert c.complete(MESSAGES, TOOLS).content == "quick"
    assert not any(entry.startswith("waiting on the model") for entry in c.logs)


def test_list_models():
    with Loopback([], models=["a", "b"], api_key="k") as server:
        assert list_models(server.url, "k", retry=FAST) == ["a", "b"]
        with pytest.raises(ModelRefused, match="GET /models failed: HTTP 401"):
            list_models(server.url, "wrong", retry=FAST)
        assert [r.path for r in server.requests] == ["/v1/models", "/v1/models"]
    with Loopback([]) as server:  # a server with no list
        with pytest.raises(ModelRefused, match="HTTP 404"):
            list_models(server.url, retry=FAST)


@pytest.mark.parametrize("body", ["<html>not an API</html>", "not json {"])
def test_a_200_whose_body_is_not_json_is_unreachable_never_a_traceback(body):
    """Issue 37: an endpoint that answered 200 with a body that is not JSON gave an 85-line traceback."""
    from loopback import raw

    with Loopback([raw(body)] * FAST.attempts) as server:
        with pytest.raises(ModelUnreachable, match="not JSON|no choices"):
            client(server).complete(MESSAGES, TOOLS)
