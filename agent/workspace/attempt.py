"""One attempt as the workspace records it: its commit message, its trailers, and the best rule.

Pure functions, no git: `agent.workspace.root` writes the messages made here and parses them back.

The message: a subject (`attempt 3: ok, 1.83x vs eager, 0.412 ms, new best`), a few lines on
what changed and what it measured (agent.workspace.review), then the trailers.

Trailers (the last paragraph of every attempt commit; "n/a" where the record has no value;
floats written with `repr`, so they parse back to exactly the record's numbers):

    Ratchet-Kind: attempt
    Ratchet-Attempt: 3
    Ratchet-Verdict: ok                 (any verdict; error: an evaluator fault, the kernel not judged)
    Ratchet-Speedup-Eager: 1.83
    Ratchet-Speedup-Compile: 0.97
    Ratchet-Median-Ms: 0.412
    Ratchet-CI-Low-Ms: 0.409
    Ratchet-CI-High-Ms: 0.415
    Ratchet-Timing: measured            (or not-measured)
    Ratchet-Roofline-Fraction: 0.41
    Ratchet-Model: qwen2.5-coder-32b
    Ratchet-Run-Id: 20261121-0412-ab12
    Ratchet-Source-Sha256: 9f86d0...
    Ratchet-New-Best: yes               (whether this attempt became the best when committed)
    Ratchet-Precision: fp32             (the run's precision, tools/precision.py; n/a: before record schema 6)
    Ratchet-Generalizes: yes            (the drop-in check: yes, no, or n/a when nothing was held out)
    Ratchet-Library: no                 (yes: most GPU time in library kernels the reference does not run; n/a: not measured)
    Ratchet-Tokens: 5231                (the model turns since the previous attempt's commit, this one's included)
    Ratchet-Cost-Usd: 0.0031386         (their dollars at the run's price, agent/cost.py; "no price"; 0.0: built-in)
    Ratchet-Run-Cost-Usd: 0.0094        (the run's dollars so far, every turn of every session of it)
    Ratchet-Eval-S: 2.8412              (the evaluation's seconds on the device: the record's phases.total)
    Ratchet-Lineage: 2                  (the conversation of the run's search it came from, agent/loop/beam.py)
    Ratchet-Parent-Attempt: 1           (the attempt whose outcome that conversation answered; n/a: the task's first)

Tokens, the costs and Eval-S are n/a on commits made before them, and so are the last two.

One workspace holds one precision (`precision_conflict`): times measured against TF32 baselines
are not comparable with fp32 ones, so neither can replace the other as the best.
"""
from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.cost import NO_PRICE, format_usd
from tools.record import Result, TimeStats, Verdict
from tools.timing.stats import below_beyond_offset

NA = "n/a"
KIND_ATTEMPT = "attempt"

# (trailer key, Attempt field, kind): kind is "int", "float", "str", "bool" or "tristate" (yes, no, n/a).
_TRAILERS = (
    ("Ratchet-Attempt", "number", "int"),
    ("Ratchet-Verdict", "verdict", "verdict"),
    ("Ratchet-Speedup-Eager", "speedup_vs_eager", "float"),
    ("Ratchet-Speedup-Compile", "speedup_vs_compile", "float"),
    ("Ratchet-Median-Ms", "median_ms", "float"),
    ("Ratchet-CI-Low-Ms", "ci_low_ms", "float"),
    ("Ratchet-CI-High-Ms", "ci_high_ms", "float"),
    ("Ratchet-Timing", "timing_measured", "timing"),
    ("Ratchet-Roofline-Fraction", "roofline_fraction", "float"),
    ("Ratchet-Model", "model", "str"),
    ("Ratchet-Run-Id", "run_id", "str"),
    ("Ratchet-Source-Sha256", "source_sha256", "str"),
    ("Ratchet-New-Best", "became_best", "bool"),
    ("Ratchet-Precision", "precision", "str"),
    ("Ratchet-Generalizes", "generalizes", "tristate"),
    ("Ratchet-Library", "library", "tristate"),
    ("Ratchet-Tokens", "tokens", "count"),
    ("Ratchet-Cost-Usd", "cost_usd", "usd"),
    ("Ratchet-Run-Cost-Usd", "run_cost_usd", "usd"),
    ("Ratchet-Eval-S", "eval_s", "float"),
    ("Ratchet-Lineage", "lineage", "count"),
    ("Ratchet-Parent-Attempt", "parent_attempt", "count"),
)


@dataclass
class Attempt:
    """The key figures of one committed attempt, as parsed from its commit's trailers."""

    number: int
    sha: str  # the attempt's commit
    verdict: Verdict
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    median_ms: float | None = None
    ci_low_ms: float | None = None  # 95% interval of the candidate's median time
    ci_high_ms: float | None = None
    roofline_fraction: float | None = None
    model: str = ""
    run_id: str = ""
    is_best: bool = False  # it is the workspace's best now
    timing_measured: bool = False  # candidate_time.measured in the record
    became_best: bool = False  # it became the best when it was committed
    source_sha256: str = ""
    subject: str = ""
    committed_at: int = 0  # unix seconds
    precision: str = ""  # "fp32" | "tf32"; "": none recorded (before the record's schema 6, or an evaluator fault)
    generalizes: bool | None = None  # the record's drop-in check (None: nothing held out, or an older commit)
    library: bool | None = None  # the record's library mark (schema 7; None: not measured, or an older commit)
    # what it cost (agent/cost.py): tokens None on a commit made before these trailers; then a cost of
    # None is "no price" where tokens are known, else unknown (n/a)
    tokens: int | None = None  # the model turns since the previous attempt's commit, this one's included
    cost_usd: float | None = None  # their dollars at the run's price (0.0 for the built-in policy)
    run_cost_usd: float | None = None  # the run's dollars so far, when this attempt was committed
    eval_s: float | None = None  # the evaluation's seconds on the device (the record's phases.total)
    lineage: int | None = None  # the run's conversation it came from (None: an older commit, or none given)
    parent_attempt: int | None = None  # the attempt that conversation answered last (None: the task's first)

    @property
    def ok(self) -> bool:
        return self.verdict is Verdict.OK

    @property
    def timed(self) -> bool:
        """Measured, with a median to compare: the only attempts the noise rule can rank."""
        return self.timing_measured and self.median_ms is not None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["verdict"] = self.verdict.value
        return data

    @classmethod
    def from_result(cls, number: int, result: Result, *, model: str, run_id: str, source: str) -> "Attempt":
        t = result.candidate_time
        return cls(
            number=number, sha="", verdict=result.verdict,
            speedup_vs_eager=_num(result.speedup_vs_eager),
            speedup_vs_compile=_num(result.speedup_vs_compile),
            median_ms=_num(t.median_ms), ci_low_ms=_num(t.ci_low_ms), ci_high_ms=_num(t.ci_high_ms),
            roofline_fraction=_num(result.roofline.achieved_fraction),
            model=one_line(model), run_id=one_line(run_id), timing_measured=bool(t.measured),
            source_sha256=hashlib.sha256(source.encode()).hexdigest(), precision=result.precision or "",
            generalizes=result.generalizes, library=result.library, eval_s=_num((result.phases or {}).get("total")),
        )

    def cost_cell(self, field: str = "cost_usd") -> str:
        """`cost_usd` or `run_cost_usd` as people read it: `$0.00314`, "no price", or "n/a" (a commit
        made before costs were kept)."""
        return NA if self.tokens is None else format_usd(getattr(self, field))

    @classmethod
    def from_trailers(cls, trailers: dict[str, str], *, sha: str, subject: str = "", committed_at: int = 0) -> "Attempt":
        values: dict[str, Any] = {}
        for key, name, kind in _TRAILERS:
            text = trailers.get(key, NA).strip()
            if kind == "int":
                values[name] = int(text)
            elif kind == "count":
                values[name] = None if text == NA else int(text)
            elif kind == "usd":
                values[name] = None if text in (NA, NO_PRICE) else float(text)
            elif kind == "verdict":
                values[name] = Verdict(text)
            elif kind == "float":
                values[name] = None if text == NA else float(text)
            elif kind == "timing":
                values[name] = text == "measured"
            elif kind == "bool":
                values[name] = text == "yes"
            elif kind == "tristate":
                values[name] = True if text == "yes" else False if text == "no" else None
            else:
                values[name] = "" if text == NA else text
        return cls(sha=sha, subject=subject, committed_at=committed_at, **values)

    def trailers(self) -> list[tuple[str, str]]:
        out = [("Ratchet-Kind", KIND_ATTEMPT)]
        for key, name, kind in _TRAILERS:
            value = getattr(self, name)
            if kind == "verdict":
                text = value.value
            elif kind == "float":
                text = NA if value is None else repr(float(value))
            elif kind == "count":
                text = NA if value is None else str(int(value))
            elif kind == "usd":
                text = repr(float(value)) if value is not None else NO_PRICE if self.tokens is not None else NA
            elif kind == "timing":
                text = "measured" if value else "not-measured"
            elif kind == "bool":
                text = "yes" if value else "no"
            elif kind == "tristate":
                text = NA if value is None else "yes" if value else "no"
            else:
                text = str(value) if value not in (None, "") else NA
            out.append((key, text))
        return out

    def summary(self) -> str:
        """The figures in a few words: `ok, 1.83x vs eager, 0.412 ms`."""
        parts = [self.verdict.value + (" (evaluator fault, not judged)" if self.verdict is Verdict.ERROR else "")]
        if self.ok and self.speedup_vs_eager is not None:
            parts.append(f"{self.speedup_vs_eager:.2f}x vs eager")
        if self.ok and self.timed:
            parts.append(f"{format_ms(self.median_ms)} ms")
        elif self.ok:
            parts.append("not timed")
        return ", ".join(parts)

    def message(self, body: Sequence[str] = ()) -> str:
        """The full commit message: subject, the body's lines (agent.workspace.review), the trailers."""
        subject = f"attempt {self.number}: {self.summary()}" + (", new best" if self.became_best else "")
        lines = [one_line(line)[:300].lstrip("-# ") for line in body]  # a leading '---' would hide the trailers
        text = "\n".join(line for line in lines if line)
        return f"{subject}\n\n" + (f"{text}\n\n" if text else "") + "".join(f"{k}: {v}\n" for k, v in self.trailers())


def format_ms(ms: float) -> str:
    """Three significant digits, trailing zeros kept: 0.412, 1.00, 12.3, 1234."""
    return f"{ms:#.3g}" if abs(ms) < 1000 else f"{ms:.0f}"


def _num(value: Any) -> float | None:
    return None if value is None else float(value)


def one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


def parse_trailers(text: str) -> dict[str, str]:
    """`Key: value` lines (as `git log --format=%(trailers:only,unfold)` prints them) to a dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    return out


def precision_conflict(attempts: Sequence[Attempt], precision: str) -> str | None:
    """Why a run or an attempt of `precision` cannot join a workspace holding `attempts`, or None.
    An attempt with no precision binds nothing: one committed before the record's schema 6 (its
    baselines ran with PyTorch's defaults, neither setting), or an evaluator fault's record."""
    held = sorted({a.precision for a in attempts if a.precision} - {precision})
    if not held:
        return None
    return (f"it holds {' and '.join(held)} attempts, and times against {' and '.join(held)} baselines do not compare "
            f"with {precision} ones: give a {precision} run a workspace of its own (--workspace DIR)")


def beats(new: Attempt, incumbent: Attempt | None) -> bool:
    """Whether `new` replaces `incumbent` as the best. The rule, in order:

    1. Only a correct attempt (verdict ok) can be best; failed and rejected ones never are.
    2. The first correct attempt becomes best, timed or not.
    3. A timed attempt beats an untimed incumbent; an untimed one never beats an incumbent.
    4. Two timed attempts: the new one wins only if its 95% interval lies wholly below the
       incumbent's by more than a fresh process's own timing offset
       (tools.timing.stats.below_beyond_offset; a missing bound falls back to the median).
       Overlapping intervals, gaps within that offset, ties and NaNs keep the incumbent: two
       evaluations of one tiny kernel can have disjoint intervals.

    The one place "best" is decided. Three callers apply it against their own incumbent: the
    workspace against its best over every run (agent.workspace.repo: `became_best`, what
    `ratchet best` hands out), a run against its own best (agent.loop.nodes: `improved`, which
    patience counts), and an RL episode against the episode's (agent.learn.rl_env). The scopes
    differ on purpose: a new run on a problem whose workspace already holds a best starts with
    no best of its own, and improves on its own attempts before it beats the workspace's.
    """
    if not new.ok:
        return False
    if incumbent is None:
        return True
    if not new.timed:
        return False
    if not incumbent.timed:
        return True
    high = new.ci_high_ms if new.ci_high_ms is not None else new.median_ms
    low = incumbent.ci_low_ms if incumbent.ci_low_ms is not None else incumbent.median_ms
    return below_beyond_offset(high, low)


def beats_eager(attempt: Attempt, eager: TimeStats) -> bool | None:
    """Whether a correct attempt beats eager PyTorch beyond noise, by the margin of `beats`: its
    95% interval's high end below eager's low end by more than a fresh process's own timing
    offset (tools.timing.stats.below_beyond_offset; a missing bound falls back to the median).

    None where it cannot be said: the attempt is not correct, or its time or eager's was not
    measured (a CPU run). False ("kept eager": the reference stays the answer) only where both
    were measured, so an untimed attempt is never called slower than eager; a NaN is False."""
    if not attempt.ok or not attempt.timed or not eager.measured or eager.median_ms is None:
        return None
    high = attempt.ci_high_ms if attempt.ci_high_ms is not None else attempt.median_ms
    low = eager.ci_low_ms if eager.ci_low_ms is not None else eager.median_ms
    return below_beyond_offset(high, low)
