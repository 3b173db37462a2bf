"""A multi-turn RL environment: the agent's conversation, with the evaluator as the reward.

    env = KernelEnv(EnvConfig(max_attempts=4), RewardConfig(device="cuda:0"))
    messages, tools = env.reset("problems/19_ReLU.py")       # system + task prompts, tool schemas
    while not done:
        reply = policy(messages, tools)                      # an assistant message with tool calls
        results, reward, done, info = env.step_reply(reply)  # results: tool (or user) messages
        messages = env.messages                              # the whole conversation so far
    # or one tool call at a time:
    result, reward, done, info = env.step({"id": "c1", "type": "function",
                                           "function": {"name": "submit_kernel", "arguments": "{...}"}})

The prompts, tool schemas and answers are the agent's own (`ratchet optimize`): the system and
task messages come from the same templates through `agent.loop.turns.system_text/task_text`, the
tools from `tools/toolcalls.json`, a turn's tool calls are read by the agent's own
`agent.loop.turns.read_turn`, and each submission is answered with the agent's feedback template for
its verdict. A turn is handled as the agent handles it: the first `submit_kernel` call of a turn is evaluated (later
ones are answered "not run"), auxiliary calls (`get_best`, `diff_against_best`, `get_profile`;
not `get_ncu_profile`, whose Nsight Compute replay costs seconds of GPU per call in every rollout)
are answered from this episode's attempts and cost nothing, a reply with no tool call or a
malformed call is a format error that counts as an attempt, and `max_aux_rounds + 1`
auxiliary-only turns in a row count as a format error too. A source submitted again in the
same episode (the same syntax tree: comments, layout and docstrings aside) is not evaluated again
(the agent tells the model so) and earns `repeat_reward`,
unless its evaluation was an evaluator fault (verdict error): then it is evaluated again.

Rewards: a submission earns `tools.reward.score.score_record` of its result (see
tools/reward/score.py for the formula and its defaults); format errors earn
`format_error_reward` (0); auxiliary calls 0. An evaluator fault earns the reward's
`fault_reward` and `info["outcome"]["evaluator_fault"]` is true: mask it in training.
The episode is done when `max_attempts` attempts are used, or when the policy stops it
(`step(None)` or `stop()`). Budgets of the agent that are not about the model's behaviour
(tokens, wall time, patience, roofline target) are left to the trainer.

Evaluators are shared through the reward object (one per problem, kept warm across episodes).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.loop.render import render, render_feedback
from agent.loop.turns import answer_aux, first_line, read_turn, system_text, task_text
from agent.workspace.attempt import Attempt, beats
from tools.env import target_name
from tools.record import Result, Verdict
from tools.reward import KernelReward, RewardConfig
from tools.toolcalls import AuxRequest, Submission, tool_schemas

Message = dict[str, Any]


@dataclass(frozen=True)
class EnvConfig:
    max_attempts: int = 20  # evaluated submissions plus format errors, as in `ratchet optimize`
    language: str = "triton"  # or "cuda"
    gpu: str | None = None  # the target named in the system prompt (None: the device's name)
    auxiliary_tools: bool = True
    max_aux_rounds: int = 4
    entry: str = "Model"
    repeat_reward: float = 0.0  # a source already submitted in this episode
    format_error_reward: float = 0.0


class EpisodeDone(RuntimeError):
    """step() after the episode ended: call reset()."""


class KernelEnv:
    def __init__(self, config: EnvConfig | None = None, reward: KernelReward | RewardConfig | None = None) -> None:
        self.config = config or EnvConfig()
        self._own_reward = not isinstance(reward, KernelReward)
        self.reward = reward if isinstance(reward, KernelReward) else KernelReward(reward or RewardConfig())
        self.tools = tool_schemas(self.config.auxiliary_tools, counters=False)
        self.problem: Path | None = None
        self.messages: list[Message] = []
        self.done = True

    # the episode -----------------------------------------------------------------------------------
    def reset(self, problem: str | Path, *, entry: str | None = None) -> tuple[list[Message], list[dict[str, Any]]]:
        """Start an episode: the system and task messages, and the tool schemas (fresh copies)."""
        entry = entry or self.config.entry
        self.problem = Path(problem)
        self.entry = entry
        self.evaluator = self.reward.evaluator(self.problem, entry)
        info = self.evaluator.problem
        self.attempts: dict[int, tuple[str, dict[str, Any], Attempt]] = {}
        self.by_hash: dict[str, int] = {}
        self.best: dict[str, Any] | None = None
        self.latest: int | None = None
        self.attempts_used = 0
        self.aux_rounds = 0
        self.total_reward = 0.0
        self.done = False
        self._calls = 0
        self.messages = [
            {"role": "system", "content": system_text(info, language=self.config.language, gpu=self.gpu_name(),
                                                      entry=entry, auxiliary=self.config.auxiliary_tools,
                                                      precision=self.reward.config.precision)},
            {"role": "user", "content": task_text(info, entry=entry, problem_name=self.problem.name,
                                                  language=self.config.language, baseline={**static_baseline(info), **self.evaluator.baseline()},
                                                  max_attempts=self.config.max_attempts)},
        ]
        return [dict(m) for m in self.messages], tool_schemas(self.config.auxiliary_tools, counters=False)

    def step(self, tool_call: dict[str, Any] | tuple[str, Any] | None) -> tuple[Message | None, float, bool, dict[str, Any]]:
        """One tool call as a whole turn. `None` stops the episode (the policy is done)."""
        if tool_call is None:
            return None, 0.0, self.stop(), {"kind": "stopped", "attempts_used": getattr(self, "attempts_used", 0)}
        call = self._normalize_call(tool_call)
        replies, reward, done, info = self.step_reply({"role": "assistant", "content": None, "tool_calls": [call]})
        answer = next((m for m in replies if m.get("tool_call_id") == call["id"]), replies[0] if replies else None)
        return answer, reward, done, info

    def step_reply(self, message: Message) -> tuple[list[Message], float, bool, dict[str, Any]]:
        """One assistant turn (content and any tool calls), answered as the agent answers it."""
        if self.done:
            raise EpisodeDone("the episode is done; call reset()")
        message = {"role": "assistant", "content": message.get("content"),
                   **({"tool_calls": [self._normalize_call(c) for c in message["tool_calls"]]}
                      if message.get("tool_calls") else {}),
                   **{k: v for k, v in message.items() if k not in ("role", "content", "tool_calls")}}
        self.messages.append(message)
        calls = [(c["id"], c["function"]["name"], c["function"].get("arguments")) for c in message.get("tool_calls") or []]
        reading = read_turn(calls, message.get("content"), auxiliary=self.config.auxiliary_tools,
                            answer_aux=self.answer_aux, counters=False,
                            remaining_after=max(0, self.config.max_attempts - self.attempts_used - 1))
        new: list[Message] = [_tool(call_id, content) for call_id, content, _ in reading.answers]
        if reading.proposal is not None:
            return self._answer(new, *reading.proposal)
        self.aux_rounds += 1  # auxiliary calls only, all answered
        if self.aux_rounds >= self.config.max_aux_rounds + 1:
            return self._answer(new, None, render("aux_exhausted", rounds=self.config.max_aux_rounds + 1))
        self.messages.extend(new)
        return new, 0.0, False, self._info("aux")

    def stop(self) -> bool:
        """The policy ends the episode."""
        self.done = True
        return True

    def close(self) -> None:
        """Close the evaluators if this environment made its own reward object."""
        if self._own_reward:
            self.reward.close()

    def __enter__(self) -> "KernelEnv":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # answers ---------------------------------------------------------------------------------------
    def _answer(self, new: list[Message], call_id: str | None, proposal: Submission | str) -> tuple[list[Message], float, bool, dict[str, Any]]:
        """Answer the turn's proposal (a submission, or why the reply was unusable); it counts as an attempt."""
        self.aux_rounds = 0
        self.attempts_used += 1
        remaining = max(0, self.config.max_attempts - self.attempts_used)
        if isinstance(proposal, Submission):
            content, reward, info = self._submission(proposal, remaining)
        else:
            content = render("format_error", reason=proposal, tool_call=call_id is not None, remaining=remaining)
            reward, info = self.config.format_error_reward, self._info("format_error", verdict="format_error", reason=proposal)
        new.append(_tool(call_id, content) if call_id is not None else {"role": "user", "content": content})
        self.messages.extend(new)
        self.done = self.attempts_used >= self.config.max_attempts
        self.total_reward += reward
        info.update(attempts_used=self.attempts_used, remaining=remaining, done=self.done, total_reward=self.total_reward)
        return new, reward, self.done, info

    def _submission(self, sub: Submission, remaining: int) -> tuple[str, float, dict[str, Any]]:
        same = code_key(sub.source)  # a comment or a blank line more is the same kernel submitted again
        earlier = self.by_hash.get(same)
        repeat = earlier is not None and self.attempts[earlier][1].get("verdict") != Verdict.ERROR.value
        if repeat:
            number = self.by_hash[same]
            source, record, attempt = self.attempts[number]
            outcome = self.reward.score_source(self.problem, source, self.entry)
            reward, improved = self.config.repeat_reward, False
        else:
            number = len(self.attempts) + 1
            outcome = self.reward.score_source(self.problem, sub.source, self.entry)
            record = outcome.record or {}
            attempt = Attempt.from_result(number, Result.from_dict(record), model="", run_id="", source=sub.source)
            incumbent = self.attempts[self.best["attempt"]][2] if self.best else None
            improved = beats(attempt, incumbent)
            attempt.became_best = attempt.is_best = improved
            self.attempts[number] = (sub.source, record, attempt)
            self.by_hash[same] = number
            reward = outcome.reward
            if improved:
                self.best = summary(attempt, record)
        self.latest = number
        content = render_feedback(record["verdict"], attempt=number, record=record, best=self.best, is_best=improved,
                                  repeated=repeat, remaining=remaining)
        info = self._info("submission", verdict=record["verdict"], attempt=number, repeat=repeat, improved=improved,
                          outcome=outcome.to_dict(record=False), record=record)
        return content, reward, info

    def answer_aux(self, request: AuxRequest) -> str:
        """get_best, diff_against_best and get_profile, from this episode's attempts (the agent
        graph's handler, agent.loop.turns.answer_aux)."""
        return answer_aux(request, EpisodeAttempts(self))

    def _info(self, kind: str, **extra: Any) -> dict[str, Any]:
        return {"kind": kind, "attempts_used": self.attempts_used, "best": self.best, **extra}

    def _normalize_call(self, call: dict[str, Any] | tuple[str, Any]) -> dict[str, Any]:
        """An OpenAI tool call {id, type, function: {name, arguments}} (arguments as JSON text)."""
        if isinstance(call, tuple):
            name, arguments = call
            call = {"function": {"name": name, "arguments": arguments}}
        fn = call.get("function") or {"name": call.get("name"), "arguments": call.get("arguments")}
        arguments = fn.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments)
        self._calls += 1
        return {"id": call.get("id") or f"call_{self._calls}", "type": "function",
                "function": {"name": fn.get("name"), "arguments": arguments if arguments is not None else ""}}

    def gpu_name(self) -> str:
        """The target named in the system prompt, as `ratchet optimize` names it."""
        return target_name(str(self.evaluator.device), self.config.gpu)


@dataclass
class EpisodeAttempts:
    """An episode's attempts as the auxiliary tools read them (agent.loop.turns.AttemptLookup)."""
    env: KernelEnv

    def best(self) -> tuple[int, str | None, dict[str, Any] | None] | None:
        found = self.env.attempts.get(self.env.best["attempt"]) if self.env.best else None
        return (found[2].number, found[0], found[1]) if found else None

    def latest(self) -> tuple[int, str | None] | None:
        number = self.env.latest
        return (number, self.env.attempts[number][0]) if number is not None and number in self.env.attempts else None

    def record(self, number: Any) -> dict[str, Any] | None:
        found = self.env.attempts.get(number)
        return found[1] if found else None

    def source(self, number: Any) -> str | None:
        found = self.env.attempts.get(number)
        return found[0] if found else None


def code_key(source: str) -> str:
    """What makes two submissions the same kernel: their syntax trees without comments, layout and
    docstrings (an attacker's find: a new comment made the same correct kernel pay again and again)."""
    import ast
    import hashlib

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return hashlib.sha256(source.encode()).hexdigest()  # read_turn refused it already; its text is its key
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def static_baseline(problem: Any) -> dict[str, Any]:
    """What the task message knows before anything is timed (as agent.loop.runner starts a run)."""
    moved = sum(getattr(problem, name, 0) or 0 for name in ("input_bytes", "param_bytes", "output_bytes"))
    return {"eager_ms": None, "compile_ms": None, "floor_ms": None, "bytes_moved": moved or None,
            "flops": getattr(problem, "flops", None), "measured": False}


def summary(attempt: Attempt, record: dict[str, Any]) -> dict[str, Any]:
    """The agent's AttemptSummary of an attempt (what the feedback templates read as `best`)."""
    timing = record.get("candidate_time") or {}
    return {"attempt": attempt.number, "sha": "", "source_hash": attempt.source_sha256, "verdict": record["verdict"],
            "speedup_vs_eager": record.get("speedup_vs_eager"), "speedup_vs_compile": record.get("speedup_vs_compile"),
            "median_ms": timing.get("median_ms"), "roofline_fraction": (record.get("roofline") or {}).get("achieved_fraction"),
            "is_best": attempt.became_best, "reused": False, "repeat": False, "ci_low_ms": timing.get("ci_low_ms"),
            "ci_high_ms": timing.get("ci_high_ms"), "timing_measured": bool(timing.get("measured")),
            "detail": first_line(record.get("message"))}


def _tool(call_id: str, content: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": content}
