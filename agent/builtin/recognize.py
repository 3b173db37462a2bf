"""Recognition: trace the problem's forward with torch.fx (make_fx, aten level, on meta tensors)
and turn it into a small IR the kernel templates can be drafted from, or say why not.

The problem file is the user's own (trusted) code: it is imported here, in-process, and its model
is built on the meta device, so nothing is allocated whatever the problem's sizes. The candidate
code drafted from the IR is what runs in the evaluator's sandbox, never this.

The steps, one module each:

- agent.builtin.load: import the problem, build its model on the meta device, trace the forward;
- agent.builtin.describe: the reference's constructor and forward signature, for ModelNew;
- agent.builtin.lower (with agent.builtin.aten and agent.builtin.builder): the aten graph as the IR
  of agent.builtin.ir, composite ops expanded into elementwise ops, reductions and matrix products;
- agent.builtin.classify: the plan, which picks the template (pointwise, rowwise, colwise, matmul,
  twolevel);
- agent.builtin.variants: the problem traced again at other sizes and scalars, so the draft is
  general over what a user varies.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.builtin.describe import describe
from agent.builtin.ir import KeptEager, Plan, Problem, Unrecognized
from agent.builtin.load import load, trace
from agent.builtin.lower import build_plan
from agent.builtin.variants import analyse


@dataclass
class Recognition:
    problem: Problem | None
    plan: Plan | None
    reason: str | None  # why nothing was recognized (one line)
    load_error: bool = False  # the problem itself would not load: the evaluator reports it
    kept_eager: bool = False  # no family claims it and it has no elementwise work (agent.builtin.fallback)


def recognize(path: str | Path, entry: str = "Model", precision: str = "fp32") -> Recognition:
    """Trace and classify (under a half `precision`, the problem cast to it); never raises for an
    unrecognized or broken problem."""
    from tools.worker.precision import half_dtype

    path = Path(path)
    cast = half_dtype(precision)
    try:
        module, model, inputs = load(path, entry, cast)
    except Unrecognized as exc:
        return Recognition(None, None, str(exc), load_error=True)
    except Exception as exc:  # the user's file failed to import or build: the evaluator says why
        return Recognition(None, None, f"could not build {entry} on the meta device ({type(exc).__name__}: "
                                       f"{' '.join(str(exc).split())[:160]})", load_error=True)
    try:
        problem = describe(path, entry, module, model, inputs)
        traced = trace(model, inputs)
        plan = build_plan(traced, problem)
        try:
            problem.variants = analyse(module, entry, model, inputs, problem, plan, cast)
            _check_draft(plan, problem)
        except Unrecognized as exc:
            if plan.kind == "fallback" or isinstance(exc, KeptEager):
                raise
            problem.fallback = f"the {plan.kind} family cannot draft it: {exc}"  # the fallback drafts it instead
            plan = build_plan(traced, problem)
            problem.variants = analyse(module, entry, model, inputs, problem, plan, cast)
            _check_draft(plan, problem)
    except KeptEager as exc:
        return Recognition(None, None, str(exc), kept_eager=True)
    except Unrecognized as exc:
        return Recognition(None, None, str(exc))
    except Exception as exc:  # tracing failed (data-dependent control flow, unsupported op...)
        return Recognition(None, None, f"could not trace {entry}.forward ({type(exc).__name__}: "
                                       f"{' '.join(str(exc).split())[:160]})")
    return Recognition(problem, plan, None)


def _check_draft(plan: Plan, problem: Problem) -> None:
    """Draft the first configuration once: what the templates cannot express, or what the
    evaluator's static guard would reject (in the copied constructor), is not recognized."""
    from agent.builtin import codegen, search
    from tools.guard import scan as guard

    source = codegen.draft(plan, problem, search.space(plan)[0])
    violations = guard.check(source).violations
    if violations:
        raise Unrecognized(f"the drafted module breaks the guard's rule {violations[0].rule} "
                           f"(line {violations[0].line}: {violations[0].message})")
