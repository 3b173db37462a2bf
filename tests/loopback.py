"""A real HTTP server on 127.0.0.1 that speaks OpenAI Chat Completions and replays a script.

Tests drive the agent against it exactly as they would a hosted model: the agent's client, the
SDK and HTTP are all real. Each POST /v1/chat/completions consumes the next scripted step:

    submit(source)                     a submit_kernel tool call carrying `source`
    tool_call(name, arguments)         any tool call (arguments: a dict, or raw text, malformed or not)
    text(content)                      a plain assistant reply with no tool call
    error(status, message, retry_after=None)   an HTTP error with an OpenAI-style error body
    hold()                             block until `release()` (or shutdown), then drop the connection

Any step may carry `reasoning` (sent as `reasoning_content`, as vLLM and SGLang do), `sleep_s` (the
model thinking: the answer waits that long) and `meet` (the answer waits until that many requests
have been in flight at once, at most `MEET_S`; `Request.met` says whether they were: a wide search's
concurrent requests). Every completion
reports `usage` (prompt tokens: the request's messages as JSON, in characters / 4, + 1; completion
tokens: the reply's text, arguments and reasoning likewise: `usage_of`); a step with `cached_tokens`
also reports that many of the prompt's as cached (`prompt_tokens_details.cached_tokens`). GET /v1/models
lists `models` (a list of ids) when given, else answers 404 as a server without the list would. Every request
is recorded (`requests`: path, headers, parsed body) so tests can assert on what the agent sent.
When the script is exhausted the server answers 400, which the agent reports and never retries.
The server is bounded: it stops itself after `lifetime_s`, and on leaving the `with` block.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    kind: str  # "tool_calls" | "text" | "error" | "hold" | "raw" (a 200 whose body is `content`, as it is)
    content: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)  # (name, raw arguments)
    reasoning: str | None = None
    status: int = 200
    retry_after: str | None = None
    cached_tokens: int | None = None  # reported as usage.prompt_tokens_details.cached_tokens
    sleep_s: float = 0.0  # the answer waits this long
    meet: int = 0  # the answer waits until this many requests are in flight (at most MEET_S)


def tool_call(name: str, arguments: dict[str, Any] | str, *, content: str | None = None,
              reasoning: str | None = None) -> Step:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Step("tool_calls", content=content, calls=[(name, raw)], reasoning=reasoning)


def tool_calls(*calls: tuple[str, dict[str, Any] | str], content: str | None = None) -> Step:
    """Several tool calls in one turn (parallel tool calls)."""
    raw = [(name, args if isinstance(args, str) else json.dumps(args)) for name, args in calls]
    return Step("tool_calls", content=content, calls=raw)


def submit(source: str, *, reasoning: str | None = None, content: str | None = None,
           cached_tokens: int | None = None, sleep_s: float = 0.0, meet: int = 0) -> Step:
    step = tool_call("submit_kernel", {"source": source}, content=content, reasoning=reasoning)
    step.cached_tokens, step.sleep_s, step.meet = cached_tokens, sleep_s, meet
    return step


def text(content: str, *, reasoning: str | None = None) -> Step:
    return Step("text", content=content, reasoning=reasoning)


def error(status: int, message: str = "scripted error", *, retry_after: float | str | None = None) -> Step:
    return Step("error", content=message, status=status,
                retry_after=None if retry_after is None else str(retry_after))


def raw(body: str, content_type: str = "application/json") -> Step:
    """A 200 answer whose body is `body`, not a completion (an endpoint that is not OpenAI-compatible)."""
    return Step("raw", content=body, reasoning=content_type)


def hold() -> Step:
    return Step("hold")


MEET_S = 60.0


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: Any
    met: bool | None = None  # for a step with `meet`: whether that many requests were in flight at once
    arrived: float = field(default_factory=time.monotonic)  # when it came in
    answered: float | None = None  # when its answer went out

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", []) if isinstance(self.body, dict) else []


class Loopback:
    def __init__(self, script: list[Step], *, lifetime_s: float = 120.0, api_key: str | None = None,
                 models: list[str] | None = None):
        self.script = list(script)
        self.requests: list[Request] = []
        self.api_key = api_key
        self.models = None if models is None else list(models)
        self.held = threading.Event()  # set when a hold() step is reached
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._flight = threading.Condition()
        self.in_flight = 0
        self.most_in_flight = 0  # the most requests in flight at once so far
        self._position = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True
        self._stopped = False

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def remaining(self) -> int:
        return len(self.script) - self._position

    def start(self) -> "Loopback":
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._timer.cancel()
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def release(self) -> None:
        self._release.set()

    def __enter__(self) -> "Loopback":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _next_step(self, request: Request) -> tuple[int, Step | None]:
        with self._lock:
            self.requests.append(request)
            number = len(self.requests)
            if self._position >= len(self.script):
                return number, None
            step = self.script[self._position]
            self._position += 1
            return number, step

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        loop = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, None)
                with loop._lock:
                    loop.requests.append(request)
                if self.path.rstrip("/") != "/v1/models" or loop.models is None:
                    self._send_json(404, _error_body(f"no route {self.path}", "not_found_error"))
                elif loop.api_key is not None and request.headers.get("authorization") != f"Bearer {loop.api_key}":
                    self._send_json(401, _error_body("invalid api key", "authentication_error"))
                else:
                    self._send_json(200, {"object": "list", "data": [
                        {"id": name, "object": "model", "created": 0, "owned_by": "loopback"} for name in loop.models]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length > 64 * 1024 * 1024:
                    self._send_json(413, _error_body("request too large", "invalid_request_error"))
                    return
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"null")
                except json.JSONDecodeError:
                    body = None
                request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    with loop._lock:
                        loop.requests.append(request)
                    self._send_json(404, _error_body(f"no route {self.path}", "not_found_error"))
                    return
                if loop.api_key is not None and request.headers.get("authorization") != f"Bearer {loop.api_key}":
                    with loop._lock:
                        loop.requests.append(request)
                    self._send_json(401, _error_body("invalid api key", "authentication_error"))
                    return
                with loop._flight:
                    loop.in_flight += 1
                    loop.most_in_flight = max(loop.most_in_flight, loop.in_flight)
                    loop._flight.notify_all()
                try:
                    number, step = loop._next_step(request)
                    self._answer(request, number, step)
                    request.answered = time.monotonic()
                finally:
                    with loop._flight:
                        loop.in_flight -= 1

            def _answer(self, request: Request, number: int, step: Step | None) -> None:
                body = request.body
                if step is not None and step.meet:
                    with loop._flight:
                        request.met = loop._flight.wait_for(lambda: loop.most_in_flight >= step.meet, MEET_S)
                if step is not None and step.sleep_s:
                    time.sleep(step.sleep_s)
                if step is None:
                    self._send_json(400, _error_body("loopback: script exhausted", "invalid_request_error"))
                elif step.kind == "hold":
                    loop.held.set()
                    loop._release.wait()
                    if not loop._stopped:
                        loop._release.clear()  # one release() per hold: the next hold holds again
                    self.close_connection = True  # drop it: the client sees a connection error
                elif step.kind == "raw":
                    data = (step.content or "").encode()
                    self.send_response(200)
                    self.send_header("Content-Type", step.reasoning or "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif step.kind == "error":
                    headers = {"retry-after": step.retry_after} if step.retry_after is not None else {}
                    self._send_json(step.status, _error_body(step.content or "", _error_type(step.status)), headers)
                else:
                    self._send_json(200, _completion(number, body, step))

            def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        return Handler


def _error_type(status: int) -> str:
    return {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            429: "rate_limit_error"}.get(status, "server_error")


def _error_body(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _completion(number: int, body: Any, step: Step) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": step.content}
    if step.kind == "tool_calls":
        message["tool_calls"] = [
            {"id": f"call_{number}_{index}", "type": "function", "function": {"name": name, "arguments": raw}}
            for index, (name, raw) in enumerate(step.calls)
        ]
    if step.reasoning is not None:
        message["reasoning_content"] = step.reasoning
    prompt_tokens, completion_tokens = usage_of(body, step)
    usage: dict[str, Any] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
    if step.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": min(step.cached_tokens, prompt_tokens)}
    return {
        "id": f"chatcmpl-loopback-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "loopback") if isinstance(body, dict) else "loopback",
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if step.kind == "tool_calls" else "stop"}],
        "usage": usage,
    }


def usage_of(body: Any, step: Step) -> tuple[int, int]:
    """The prompt and completion tokens the server reports for `step` answering a request `body`."""
    prompt_chars = len(json.dumps(body.get("messages", []))) if isinstance(body, dict) else 0
    completion_chars = len(step.content or "") + sum(len(raw) for _, raw in step.calls) + len(step.reasoning or "")
    return prompt_chars // 4 + 1, completion_chars // 4 + 1
