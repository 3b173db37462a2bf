"""The tool-call interface the model sees: function schemas, and parsing of the calls it makes.

The model proposes a kernel by calling `submit_kernel{source}` with the full candidate source.
Auxiliary tools let it ask for more: `get_best` (the fastest correct kernel so far),
`diff_against_best{source?}`, `get_profile{attempt?}` and `get_ncu_profile{attempt?}` (hardware
counters, tools/counters/). The schemas live in toolcalls.json
(data, not code). Everything here is independent of the agent so an RL environment can reuse
it: `parse_call` turns one tool call into a `Submission`, an `AuxRequest` or a `FormatError`
whose `reason` is one line for the model; the payload helpers turn result records into the
JSON text returned for auxiliary calls.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

SUBMIT_KERNEL = "submit_kernel"
GET_BEST = "get_best"
DIFF_AGAINST_BEST = "diff_against_best"
GET_PROFILE = "get_profile"
GET_NCU_PROFILE = "get_ncu_profile"
CANDIDATE_CLASS = "ModelNew"
MAX_SOURCE_CHARS = 200_000

_SCHEMA_FILE = Path(__file__).with_name("toolcalls.json")
_FENCE = re.compile(r"^\s*```[\w+-]*[ \t]*\n(?P<body>.*?)\n?```\s*$", re.DOTALL)


@lru_cache(maxsize=1)
def _all_schemas() -> tuple[str, ...]:
    return tuple(json.dumps(tool) for tool in json.loads(_SCHEMA_FILE.read_text()))


def tool_schemas(auxiliary: bool = True, counters: bool = True) -> list[dict[str, Any]]:
    """The OpenAI function-calling `tools` list (fresh copies: callers may mutate them); `counters`:
    whether get_ncu_profile is offered (among the auxiliary tools)."""
    tools = [json.loads(text) for text in _all_schemas()]
    return [t for t in tools if (auxiliary and (counters or t["function"]["name"] != GET_NCU_PROFILE))
            or t["function"]["name"] == SUBMIT_KERNEL]


def source_hash(source: str) -> str:
    """sha256 of the candidate source text (UTF-8), the key the workspace and records use."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Submission:
    source: str
    source_hash: str


@dataclass(frozen=True)
class AuxRequest:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FormatError:
    reason: str  # one line, written for the model


ParsedCall = Submission | AuxRequest | FormatError


def parse_call(name: str, arguments: str | dict[str, Any] | None, *, auxiliary: bool = True,
               counters: bool = True) -> ParsedCall:
    """Validate one tool call. Never raises for anything the model sent."""
    available = [t["function"]["name"] for t in tool_schemas(auxiliary, counters)]
    if name not in available:
        return FormatError(f"unknown tool {name!r}; the tools are: {', '.join(available)}")
    args = _decode_arguments(arguments)
    if isinstance(args, FormatError):
        return args
    if name == SUBMIT_KERNEL:
        source = args.get("source")
        if not isinstance(source, str):
            return FormatError('submit_kernel needs a string argument "source" holding the full module source')
        return validate_source(source)
    if name == DIFF_AGAINST_BEST and "source" in args and not isinstance(args["source"], str):
        return FormatError('diff_against_best: "source" must be a string')
    if name in (GET_PROFILE, GET_NCU_PROFILE) and "attempt" in args:
        attempt = args["attempt"]
        if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
            return FormatError(f'{name}: "attempt" must be a positive integer')
    return AuxRequest(name, args)


def _decode_arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any] | FormatError:
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str):
        return FormatError(f"the tool arguments must be a JSON object, not {type(arguments).__name__}")
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as exc:
        return FormatError(f"the tool arguments are not valid JSON ({exc.msg} at line {exc.lineno} column "
                           f"{exc.colno}); send a JSON object and escape newlines and quotes in strings")
    except RecursionError:  # nested deeper than the parser goes: a completion's, never a reason to raise
        return FormatError("the tool arguments nest too deeply to read; send a flat JSON object")
    if not isinstance(value, dict):
        return FormatError(f"the tool arguments must be a JSON object, not {type(value).__name__}")
    return value


def validate_source(source: str) -> Submission | FormatError:
    """A candidate must be a Python module defining ModelNew. Markdown fences around it are removed."""
    match = _FENCE.match(source)
    if match:
        source = match.group("body")
    if not source.strip():
        return FormatError("the source is empty; send the full module defining class ModelNew")
    if len(source) > MAX_SOURCE_CHARS:
        return FormatError(f"the source is {len(source)} characters; the limit is {MAX_SOURCE_CHARS}")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return FormatError(f"the source is not a Python module: SyntaxError at line {exc.lineno}: {exc.msg}")
    except ValueError as exc:  # null bytes
        return FormatError(f"the source is not a Python module: {exc}")
    except (RecursionError, MemoryError):  # an expression nested past what the parser can hold
        return FormatError("the source nests an expression too deeply to parse; write it flatter")
    if not _defines(tree, CANDIDATE_CLASS):
        return FormatError(f"the source defines no top-level class {CANDIDATE_CLASS}")
    return Submission(source, source_hash(source))


def _defines(tree: ast.Module, name: str) -> bool:
    """A top-level `class ModelNew` (an alias or an import does not count: the evaluator wants the class)."""
    return any(isinstance(node, ast.ClassDef) and node.name == name for node in tree.body)


# --- payloads returned for auxiliary calls ---------------------------------------------------

PROFILE_FIELDS = ("verdict", "candidate_time", "eager_time", "compile_time", "speedup_vs_eager",
                  "speedup_vs_compile", "roofline", "own_kernel_share", "kernel_launches", "torch_ops",
                  "errors", "checks", "trials", "distributions", "dropped", "phases")


def profile_payload(attempt: int | None, record: dict[str, Any] | None) -> str:
    """JSON text of the parts of a result record that help optimizing."""
    if record is None:
        return json.dumps({"attempt": attempt, "error": "no such evaluated attempt"})
    payload = {"attempt": attempt}
    payload.update({key: record.get(key) for key in PROFILE_FIELDS if key in record})
    return json.dumps(payload, indent=1)


def counters_payload(attempt: int | None, counters: dict[str, Any] | None, why_not: str | None = None) -> str:
    """JSON text of an attempt's hardware counters (tools/counters/measure.py, Counters.as_dict), or
    why there are none."""
    if counters is None:
        return json.dumps({"attempt": attempt, "available": False, "reason": why_not or "no such evaluated attempt"})
    return json.dumps({"attempt": attempt, **counters}, indent=1)


def best_payload(attempt: int | None, source: str | None, record: dict[str, Any] | None) -> str:
    """JSON text describing the best kernel so far (null fields when there is none)."""
    record = record or {}
    return json.dumps({
        "attempt": attempt,
        "speedup_vs_eager": record.get("speedup_vs_eager"),
        "speedup_vs_compile": record.get("speedup_vs_compile"),
        "median_ms": (record.get("candidate_time") or {}).get("median_ms"),
        "roofline_fraction": (record.get("roofline") or {}).get("achieved_fraction"),
        "source": source,
    }, indent=1)


def diff_payload(best_source: str | None, source: str | None, *, best_name: str = "best",
                 name: str = "candidate") -> str:
    """A unified diff from the best source to `source`, or a JSON note when either is missing."""
    if best_source is None:
        return json.dumps({"diff": None, "note": "no correct kernel yet"})
    if source is None:
        return json.dumps({"diff": None, "note": "nothing to compare: no source given and no submission yet"})
    lines = difflib.unified_diff(best_source.splitlines(keepends=True), source.splitlines(keepends=True),
                                 fromfile=best_name, tofile=name)
    text = "".join(lines)
    return text if text else json.dumps({"diff": "", "note": "identical to the best kernel"})
