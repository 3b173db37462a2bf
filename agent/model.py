"""Model clients: the small protocol the agent talks to, and an OpenAI-compatible implementation.

The agent needs one thing from a model: given the conversation so far and the tool schemas,
return the next assistant turn. `ModelClient.complete` is that, and nothing else, so another
policy (a built-in offline one, a scripted one for RL rollouts) plugs in by implementing it.

`OpenAIChatClient` speaks Chat Completions (non-streaming, function calling) to any
OpenAI-compatible endpoint: a hosted model, vLLM, SGLang, Ollama. The SDK's own retries are
off (`max_retries=0`); the one retry policy of the project lives here (`RetryPolicy`, with
tenacity): rate limits, timeouts, connection errors and 5xx are retried with jittered
exponential backoff, honoring Retry-After; 400/401/403/404/422 are never retried. A request that
times out is tried `timeout_tries` times in all (2), not `attempts`: a model that accepts and
never answers ends the run within minutes, not an hour. While a request is out, a line goes to
the log every `heartbeat_s` seconds (30). Whatever cannot be answered ends as a `ModelError` with
a one-line message (exit code 11 in the CLI). `list_models` reads an endpoint's `/models` list.
"""
from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import openai
import tenacity

DEFAULT_TIMEOUT_S = 120.0  # one HTTP request (see docs/model.md: why 120 s, tried twice)
HEARTBEAT_S = 30.0  # a "waiting on the model" line this often while a request is out


@dataclass
class ToolCall:
    """One function call the model asked for; `arguments` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str

    def to_message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Usage:
    """A reply's token counts as the server reported them (None: not reported). `cached_tokens`: the
    part of the prompt the server says it read from its cache (`usage.prompt_tokens_details.cached_tokens`,
    as OpenAI and vLLM report it), which a price table may price apart (agent/cost.py)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)


@dataclass
class Reply:
    """One assistant turn. `reasoning` is the model's thinking text where the server sends it
    (`reasoning_content`, as vLLM and SGLang do, or `reasoning`)."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None

    def to_message(self) -> dict[str, Any]:
        """The assistant message for the conversation (OpenAI message format)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_message() for call in self.tool_calls]
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        return message


@runtime_checkable
class ModelClient(Protocol):
    """What the agent needs from a model. `name` goes into commit trailers and trajectories."""

    name: str
    # optional: `answers_at_once = True` on a client whose next turn needs no server (the built-in
    # policy), so attempts come back to back and the evaluator keeps one more worker started ahead

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], *,
                 seed: int | None = None) -> Reply:
        """The next assistant turn; `seed` (a wide search's lineage) asks the server for that seed.
        Called from several threads at once in a wide search. Raises ModelError when no answer can be had."""
        ...


class ModelError(Exception):
    """The model endpoint could not answer (after retries) or refused the request. str() is one line."""

    def __init__(self, message: str, *, status: int | None = None, retried: int = 0):
        super().__init__(message)
        self.status = status
        self.retried = retried


class ModelRefused(ModelError):
    """The endpoint answered 4xx (bad request, unauthorized, unknown model): retrying cannot help."""


class ModelUnreachable(ModelError):
    """Connection errors, timeouts, rate limits or 5xx persisted through every retry."""


# --- the one retry policy ---------------------------------------------------------------------

RETRYABLE = (openai.RateLimitError, openai.APITimeoutError, openai.APIConnectionError, openai.InternalServerError)


def is_retryable(exc: BaseException) -> bool:
    """Rate limits, timeouts, connection errors and server errors (5xx), nothing else."""
    if isinstance(exc, RETRYABLE):
        return True
    # Some servers answer overload with codes the SDK maps to a plain APIStatusError (e.g. 529).
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


def retry_after_seconds(exc: BaseException) -> float | None:
    """The server's Retry-After (or retry-after-ms) in seconds, when it sent one as a number."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date: fall back to our own backoff
        if seconds >= 0:
            return seconds
    return None


@dataclass
class RetryPolicy:
    """Jittered exponential backoff: the n-th wait is uniform in [0, min(max_s, base_s * 2**n)],
    but never shorter than the server's Retry-After (itself capped at retry_after_cap_s)."""

    attempts: int = 6  # tries in all, the first included
    base_s: float = 1.0
    max_s: float = 60.0
    retry_after_cap_s: float = 120.0
    timeout_tries: int = 2  # tries in all when they time out: each one costs a whole request timeout

    def wait(self, state: tenacity.RetryCallState) -> float:
        backoff = tenacity.wait_random_exponential(multiplier=self.base_s, max=self.max_s)(state)
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after_seconds(exc) if exc is not None else None
        if asked is not None:
            return max(backoff, min(asked, self.retry_after_cap_s))
        return backoff

    def retrying(self, log: Callable[[str], None] | None = None) -> tenacity.Retrying:
        def before_sleep(state: tenacity.RetryCallState) -> None:
            if log is None or state.outcome is None:
                return
            delay = state.next_action.sleep if state.next_action else 0.0
            exc = state.outcome.exception()
            tries = self.timeout_tries if isinstance(exc, openai.APITimeoutError) else self.attempts
            log(f"model: {describe_error(exc)}; retry {state.attempt_number}/{max(1, tries - 1)} in {delay:.2f} s")

        timeouts = 0

        def stop(state: tenacity.RetryCallState) -> bool:
            nonlocal timeouts
            exc = state.outcome.exception() if state.outcome else None
            timeouts += isinstance(exc, openai.APITimeoutError)
            return state.attempt_number >= max(1, self.attempts) or timeouts >= max(1, self.timeout_tries)

        return tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_retryable),
            stop=stop,
            wait=self.wait,
            before_sleep=before_sleep,
            reraise=True,
        )


def describe_error(exc: BaseException | None) -> str:
    """One line naming an SDK error: its HTTP status and the server's message, or its kind."""
    if exc is None:
        return "no error"
    if isinstance(exc, openai.APIStatusError):
        text = _server_message(exc)
        return f"HTTP {exc.status_code}" + (f": {text}" if text else "")
    if isinstance(exc, openai.APITimeoutError):
        return "request timed out"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        return "connection failed" + (f" ({_one_line(str(cause))})" if cause else "")
    return _one_line(f"{type(exc).__name__}: {exc}")


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return _one_line(str(inner["message"]))
        if isinstance(inner, str):
            return _one_line(inner)
    return _one_line(exc.message or "")


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# --- the OpenAI-compatible client -------------------------------------------------------------


@dataclass
class Heartbeat:
    """A line on stderr every so often while a request is out: a model that accepts a request and
    never answers would otherwise leave the run silent until the request's timeout.
    `with Heartbeat(30.0, lambda s: f"waiting: {s:.0f} s", log): ...` logs every 30 s inside the
    block, from a daemon thread."""

    interval_s: float
    line: Callable[[float], str]
    log: Callable[[str], None]
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def __enter__(self) -> "Heartbeat":
        if self.interval_s > 0:
            self._stop.clear()
            self._thread = threading.Thread(target=self._beat, args=(time.monotonic(),), name="ratchet-heartbeat",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _beat(self, start: float) -> None:
        while not self._stop.wait(self.interval_s):
            self.log(self.line(time.monotonic() - start))


@dataclass
class OpenAIChatClient:
    """Chat Completions over HTTP. Construct with the endpoint and model; call `complete`."""

    model: str
    base_url: str | None = None
    api_key: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    retry: RetryPolicy = dataclasses.field(default_factory=RetryPolicy)
    temperature: float | None = None
    max_completion_tokens: int | None = None
    log: Callable[[str], None] | None = None
    heartbeat_s: float = HEARTBEAT_S  # 0: no heartbeat

    def __post_init__(self) -> None:
        # Local servers (vLLM, SGLang, Ollama) need no key, but the SDK insists on one.
        self._client = openai.OpenAI(
            api_key=self.api_key or "unused",
            base_url=self.base_url,
            timeout=self.timeout_s,
            max_retries=0,
        )
        if self.log is None:
            self.log = lambda line: print(line, file=sys.stderr, flush=True)

    @property
    def name(self) -> str:
        return self.model

    def close(self) -> None:
        self._client.close()

    def complete(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], *,
                 seed: int | None = None) -> Reply:
        request: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if seed is not None:  # a lineage of a wide search (agent/loop/beam.py); width 1 sends none
            request["seed"] = seed
        if tools:
            request["tools"] = list(tools)
            request["tool_choice"] = "auto"
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.max_completion_tokens is not None:
            request["max_tokens"] = self.max_completion_tokens
        tries = 0
        endpoint = self.base_url or "the OpenAI API"
        waiting = Heartbeat(self.heartbeat_s, lambda s: f"waiting on the model at {endpoint}: {s:.0f} s (timeout "
                            f"{self.timeout_s:g} s per try; slow reasoning models may need --request-timeout)", self.log)
        try:
            with waiting:
                for attempt in self.retry.retrying(self.log):
                    with attempt:
                        tries += 1
                        completion = self._client.chat.completions.create(**request)
        except openai.APITimeoutError as exc:
            raise ModelUnreachable(f"model endpoint {endpoint} (model {self.model}) did not answer within "
                                   f"{self.timeout_s:g} s ({tries} {'try' if tries == 1 else 'tries'}); slow reasoning "
                                   f"models may need --request-timeout SECONDS", retried=tries) from exc
        except openai.APIStatusError as exc:
            where = f"{endpoint} (model {self.model})"
            if is_retryable(exc):
                raise ModelUnreachable(f"model endpoint {where} still failing after {tries} tries: "
                                       f"{describe_error(exc)}", status=exc.status_code, retried=tries) from exc
            raise ModelRefused(f"model endpoint {where} refused the request: {describe_error(exc)}",
                               status=exc.status_code, retried=tries) from exc
        except openai.APIConnectionError as exc:
            raise ModelUnreachable(f"model endpoint {endpoint} unreachable after {tries} tries: "
                                   f"{describe_error(exc)}", retried=tries) from exc
        except openai.OpenAIError as exc:
            raise ModelUnreachable(f"model endpoint {endpoint} gave an unusable answer: {describe_error(exc)}",
                                   retried=tries) from exc
        except ValueError as exc:  # a 200 whose body is not JSON (the SDK's json.loads): not the OpenAI protocol
            raise ModelUnreachable(f"model endpoint {endpoint} answered with a body that is not JSON "
                                   f"({type(exc).__name__}: {str(exc)[:120]}); is it an OpenAI-compatible endpoint?",
                                   retried=tries) from exc
        return _reply_from(completion)


def list_models(base_url: str, api_key: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                retry: RetryPolicy | None = None, log: Callable[[str], None] | None = None) -> list[str]:
    """The model ids an OpenAI-compatible endpoint lists at `GET /models`, under the same retry
    policy as a completion. Raises ModelRefused (4xx: the endpoint has no such list, or the key is
    wrong) or ModelUnreachable."""
    retry = retry or RetryPolicy()
    client = openai.OpenAI(api_key=api_key or "unused", base_url=base_url, timeout=timeout_s, max_retries=0)
    tries = 0
    try:
        for attempt in retry.retrying(log):
            with attempt:
                tries += 1
                page = client.models.list()
        return [model.id for model in page.data if getattr(model, "id", None)]
    except openai.APIStatusError as exc:
        kind = ModelUnreachable if is_retryable(exc) else ModelRefused
        raise kind(f"model endpoint {base_url}: GET /models failed: {describe_error(exc)}",
                   status=exc.status_code, retried=tries) from exc
    except openai.OpenAIError as exc:
        raise ModelUnreachable(f"model endpoint {base_url} unreachable after {tries} "
                               f"{'try' if tries == 1 else 'tries'}: {describe_error(exc)}", retried=tries) from exc
    finally:
        client.close()


def _reply_from(completion: Any) -> Reply:
    if not getattr(completion, "choices", None):
        raise ModelUnreachable("model endpoint answered with no choices")
    choice = completion.choices[0]
    message = choice.message
    calls = []
    for index, call in enumerate(message.tool_calls or []):
        function = getattr(call, "function", None)
        if function is None:  # a custom (non-function) tool call: keep it so it gets a format error
            calls.append(ToolCall(id=call.id or f"call_{index}", name=getattr(call, "type", "?"), arguments=""))
            continue
        calls.append(ToolCall(id=call.id or f"call_{index}", name=function.name or "",
                              arguments=function.arguments or ""))
    extra = message.model_extra or {}
    reasoning = extra.get("reasoning_content") or extra.get("reasoning")
    usage = Usage()
    if completion.usage is not None:
        details = getattr(completion.usage, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", None)
        usage = Usage(prompt_tokens=completion.usage.prompt_tokens, completion_tokens=completion.usage.completion_tokens,
                      cached_tokens=cached if isinstance(cached, int) else None)
    return Reply(content=message.content, tool_calls=calls,
                 reasoning=reasoning if isinstance(reasoning, str) else None,
                 usage=usage, finish_reason=choice.finish_reason)
