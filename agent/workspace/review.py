"""The body of an attempt's commit: what changed and what it measured, a few lines a reviewer
reads in `git log` (the trailers below them stay the machine-readable part).

    attempt 4: ok, 2.43x vs eager, 0.412 ms, new best

    Change: fuse the bias add and GELU into the matmul epilogue
    Verdict: ok: Correct on 5 trials (max abs error 2.4e-07).
    Time: 0.412 ms (95% interval 0.409-0.415 ms, 30 samples); 2.43x vs eager, 1.70x vs torch.compile; 12.1% of the roofline
    Diff: +12 -5 lines against attempt 3, the best before it

    Ratchet-Kind: attempt
    ...

`Change` is the model's own one-line account of the change (the text of the reply that submitted
it), left out when it gave none. `Verdict` carries the first line of the evaluator's message,
`Failed check` (when one failed) the first failed check and its detail, `Time` the candidate's
median, interval and speedups, or why there is none. `Drop-in` (for a correct attempt) says
whether it is right on held-out sizes too (docs/heldout.md). `Diff` counts changed lines against the
best attempt before this one (or says there was none). Each line is one line of at most
`MAX_LINE` characters, whatever the model or the evaluator wrote.
"""
from __future__ import annotations

import difflib

from agent.workspace.attempt import format_ms, one_line
from tools.record import Result, Verdict

MAX_LINE = 240


def review_lines(result: Result, *, source: str, summary: str = "",
                 best: tuple[int, str] | None = None) -> list[str]:
    """The body lines for an attempt; `best` is (number, source) of the best attempt before it."""
    lines = []
    change = _first_line(summary)
    if change:
        lines.append(f"Change: {change}")
    first = _first_line(result.message)
    lines.append(f"Verdict: {result.verdict.value}" + (f": {first}" if first else ""))
    failed = next((c for c in result.checks if not c.passed), None)
    if failed is not None:
        lines.append(f"Failed check: {failed.name}" + (f": {one_line(failed.detail)}" if one_line(failed.detail) else ""))
    lines.append(f"Time: {time_text(result)}")
    dropin = dropin_text(result)
    if dropin:
        lines.append(f"Drop-in: {dropin}")
    lines.append(f"Diff: {diff_text(source, best)}")
    return [_cut(line) for line in lines]


def time_text(result: Result) -> str:
    t = result.candidate_time
    if not t.measured or t.median_ms is None:
        why = one_line(t.note) or "not measured"
        if result.verdict is not Verdict.OK and why == "not measured":
            why = f"not measured ({result.verdict.value} before timing)"
        return f"none, {why}"
    text = f"{format_ms(t.median_ms)} ms"
    if t.ci_low_ms is not None and t.ci_high_ms is not None:
        text += f" (95% interval {format_ms(t.ci_low_ms)}-{format_ms(t.ci_high_ms)} ms, {t.samples} samples)"
    speedups = [f"{value:.2f}x vs {name}" for value, name in
                ((result.speedup_vs_eager, "eager"), (result.speedup_vs_compile, "torch.compile")) if value is not None]
    if speedups:
        text += "; " + ", ".join(speedups)
    fraction = result.roofline.achieved_fraction
    if fraction is not None:
        text += f"; {fraction * 100:.1f}% of the roofline"
    return text


def dropin_text(result: Result) -> str:
    """The held-out check (tools/judge/heldout.py) in a few words; "" before it ran."""
    tried = [h for h in result.heldout if h.get("outcome") != "not used"]
    if result.generalizes is True:
        return "general, also right on " + "; ".join(str(h.get("variant")) for h in tried)
    if result.generalizes is False:
        return "specialized (declared), refuses " + "; ".join(str(h.get("variant")) for h in tried)
    if result.ok and result.heldout:
        return "unchecked, " + "; ".join(str(h.get("detail")) for h in result.heldout)
    return ""


def diff_text(source: str, best: tuple[int, str] | None) -> str:
    new = source.splitlines()
    if best is None:
        return f"{len(new)} lines, no best attempt before it to compare with"
    number, old_source = best
    added, removed = diff_counts(old_source.splitlines(), new)
    if not added and not removed:
        return f"none, the same source as attempt {number}, the best before it"
    return f"+{added} -{removed} lines against attempt {number}, the best before it"


def diff_counts(old: list[str], new: list[str]) -> tuple[int, int]:
    """(lines added, lines removed) from `old` to `new`, as a unified diff counts them."""
    added = removed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            removed += i2 - i1
        if tag in ("replace", "insert"):
            added += j2 - j1
    return added, removed


def _first_line(text: str) -> str:
    return next((one_line(line) for line in (text or "").splitlines() if line.strip()), "")


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE else line[:MAX_LINE - 3] + "..."
