"""`ratchet apply MODEL --shape ... --from DIR`: a user's model with the kept kernels put back.

Each problem of DIR/manifest.json (`ratchet extract`) whose workspace has a kept best replaces its
modules by that `ModelNew` (the module's state dict loaded into it); the patched model is checked
against the original with the float64-judged bound and, on a GPU, timed against eager and
torch.compile, the end-to-end speedup printed next to the manifest's estimate. It writes a recipe
(ratchet_patch.py, its kernels, summary.md) a user imports in their own code (docs/extract.md).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path

from agent.cli.checks import UsageError, check_device
from agent.cli.exit_codes import EXIT_INCORRECT, EXIT_NOT_APPLIED, EXIT_OK
from tools.precision import PRECISIONS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("apply", help="put the kept kernels of an extracted model back into it, check and time it",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("model", metavar="MODEL", help="the model given to ratchet extract (pkg.module:factory or file.py:Class)")
    p.add_argument("--init-args", metavar="JSON", help="MODEL's arguments: a JSON list, object, or [list, object]")
    p.add_argument("--inputs", metavar="MODULE:FUNCTION", help="a function returning the forward's example inputs")
    p.add_argument("--shape", action="append", default=[], metavar="SPEC", help="an input as SIZExSIZE...[:DTYPE[:HIGH]]")
    p.add_argument("--from", dest="source", required=True, metavar="DIR", help="the folder ratchet extract wrote")
    p.add_argument("--workspace", metavar="DIR", help="workspace root (default $RATCHET_WORKSPACE, else ./workspaces)")
    p.add_argument("--out", metavar="DIR", help="where the recipe goes (default DIR/applied)")
    p.add_argument("--device", default=None, help="cuda:N or cpu (default: cuda:0 if there is a GPU)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="as the batch was run: the model cast to bf16/fp16, or its float32 arithmetic (docs/precision.md)")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    folder = Path(args.source)
    if not (folder / "manifest.json").is_file():
        raise UsageError(f"--from {folder}: no manifest.json (a folder written by ratchet extract)")
    device = check_device(args.device)
    from agent.extract.apply import Outcome, check, estimate, init_args, kept_kernels, time_ms
    from agent.cli.extract import user_model
    from agent.extract.manifest import read_manifest
    from agent.extract.recipe import Replacement, load_recipe, write_recipe
    from agent.extract.source import literal
    import torch

    try:
        manifest = read_manifest(folder / "manifest.json")
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"--from {folder}: manifest.json is not a manifest of ratchet extract ({exc})") from None
    device = device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    if not device.startswith("cuda"):
        os.environ.setdefault("TRITON_INTERPRET", "1")  # the kernels on the CPU: Triton's interpreter, as the evaluator's workers
    loaded = user_model("apply", args, device)
    if isinstance(loaded, int):
        return loaded
    model, _, inputs = loaded
    from tools.worker.precision import apply as apply_precision, cast_floating, half_dtype

    apply_precision(args.precision)  # the arithmetic the kernels were judged and timed with
    half = half_dtype(args.precision)
    if half is not None:  # the model and its inputs in the half type, as the evaluator's workers cast them
        model = model.to(half)
        inputs = [cast_floating(x, half) for x in inputs]
    model = model.eval()
    kept = kept_kernels(manifest, folder, args.workspace, args.precision)
    replacements, kernels = [], {}
    for k in kept:
        if k.kernel:
            kernels[k.kernel] = k.source
            init = literal(init_args(folder, k.problem))
            replacements += [Replacement("" if m == "(model)" else m, k.kernel, init) for m in k.problem.modules]
    out = Path(args.out) if args.out else folder / "applied"
    try:
        recipe = write_recipe(out, f"{args.model} ({folder})", replacements, kernels)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    try:
        patched = load_recipe(recipe)(copy.deepcopy(model)).eval()
        if half is not None:  # the kernels' own parameters, built in float32 and loaded from the model's
            patched = patched.to(half)
        ratio = check(model, patched, inputs)
    except Exception as exc:  # noqa: BLE001 - a kept kernel that cannot go into the model: one line
        print(f"ratchet apply: the recipe {recipe} failed on the model: {type(exc).__name__}: "
              f"{str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
        return EXIT_NOT_APPLIED
    outcome = Outcome(kept, ratio <= 1.0, ratio, estimate=estimate(kept), precision=args.precision)
    if device.startswith("cuda") and replacements:
        outcome.eager_ms, outcome.patched_ms = time_ms(model, inputs, device), time_ms(patched, inputs, device)
        try:
            outcome.compile_ms = time_ms(torch.compile(model), inputs, device)
        except Exception as exc:  # noqa: BLE001 - torch.compile failing on the user's model is a note, not an error
            outcome.notes.append(f"torch.compile of the model failed: {type(exc).__name__}")
    elif not replacements:
        outcome.notes.append("nothing applied: no problem has a kept kernel")
    else:
        outcome.notes.append("not timed: no GPU (the kernels run in Triton's interpreter; times would mean nothing)")
    text = summary(outcome, args.model, folder)
    (out / "summary.md").write_text(text + "\n")
    if args.json:
        print(json.dumps({"recipe": str(recipe), "precision": outcome.precision, "correct": outcome.correct, "error_ratio": outcome.error_ratio,
                          "eager_ms": outcome.eager_ms, "patched_ms": outcome.patched_ms, "compile_ms": outcome.compile_ms,
                          "speedup": outcome.speedup, "estimate": outcome.estimate, "notes": outcome.notes,
                          "applied": [{"file": k.problem.file, "modules": k.problem.modules, "attempt": k.attempt,
                                       "speedup": k.speedup, "why": k.why} for k in kept]}, indent=2))
    else:
        print(text)
    print(f"wrote {recipe} and {out / 'summary.md'}", file=sys.stderr)
    return EXIT_OK if outcome.correct else EXIT_INCORRECT


def summary(outcome: object, model: str, folder: Path) -> str:
    """A diff-like account: `-`/`+` per replaced module, the check, the times, the estimate."""
    from agent.extract.apply import Outcome

    assert isinstance(outcome, Outcome)
    lines = [f"# ratchet apply: {model} with the kept kernels of {folder}"
             + (f" (precision {outcome.precision})" if outcome.precision != "fp32" else "")]
    for k in outcome.kept:
        where = ", ".join(k.problem.modules)
        if k.kernel:
            speed = f"{k.speedup:.2f}x" if k.speedup else "not timed"
            lines += [f"- {where}: {k.problem.cls}",
                      f"+ {where}: ModelNew of {k.problem.file} (attempt {k.attempt}, {speed}), "
                      f"{k.problem.share:.1%} of the model's time"]
        else:
            lines.append(f"  {where}: {k.problem.cls} kept ({k.why})")
    verdict = "within" if outcome.correct else "NOT within"
    lines.append(f"check: {verdict} the float64-judged bound (worst output at {outcome.error_ratio:.3g} of it)")
    if outcome.speedup:
        lines.append(f"time: eager {outcome.eager_ms:.4g} ms, patched {outcome.patched_ms:.4g} ms: {outcome.speedup:.2f}x"
                     + (f"; torch.compile {outcome.compile_ms:.4g} ms: {outcome.compile_ms / outcome.patched_ms:.2f}x"
                        if outcome.compile_ms and outcome.patched_ms else ""))
    lines.append("estimate from the manifest's shares: "
                 + (f"{outcome.estimate:.2f}x" if outcome.estimate else "none (no kept kernel was timed)"))
    lines += [f"note: {n}" for n in outcome.notes]
    return "\n".join(lines)
