"""`ratchet extract MODEL --shape ... --out DIR`: the hot modules of a user's model as problem files.

One profiled forward on the device attributes the model's time to its modules; the hottest are
written as KernelBench problem files (each checked against the module), identical ones merged,
with DIR/manifest.json giving each its share of the model's time (docs/extract.md). A mistake in
what is named (import path, shape spec, init args) is a usage error; a model that cannot be built
or whose forward raises is EXIT_USER_MODEL; each one line, never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent.cli.checks import UsageError, check_device
from agent.cli.exit_codes import EXIT_OK, EXIT_USER_MODEL


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("extract", help="write the hot modules of a PyTorch model as problem files",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("model", metavar="MODEL", help="pkg.module:factory or path/file.py:Class (called with no "
                                                  "arguments, or with --init-args)")
    p.add_argument("--init-args", metavar="JSON", help="MODEL's arguments: a JSON list, object, or [list, object]")
    p.add_argument("--inputs", metavar="MODULE:FUNCTION", help="a function returning the forward's example inputs")
    p.add_argument("--shape", action="append", default=[], metavar="SPEC",
                   help="an input as SIZExSIZE...[:DTYPE[:HIGH]] (repeatable, in forward's order), e.g. "
                        "8x3x224x224:float32, 8x128:int64:50257")
    p.add_argument("--out", required=True, metavar="DIR", help="where the problem files and manifest.json go")
    p.add_argument("--device", default=None, help="cuda:N or cpu (default: cuda:0 if there is a GPU)")
    p.add_argument("--top", type=int, default=20, metavar="N", help="write at most N problems (default 20)")
    p.add_argument("--min-share", type=float, default=0.01, metavar="F",
                   help="write only problems with at least this share of the model's time (default 0.01)")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise UsageError(f"--top {args.top}: expected at least 1")
    if not 0 <= args.min_share <= 1:
        raise UsageError(f"--min-share {args.min_share:g}: expected a fraction between 0 and 1")
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: already there and not an empty directory")
    device = check_device(args.device)
    from agent.extract.manifest import build
    from agent.extract.profile import PROFILED, profile_model
    from agent.extract.source import NotExtractable
    import torch

    device = device or ("cuda:0" if torch.cuda.is_available() else "cpu")
    loaded = user_model("extract", args, device)
    if isinstance(loaded, int):
        return loaded
    model, constructed, inputs = loaded
    try:
        times = profile_model(model, inputs, device, constructed)
    except Exception as exc:  # noqa: BLE001 - the user's forward raised: one line
        print(f"ratchet extract: MODEL {args.model}: forward on the example inputs raised "
              f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
        return EXIT_USER_MODEL
    described = [args.inputs] if args.inputs else list(args.shape)
    try:
        manifest = build(times, device, args.model, described, out, args.top, args.min_share)
    except NotExtractable as exc:
        print(f"ratchet extract: MODEL {args.model}: {exc}", file=sys.stderr)
        return EXIT_USER_MODEL
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(manifest.to_dict(), indent=2))
    else:
        print(f"{args.model}: {manifest.total_ms:.3f} ms of {manifest.timer} time per forward on {device} (median of {PROFILED})")
        for p in manifest.problems:
            more = f" (+{p.count - 1} identical)" if p.count > 1 else ""
            print(f"  {p.share:6.1%}  {p.file}  {p.modules[0]}{more}")
        print(f"  {manifest.coverage:6.1%}  covered by {len(manifest.problems)} problem(s); "
              f"{len(manifest.skipped)} module(s) skipped, {manifest.below_threshold} below --top/--min-share")
        for s in manifest.skipped:
            print(f"  skipped {s.module} ({s.cls}, {s.share:.1%}): {s.why}")
    print(f"wrote {out / 'manifest.json'}", file=sys.stderr)
    return EXIT_OK


def user_model(command: str, args: argparse.Namespace, device: str) -> "tuple[Any, Any, list[Any]] | int":
    """The user's MODEL (on `device`) as built, what its modules were constructed with, and its
    example inputs; or EXIT_USER_MODEL after one line when the model cannot be built. A mistake in
    what is named is a UsageError. `ratchet extract` and `ratchet apply` load it alike."""
    from agent.extract.load import ExtractError, ModelFailed, build_model, make_inputs

    try:
        model, constructed = build_model(args.model, args.init_args)
        model = model.to(device)
        inputs = make_inputs(args.inputs, args.shape, device)
    except ExtractError as exc:
        raise UsageError(str(exc)) from None
    except ModelFailed as exc:
        print(f"ratchet {command}: {exc}", file=sys.stderr)
        return EXIT_USER_MODEL
    return model, constructed, inputs
