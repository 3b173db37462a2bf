"""The multi-turn environment (agent/learn/rl_env.py's KernelEnv) as an OpenEnv server: `ratchet serve`.

OpenEnv's client (`openenv.core.EnvClient`, which TRL's `environment_factory` path drives) holds
one WebSocket per episode at `/ws` and sends JSON messages; this server answers each as OpenEnv's
own server does:

    {"type": "reset", "data": {"problem": "19_ReLU"}}      -> {"type": "observation", "data": {...}}
    {"type": "step",  "data": {"tool_call": {...}}}          -> {"type": "observation", "data": {...}}
                       or {"message": <assistant message>}, or {"stop": true}
    {"type": "state"}                                        -> {"type": "state", "data": {...}}
    {"type": "close"}                                        -> the connection ends
    anything malformed                                       -> {"type": "error", "data": {"message", "code"}}

An observation's data is `{"observation": {...}, "reward": float | None, "done": bool}`: after a
reset, the system and task messages, the tool schemas and the problem's name; after a step, the
messages that answer it (tool results, or a user message for a reply without a usable tool call)
and `info` (the verdict, the reward's outcome, attempts used). The reward is tools/reward's for a
submission (KernelEnv: the agent's own feedback, prompts and rules). Plain GETs answer `/health`,
`/metadata` and `/schema`.

Sessions: one KernelEnv per connection, all sharing one KernelReward (its evaluators stay warm
across episodes, one per problem, with a spare candidate worker per session). At most
`max_sessions` connections hold a session: the next one gets a `CAPACITY_REACHED` error naming the
limit and is closed (retry later), and a session silent for `idle_timeout_s` is closed, so an idle
client cannot hold the slots. A malformed message gets an error and the session goes on. Only the
problems the server was started with can be reset to, by name (the file's stem) or path.
Evaluations of different sessions overlap where nothing is timed; on a GPU with timing on they
take turns on the device (the reward's `exclusive_timing`: timing has the card to itself), so a
candidate that stalls to its deadline delays the others that long.

Written on the `websockets` library's threaded server (a connection per thread), not on OpenEnv's
FastAPI server: that package brings gradio, MCP and a web UI into the evaluator's process for
three message types.
"""
from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

NAME = "ratchet-kernel"


@dataclass
class ServerConfig:
    problems: list[Path]
    host: str = "127.0.0.1"
    port: int = 8000
    max_sessions: int = 4
    idle_timeout_s: float = 600.0  # a session that sends nothing this long is closed (its slot freed)
    env: dict[str, Any] = field(default_factory=dict)  # EnvConfig fields (max_attempts, language, ...)
    reward: dict[str, Any] = field(default_factory=dict)  # RewardConfig fields (device, precision, ...)


class Protocol(ValueError):
    """A message this server cannot act on; `code` is OpenEnv's WSErrorCode."""

    def __init__(self, message: str, code: str = "VALIDATION_ERROR") -> None:
        super().__init__(message)
        self.code = code


class EnvServer:
    """The server (module docstring). `serve_forever()` blocks; `start()` serves from a thread and
    returns once it listens; `close()` stops it and closes the evaluators."""

    def __init__(self, config: ServerConfig) -> None:
        from agent.learn.rl_env import EnvConfig
        from tools.reward import KernelReward, RewardConfig

        if config.max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, not {config.max_sessions}")
        self.config = config
        self.problems = {p.stem: p for p in config.problems}
        self.env_config = EnvConfig(**config.env)
        self.reward = KernelReward(RewardConfig(**config.reward))
        self._slots = threading.BoundedSemaphore(config.max_sessions)
        self._lock = threading.Lock()
        self.active = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # lifetime ------------------------------------------------------------------------------------
    def start(self) -> "EnvServer":
        from websockets.sync.server import serve

        self._server = serve(self._session, self.config.host, self.config.port, process_request=self._http,
                             max_size=8 << 20)
        self._thread = threading.Thread(target=self._server.serve_forever, name="ratchet-env-server", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.start()
        assert self._thread is not None
        self._thread.join()

    @property
    def port(self) -> int:
        return int(self._server.socket.getsockname()[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.reward.close()

    def __enter__(self) -> "EnvServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # plain HTTP ----------------------------------------------------------------------------------
    def _http(self, connection: Any, request: Any) -> Any:
        """GET /health, /metadata, /schema; /ws goes on to the WebSocket handshake."""
        path = request.path.split("?")[0]
        if path == "/ws":
            return None
        body: dict[str, Any] | None = {
            "/health": {"status": "healthy", "active_sessions": self.active, "max_sessions": self.config.max_sessions},
            "/metadata": {"name": NAME, "description": "ratchet's kernel-optimization environment: write a faster "
                          "ModelNew for a PyTorch module, judged by ratchet's evaluator", "version": _version(),
                          "problems": sorted(self.problems)},
            "/schema": SCHEMA,
        }.get(path)
        if body is None:
            response = connection.respond(HTTPStatus.NOT_FOUND, f"no {path}: episodes are WebSocket sessions at /ws\n")
        else:
            response = connection.respond(HTTPStatus.OK, json.dumps(body) + "\n")
            del response.headers["Content-Type"]  # respond() says text/plain
            response.headers["Content-Type"] = "application/json"
        return response

    # sessions ------------------------------------------------------------------------------------
    def _session(self, websocket: Any) -> None:
        from websockets.exceptions import ConnectionClosed

        if not self._slots.acquire(blocking=False):
            websocket.send(_error(f"all {self.config.max_sessions} sessions are busy (each holds a GPU slot of this "
                                  "server's evaluators); retry later or start the server with more --max-sessions",
                                  "CAPACITY_REACHED"))
            websocket.close()
            return
        with self._lock:
            self.active += 1
        session = Session(self)
        try:
            while True:
                try:
                    raw = websocket.recv(timeout=self.config.idle_timeout_s)
                except TimeoutError:  # a connection that holds a slot and says nothing frees it
                    websocket.send(_error(f"no message for {self.config.idle_timeout_s:g} s: the session is closed "
                                          "and its slot freed", "SESSION_ERROR"))
                    break
                reply, close = session.handle(raw)
                if reply is not None:
                    websocket.send(reply)
                if close:
                    break
        except ConnectionClosed:
            pass  # the client went away (or sent a frame past the size limit): its session ends with it
        finally:
            with self._lock:
                self.active -= 1
            self._slots.release()


class Session:
    """One connection's episodes: a KernelEnv over the server's shared reward."""

    def __init__(self, server: EnvServer) -> None:
        from agent.learn.rl_env import KernelEnv

        self.server = server
        self.env = KernelEnv(server.env_config, server.reward)
        self.episode_id: str | None = None
        self.steps = 0

    def handle(self, raw: Any) -> tuple[str | None, bool]:
        """The reply to one message, and whether the connection ends."""
        from agent.learn.rl_env import EpisodeDone
        from tools.problem import ProblemError

        try:
            message = json.loads(raw)
        except (TypeError, ValueError) as exc:
            return _error(f"invalid JSON: {exc}", "INVALID_JSON"), False
        except RecursionError:
            return _error("invalid JSON: nested deeper than this server reads", "INVALID_JSON"), False
        if not isinstance(message, dict):
            return _error("a message is a JSON object with a `type`", "VALIDATION_ERROR"), False
        kind, data = message.get("type"), message.get("data") or {}
        try:
            if not isinstance(data, dict):
                raise Protocol("`data` must be a JSON object")
            if kind == "close":
                return None, True
            if kind == "reset":
                return _observation(*self.reset(data)), False
            if kind == "step":
                return _observation(*self.step(data)), False
            if kind == "state":
                return json.dumps({"type": "state", "data": self.state()}), False
            raise Protocol(f"unknown message type {kind!r} (reset, step, state, close)", "UNKNOWN_TYPE")
        except Protocol as exc:
            return _error(str(exc), exc.code), False
        except EpisodeDone as exc:
            return _error(str(exc), "SESSION_ERROR"), False
        except ProblemError as exc:
            return _error(str(exc), "VALIDATION_ERROR"), False
        except (TypeError, KeyError, AttributeError, ValueError) as exc:  # a message of the wrong shape, deep inside
            return _error(f"the message could not be acted on ({type(exc).__name__}: {exc})", "EXECUTION_ERROR"), False

    def reset(self, data: dict[str, Any]) -> tuple[dict[str, Any], float | None, bool]:
        problems = self.server.problems
        name = data.get("problem")
        if name is None and len(problems) == 1:
            name = next(iter(problems))
        if not isinstance(name, str):
            raise Protocol(f"reset needs data.problem, one of: {', '.join(sorted(problems))}")
        path = problems.get(name) or next((p for p in problems.values() if str(p) == name), None)
        if path is None:
            raise Protocol(f"no problem {name!r} on this server (it serves: {', '.join(sorted(problems))})")
        entry = data.get("entry")
        if entry is not None and not isinstance(entry, str):
            raise Protocol("data.entry names the reference class (a string; default Model)")
        messages, tools = self.env.reset(path, entry=entry)
        self.episode_id, self.steps = str(data.get("episode_id") or uuid.uuid4()), 0
        return {"messages": messages, "tools": tools, "problem": path.stem, "episode_id": self.episode_id}, None, False

    def step(self, data: dict[str, Any]) -> tuple[dict[str, Any], float | None, bool]:
        if self.episode_id is None:
            raise Protocol("step before reset: send a reset first", "SESSION_ERROR")
        if self.env.done:
            raise Protocol("the episode is done: send a reset to start another", "SESSION_ERROR")
        given = [k for k in ("tool_call", "message") if data.get(k) is not None] + (["stop"] if data.get("stop") is True else [])
        if len(given) != 1:
            raise Protocol("a step's data holds exactly one of tool_call (an OpenAI tool call), message (an "
                           "assistant message) or stop (true: the policy ends the episode)")
        self.steps += 1
        if given[0] == "stop":
            _, reward, done, info = self.env.step(None)
            return {"messages": [], "info": info}, reward, done
        if given[0] == "tool_call":
            call = data["tool_call"]
            if not isinstance(call, dict):
                raise Protocol("tool_call must be an object {id, type, function: {name, arguments}}")
            answer, reward, done, info = self.env.step(call)
            messages = [answer] if answer is not None else []
        else:
            reply = data["message"]
            if not isinstance(reply, dict):
                raise Protocol("message must be an assistant message object")
            messages, reward, done, info = self.env.step_reply(reply)
        info.pop("record", None)  # the full record stays in the server's log; the outcome says what counts
        return {"messages": messages, "info": info}, reward, done

    def state(self) -> dict[str, Any]:
        env = self.env
        return {"episode_id": self.episode_id, "step_count": self.steps,
                "problem": env.problem.stem if env.problem else None, "done": env.done,
                "attempts_used": getattr(env, "attempts_used", 0), "total_reward": getattr(env, "total_reward", 0.0),
                "best": getattr(env, "best", None)}


def _observation(observation: dict[str, Any], reward: float | None, done: bool) -> str:
    return json.dumps({"type": "observation", "data": {"observation": observation, "reward": reward, "done": done}},
                      default=str)


def _error(message: str, code: str) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": code}})


def _version() -> str:
    from agent.cli.version import version

    return version()


SCHEMA = {
    "action": {"type": "object", "description": "exactly one of tool_call, message or stop",
               "properties": {"tool_call": {"type": "object", "description": "an OpenAI tool call"},
                              "message": {"type": "object", "description": "an assistant message with tool_calls"},
                              "stop": {"type": "boolean"}}},
    "observation": {"type": "object",
                    "properties": {"messages": {"type": "array", "items": {"type": "object"}},
                                   "tools": {"type": "array", "description": "after a reset: the tool schemas"},
                                   "info": {"type": "object", "description": "after a step: verdict, outcome, attempts"},
                                   "problem": {"type": "string"}, "episode_id": {"type": "string"}}},
    "state": {"type": "object",
              "properties": {"episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer"},
                             "problem": {"type": ["string", "null"]}, "done": {"type": "boolean"},
                             "attempts_used": {"type": "integer"}, "total_reward": {"type": "number"}}},
}
