"""Every cheat class of DESIGN.md ("The evaluator must be trustworthy") is refused, for the right
reason: the static guard names its rule, and where the guard has a run-time second line (sandbox
audit hook, tripwires) the same candidate with the rule switched off is caught there too.
Cheats only the run time can see (kernel never launched, aliasing, writes into inputs, unwritten
outputs, cached outputs, a kernel tuned to the problem's distribution) fail on their own check.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers_eval import SECOND_LINE, assert_verdict, describe, evaluator, failed, source
from tools import Verdict
from tools.guard import scan as guard_mod


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("ratchet-cache")


@pytest.fixture(scope="module")
def elementwise(cache_dir):
    with evaluator("elementwise", cache_dir) as ev:
        yield ev


@pytest.fixture(scope="module")
def second_line(cache_dir):
    """The same problem with the static rules that have a run-time twin switched off."""
    with evaluator("elementwise", cache_dir, disabled_rules=SECOND_LINE) as ev:
        yield ev


@pytest.fixture(scope="module")
def softmax(cache_dir):
    with evaluator("row_softmax", cache_dir) as ev:
        yield ev


# -- the static gate ------------------------------------------------------------------------

STATIC = [  # (candidate, the guard rule that rejects it)
    ("cheat_thread", "import"),  # threading
    ("cheat_subprocess", "import"),  # subprocess
    ("cheat_os_system", "threads-processes"),  # os.system
    ("cheat_socket", "import"),  # socket
    ("cheat_ctypes", "import"),  # ctypes
    ("cheat_gc", "import"),  # gc.get_objects
    ("cheat_inspect", "import"),  # inspect.currentframe
    ("cheat_traceback", "import"),  # traceback.walk_stack
    ("cheat_frames", "dynamic-code"),  # gi_frame / f_back / f_locals with no import at all
    ("patch_torch", "patching"),  # torch.randn = ...
    ("patch_tensor_method", "patching"),  # torch.Tensor.clone = ...
    ("patch_evaluator", "import"),  # import tools.worker.instrument
    ("tensor_subclass", "tensor-subclass"),  # class Liar(torch.Tensor)
    ("try_except", "try-except"),  # a torch fallback
    ("torch_compile", "torch-compile"),
    ("tf32", "precision-flags"),  # torch.backends.cuda.matmul.allow_tf32 = True
    ("matmul_precision", "precision-flags"),  # torch.set_float32_matmul_precision
    ("streams", "streams-graphs"),  # torch.cuda.Stream
    ("graphs", "streams-graphs"),  # torch.cuda.CUDAGraph
    ("data_ptr_cache", "caching"),  # keyed on x.data_ptr()
    ("id_cache", "caching"),  # keyed on id(x)
    ("pure_torch", "own-kernel"),  # no kernel at all
    ("file_write", "file-io"),  # open(..., "w")
    ("proc_parent", "file-io"),  # open(f"/proc/{os.getppid()}/environ")
    ("from_file", "file-io"),  # torch.from_file: native reads with no audit event
    ("forged_channel", "import"),  # sys.argv for the result pipe's fd
    ("sys_exit", "exit"),
    ("os_exit", "threads-processes"),
    ("symbolic_size", "dynamic-code"),  # torch.SymInt: torch's ops run from its callback, unrecorded
    ("storage_finalizer", "dynamic-code"),  # x.set_(): torch's ops run from a finalizer inside it, unrecorded
]


@pytest.mark.parametrize("candidate,rule", STATIC, ids=[c for c, _ in STATIC])
def test_static_guard_rejects(elementwise, candidate, rule):
    result = elementwise.evaluate(source(candidate))
    assert_verdict(result, Verdict.REJECTED, f"guard:{rule}", f"rule {rule}")
    assert "start" not in result.phases  # rejected before any worker ran it


def test_patching_the_evaluator_is_also_rule_patching():
    scan = guard_mod.check(source("patch_evaluator"), guard_mod.GuardPolicy(disabled=frozenset({"import"})))
    assert [v.rule for v in scan.violations] == ["patching"]
    assert "tools.worker.instrument.LaunchCounter" in scan.violations[0].message


# -- the run-time second line ----------------------------------------------------------------

SECOND = [  # (candidate, the sandbox rule that catches it with the static rule off, detail)
    ("cheat_thread", "threads-processes", "starting a thread"),  # started and joined within forward()
    ("cheat_subprocess", "threads-processes", "subprocess.Popen"),
    ("cheat_os_system", "threads-processes", "os.system"),
    ("cheat_socket", "network", "socket"),
    ("cheat_ctypes", "threads-processes", "ctypes"),
    ("cheat_gc", "dynamic-code", "gc.get_objects"),
    ("cheat_inspect", "dynamic-code", "sys._getframe"),
    ("cheat_traceback", "dynamic-code", "sys._getframe"),  # through the standard library
    ("cheat_frames", "dynamic-code", "gi_frame"),
    ("patch_torch", "patching", "torch.randn"),
    ("patch_tensor_method", "patching", "torch.Tensor.clone"),
    ("patch_evaluator", "patching", "LaunchCounter.reset"),
    ("tf32", "precision-flags", "allow_tf32"),
    ("matmul_precision", "precision-flags", "changed"),
    ("file_write", "file-io", "/tmp/ratchet-test-escape.txt"),
    ("proc_parent", "file-io", "another process's environ"),  # the evaluator's environment and memory
]


@pytest.mark.parametrize("candidate,rule,detail", SECOND, ids=[c for c, _, _ in SECOND])
def test_second_line_catches_at_run_time(second_line, candidate, rule, detail):
    escape = Path("/tmp/ratchet-test-escape.txt")
    if candidate == "file_write" and escape.exists():
        escape.unlink()
    result = second_line.evaluate(source(candidate))
    assert_verdict(result, Verdict.REJECTED, f"sandbox:{rule}", "at run time", detail)
    assert not any(n.startswith("guard:") for n in failed(result))
    if candidate == "file_write":
        assert not escape.exists()


def test_a_symbolic_size_is_refused_by_the_op_recorder(second_line):
    """With the gate's rule off, the op recorder refuses the symbolic argument before the op runs,
    so its callback, where torch had taken the recorder off its mode stack, never runs."""
    result = second_line.evaluate(source("symbolic_size"))
    assert result.verdict is Verdict.RUNTIME_ERROR, describe(result)
    assert "aten::arange was given a symbolic size" in result.message, describe(result)


def test_tensor_subclass_output_rejected_at_run_time(second_line):
    result = second_line.evaluate(source("tensor_subclass"))
    assert_verdict(result, Verdict.REJECTED, "output-type", "Liar", "plain torch.Tensor")


def test_forged_reply_frame_on_the_result_pipe(second_line):
    result = second_line.evaluate(source("forged_channel"))
    assert_verdict(result, Verdict.REJECTED, "worker", "forged output")


# -- cheats only the run time sees ---------------------------------------------------------------

def test_kernel_defined_but_never_launched(elementwise):
    result = elementwise.evaluate(source("never_launched"))
    assert_verdict(result, Verdict.REJECTED, "kernel-launched", "defines a kernel but did not launch it")
    assert result.trials == 5  # correct outputs: only the launch check catches it
    assert result.torch_ops == ["aten::add", "aten::mul", "aten::relu"]


def test_no_kernel_at_all_with_the_own_kernel_rule_off(cache_dir):
    """`--allow own-kernel` on plain torch code: rejected at run time, saying it defines no kernel
    (not that it "did not launch" one)."""
    with evaluator("elementwise", cache_dir, disabled_rules=frozenset({"own-kernel"})) as ev:
        result = ev.evaluate(source("pure_torch"))
    assert_verdict(result, Verdict.REJECTED, "kernel-launched", "defines no kernel of its own")


def test_output_aliasing_an_input(elementwise):
    result = elementwise.evaluate(source("output_alias"))
    assert_verdict(result, Verdict.REJECTED, "output-alias", "shares memory with an input")


def test_writing_into_inputs(elementwise):
    result = elementwise.evaluate(source("writes_input"))
    assert_verdict(result, Verdict.INCORRECT, "inputs-unchanged:values", "input[1]", "wrote into its inputs")


def test_unwritten_output_elements_read_as_poison(elementwise):
    result = elementwise.evaluate(source("half_written"))
    assert_verdict(result, Verdict.INCORRECT, "nan-pattern", "output at [2048] is NaN", "2048 elements")


def test_forged_result_on_stdout_does_not_pass(elementwise):
    result = elementwise.evaluate(source("forged_stdout"))
    assert_verdict(result, Verdict.INCORRECT, "nan-pattern")


def test_wrong_shape(elementwise):
    result = elementwise.evaluate(source("wrong_shape"))
    assert_verdict(result, Verdict.INCORRECT, "shape", "(64, 64)", "(4096,)")


def test_wrong_dtype(elementwise):
    result = elementwise.evaluate(source("wrong_dtype"))
    assert_verdict(result, Verdict.INCORRECT, "dtype", "float64", "float32")


def test_wrong_kind_of_output(elementwise):
    """A tuple where the reference returns a tensor is a wrong output (not a cheat: only a
    Tensor subclass is rejected)."""
    result = elementwise.evaluate(source("wrong_kind"))
    assert_verdict(result, Verdict.INCORRECT, "output-kind", "output is a tuple; expected a tensor")


def test_correct_only_on_the_problems_distribution(elementwise):
    result = elementwise.evaluate(source("distribution_only"))
    assert_verdict(result, Verdict.INCORRECT, "trial-1:shifted:values", "shifted inputs")
    assert "trial-0:problem" in [c.name for c in result.checks if c.passed]


def test_cached_output_fails_on_new_seeds(elementwise):
    result = elementwise.evaluate(source("cached_output"))
    assert result.verdict is Verdict.INCORRECT, describe(result)
    assert result.trials == 1  # right once, then the same tensor for new inputs
    assert failed(result) == ["trial-1:shifted:values"]


# -- single-op problems ------------------------------------------------------------------------

def test_single_op_called_directly(softmax):
    result = softmax.evaluate(source("row_softmax_torch"))
    assert_verdict(result, Verdict.REJECTED, "guard:single-op", "softmax")


def test_single_op_under_an_alias(softmax):
    result = softmax.evaluate(source("row_softmax_alias"))
    assert_verdict(result, Verdict.REJECTED, "guard:single-op", "torch.nn.functional.softmax")


def test_single_op_through_a_module_is_caught_at_run_time(softmax):
    """nn.Softmax is invisible to the static gate (no softmax call in the source); the op
    recorder sees aten::_softmax."""
    result = softmax.evaluate(source("row_softmax_module"))
    assert_verdict(result, Verdict.REJECTED, "single-op", "aten::_softmax")
    assert "guard" in [c.name for c in result.checks if c.passed]
    assert result.torch_ops == ["aten::_softmax"]


def test_single_op_left_to_torch_after_the_first_call(softmax):
    """Every trial is recorded, not only the first: the kernel's result on call one, torch's after."""
    result = softmax.evaluate(source("row_softmax_first_call"))
    assert_verdict(result, Verdict.REJECTED, "single-op", "aten::_softmax")
    assert result.trials == 5


@pytest.mark.parametrize("snippet,flagged", [
    ("import torch\ndef f(a, b):\n    return torch.matmul(a, b)", True),
    ("import torch\ndef f(a, b):\n    return a.mm(b)", True),
    ("def f(a, b):\n    return a @ b", True),
    ("import operator\ndef f(a, b):\n    return operator.matmul(a, b)", True),  # `@` by name (stop 29)
    ("from torch import matmul as mul2\ndef f(a, b):\n    return mul2(a, b)", True),
    ("import torch.nn.functional as F\ndef f(a, w):\n    return F.linear(a, w)", True),
    # the kernel's own tl.dot, a @ b inside a @triton.jit body: not torch's op
    ("import triton\nimport triton.language as tl\n@triton.jit\ndef k(a, b):\n    return tl.dot(a, b) + a @ b", False),
    ("from triton.language import dot\ndef f(a, b):\n    return dot(a, b)", False),
    # the candidate's own method named like the op (a submodule calling torch is seen at run time)
    ("class M:\n    def matmul(self, a, b):\n        return a\n    def forward(self, a, b):\n        return self.matmul(a, b)", False),
])
def test_single_op_rule_tells_torch_from_triton(snippet, flagged):
    scan = guard_mod.check(snippet, guard_mod.GuardPolicy(single_op="matmul", disabled=frozenset({"own-kernel"})))
    assert [v.rule for v in scan.violations] == (["single-op"] if flagged else [])

