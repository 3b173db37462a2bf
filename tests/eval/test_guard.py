"""The static guard (tools/guard/scan.py) on small inline sources: the holes of issue 13 are closed, each
rejected by a named rule, and the honest code it used to reject passes. The full evaluator runs
of the cheat candidates are in tests/eval/test_eval_cheats.py.
"""
from __future__ import annotations

import dataclasses
import sys
import types

import pytest

from helpers_eval import source
from tools.guard import scan as guard
from tools.guard.names import ALLOWED_IMPORTS, WORKER_ATTRIBUTES

NO_KERNEL = guard.GuardPolicy(disabled=frozenset({"own-kernel"}))  # the snippets define no kernel


def rules(src: str, policy: guard.GuardPolicy = NO_KERNEL) -> list[str]:
    return [v.rule for v in guard.check(src, policy).violations]


def messages(src: str) -> str:
    return " | ".join(str(v) for v in guard.check(src, NO_KERNEL).violations)


# -- holes: each is rejected, by the rule named ---------------------------------------------------

CPP = ("from torch.utils.cpp_extension import load_inline\n"
       "ext = load_inline(name='x', cpp_sources='''#include <torch/extension.h>\nvoid f() {{ {} }}''', functions=['f'])")

HOLES = [  # (id, source, rule)
    # 1. a forbidden module reached as another module's attribute, wherever it is in the chain
    ("os.path.os.system", "import os\nos.path.os.system('id')", "threads-processes"),
    ("torch.os.system", "import torch\ntorch.os.system('id')", "threads-processes"),
    ("torch.sys.modules", "import torch\nm = torch.sys.modules['subprocess']", "import"),
    ("triton driver os", "import triton\nm = triton.runtime.driver.os", "threads-processes"),
    ("triton.testing.subprocess", "import triton.testing\ntriton.testing.subprocess.run(['id'])", "import"),
    ("typing.sys", "import typing\ntyping.sys.exit(0)", "import"),
    ("dataclasses.inspect", "import dataclasses\nf = dataclasses.inspect.currentframe()", "import"),
    ("F.warnings-free F.importlib", "import torch.nn.functional as F\nm = F.importlib.import_module('os')", "import"),
    ("from torch import sys", "from torch import sys", "import"),
    ("from os.path import os", "from os.path import os as o", "threads-processes"),
    ("torch.builtins", "import torch\nb = torch.builtins", "import"),
    ("torch.ctypes", "import torch\nc = torch.ctypes.CDLL(None)", "import"),
    ("torch.threading", "import torch\nt = torch.threading.Thread", "import"),
    ("numpy through F", "import torch.nn.functional as F\na = F.np.load('x.npy', allow_pickle=True)", "import"),
    ("multiprocessing as mp", "import torch\np = torch.cuda.tunable.mp.Process", "import"),
    ("torch features through F", "import torch.nn.functional as F\nf = F.torch.compile(g)", "torch-compile"),
    ("private through F", "import torch.nn.functional as F\nf = F.torch._dynamo", "private-api"),
    # 2. past a subscript or a call: the attribute's name decides, whatever the base
    ("sys.modules['os'].system", "import torch\ntorch.sys.modules['os'].system('id')", "import"),
    ("(lambda: torch)().sys", "import torch\ns = (lambda: torch)().sys", "import"),
    ("[torch][0].sys", "import torch\ns = [torch][0].sys", "import"),
    ("[torch][0].compile", "import torch\nc = [torch][0].compile", "dynamic-code"),
    ("call().os.system", "def f(m):\n    return m().os.system('id')", "threads-processes"),
    ("x.subprocess", "def f(x):\n    return x.subprocess.run", "import"),
    ("x.__class__", "def f(x):\n    return x.__class__", "dunder"),
    ("x.__dict__", "def f(x):\n    return x.__dict__", "dunder"),
    ("vars", "def f(x):\n    return vars(x)", "dynamic-code"),
    ("module passed as a value", "import torch\ndef f(m=torch):\n    return m", "dynamic-code"),
    ("submodule passed as a value", "import torch\nf(torch.cuda)", "dynamic-code"),
    ("module returned by a call", "import torch\ns = torch.get_device_module('cuda').Stream()", "dynamic-code"),
    # a plain binding is followed, not a way around the names
    ("bound name", "import torch\nc = torch.cuda\ns = c.Stream()", "streams-graphs"),
    ("bound before use", "def f():\n    return c.CUDAGraph()\nimport torch\nc = torch.cuda", "streams-graphs"),
    ("bound class patched", "import torch\nT = torch.Tensor\nT.clone = None", "patching"),
    ("type(x) patched", "def f(x):\n    type(x).clone = None", "patching"),
    # 3. attribute access by string and writes through functions
    ("attrgetter('armed')", "import operator\nswitch = operator.attrgetter('armed')", "dynamic-code"),
    ("attrgetter dotted", "import operator\ng = operator.attrgetter('hooks.violations')", "dynamic-code"),
    ("attrgetter dunder", "import operator\ng = operator.attrgetter('__globals__')", "dynamic-code"),
    ("attrgetter frame", "import operator\ng = operator.attrgetter('gi_frame.f_back')", "dynamic-code"),
    ("attrgetter module", "import operator\ng = operator.attrgetter('sys')", "dynamic-code"),
    ("attrgetter private", "import operator\ng = operator.attrgetter('_tripwires')", "dynamic-code"),
    ("attrgetter computed", "import operator\ng = operator.attrgetter('ar' + 'med')", "dynamic-code"),
    ("attrgetter starred", "import operator\ng = operator.attrgetter(*names)", "dynamic-code"),
    ("attrgetter aliased", "from operator import attrgetter as ag\ng = ag('armed')", "dynamic-code"),
    ("attrgetter as a value", "import functools, operator\ng = functools.partial(operator.attrgetter, 'x')", "dynamic-code"),
    ("reduce over attrgetter", "import functools, operator\nv = functools.reduce(lambda o, n: operator.attrgetter(n)(o), p, x)", "dynamic-code"),
    ("methodcaller('__reduce__')", "import operator\nc = operator.methodcaller('__reduce__')", "dynamic-code"),
    ("methodcaller('reset')", "import operator\nc = operator.methodcaller('reset')", "dynamic-code"),
    ("methodcaller computed", "import operator\nc = operator.methodcaller(name)", "dynamic-code"),
    ("reduce(getattr)", "import functools\nv = functools.reduce(getattr, ['a'], x)", "dynamic-code"),
    ("setitem os.environ", "import operator, os\noperator.setitem(os.environ, 'A', '1')", "patching"),
    ("ior os.environ", "import operator, os\noperator.ior(os.environ, {'A': '1'})", "patching"),
    ("os.environ.update", "import os\nos.environ.update(A='1')", "patching"),
    ("update_wrapper into a module", "import functools, torch\nfunctools.update_wrapper(torch.cuda.synchronize, f)", "patching"),
    ("update_wrapper by string", "import functools\nfunctools.update_wrapper(a, b, updated=('__dict__',))", "dynamic-code"),
    ("three-argument type", "import torch\nX = type('X', (torch.Tensor,), {})", "dynamic-code"),
    ("make_dataclass", "import dataclasses\nX = dataclasses.make_dataclass('X', [])", "dynamic-code"),
    ("dataclasses._create_fn", "import dataclasses\nf = dataclasses._create_fn('f', [], ['pass'])", "private-api"),
    ("get_type_hints", "import typing\nh = typing.get_type_hints(f)", "dynamic-code"),
    ("singledispatch", "import functools\n@functools.singledispatch\ndef f(x):\n    pass", "dynamic-code"),
    ("torch.load", "import torch\nm = torch.load(f, weights_only=False)", "dynamic-code"),
    ("torch.library", "import torch\nlib = torch.library.Library('aten', 'IMPL')", "patching"),
    ("triton.runtime.build", "import triton.runtime.build as b\nm = b.compile_module_from_src(s, 'm')", "cpp-extension"),
    ("CUDA graphs module", "import torch\ng = torch.cuda.graphs.CUDAGraph()", "streams-graphs"),
    ("hash is identity", "def f(x):\n    return hash(x)", "caching"),
    ("_cdata is identity", "def f(x):\n    return x._cdata", "caching"),
    # 5. data pointers outside an alignment test
    ("data_ptr stored", "def f(x):\n    p = x.data_ptr()", "caching"),
    ("data_ptr key", "def f(x):\n    CACHE[x.data_ptr()] = x", "caching"),
    ("data_ptr passed", "def f(x):\n    return g(x.data_ptr())", "caching"),
    ("data_ptr remembered", "def f(x):\n    return x.data_ptr() == LAST", "caching"),
    ("alignment stored", "def f(x):\n    return x.data_ptr() % 16", "caching"),
    ("alignment against a name", "def f(x):\n    return x.data_ptr() % 16 == LAST", "caching"),
    ("modulus not a power of two", "def f(x):\n    return x.data_ptr() % 24 == 0", "caching"),
    ("modulus too large", "def f(x):\n    return x.data_ptr() % (1 << 40) == 0", "caching"),
    ("modulus computed", "def f(x, m):\n    return x.data_ptr() % m == 0", "caching"),
    ("mask not 2^k-1", "def f(x):\n    return x.data_ptr() & 16 == 0", "caching"),
    ("data_ptr uncalled", "def f(x):\n    return x.data_ptr", "caching"),
    # 4. dunders stay rejected as attributes
    ("x.__doc__", "def f(x):\n    return x.__doc__", "dunder"),
    ("__builtins__", "b = __builtins__", "dunder"),
    # 5. class patterns read attributes by name (found by an attacker helper, stop 28): the guard
    # saw no Attribute node, so `__globals__` and then every builtin were one match away
    ("class pattern dunder", "import torch\nmatch torch.nn.functional.pad:\n    case object(__globals__=g):\n        pass", "dynamic-code"),
    ("class pattern op", "import torch\nmatch torch:\n    case object(matmul=f):\n        pass", "dynamic-code"),
    ("class pattern positional", "match x:\n    case Point(a, b):\n        pass", "dynamic-code"),
    ("dunder by key", "def f(g):\n    return g['__builtins__']['exec']", "dunder"),
    # 6. found by an attacker helper, stop 29: a module-level `int = Probe` made `case int(v)` read
    # any attribute through Probe's __match_args__; builtins and globals reached by key or attribute
    ("class pattern under a trusted name", "int = Probe\nmatch obj:\n    case int(v):\n        pass", "dynamic-code"),
    ("builtin by key", "def f(b):\n    return b['exec']", "dynamic-code"),
    ("builtin by get", "def f(b):\n    return b.get('exec')", "dynamic-code"),
    ("dunder by get", "def f(g):\n    return g.get('__builtins__')", "dunder"),
    ("dunder by pop", "def f(g):\n    return g.pop('__builtins__', None)", "dunder"),
    ("builtin as an attribute", "def f(b):\n    return b.exec", "dynamic-code"),
    ("a kernel's globals", "def f(kernel):\n    return kernel.get_capture_scope()", "dynamic-code"),
    ("mapping pattern dunder", "match g:\n    case {'__builtins__': b}:\n        pass", "dunder"),
    ("mapping pattern builtin", "match b:\n    case {'open': o}:\n        pass", "dynamic-code"),
    # 7. a third helper, stop 29: torch's ops run from a symbolic size's callback, unrecorded; numpy's
    # BLAS reached through Tensor.numpy()
    ("symbolic size", "import torch\nS = torch.SymInt", "dynamic-code"),
    ("symbolic function", "import torch as t\ndef f(n):\n    return t.sym_int(n)", "dynamic-code"),
    ("tensor to numpy", "def f(x):\n    return x.numpy()", "import"),
    ("storage swap", "def f(x, s):\n    x.set_(s)", "dynamic-code"),
    # 3. C++ that reaches the interpreter through the CPython C API, or ATen below the op recorder
    ("PySys_GetObject", CPP.format('PyObject* m = PySys_GetObject("modules");'), "dynamic-code"),
    ("PyObject_SetAttrString", CPP.format('PyObject_SetAttrString(m, "perf_counter", f);'), "dynamic-code"),
    ("PyModule_GetDict", CPP.format("PyObject* d = PyModule_GetDict(m);"), "dynamic-code"),
    ("py::getattr", CPP.format('auto t = py::getattr(m, "perf_counter");'), "dynamic-code"),
    ("redispatch", CPP.format("auto y = at::_ops::_softmax::redispatch(ks, x, -1, false);"), "private-api"),
]


@pytest.mark.parametrize("src,rule", [h[1:] for h in HOLES], ids=[h[0] for h in HOLES])
def test_hole_is_rejected_by_its_rule(src, rule):
    assert rule in rules(src), messages(src) or "no violation"


def test_a_reached_module_is_named_with_the_chain_it_was_reached_through():
    assert "reaches the module sys through torch" in messages("import torch\nm = torch.sys.modules")
    assert "os.system (as os.path.os.system)" in messages("import os\nos.path.os.system('id')")
    assert "attrgetter('armed') reads armed" in messages("import operator\ng = operator.attrgetter('armed')")


def test_worker_attributes_cover_the_sandbox_and_the_launch_counter():
    """attrgetter / methodcaller may not name the in-process sandbox's or the launch counter's
    state: every public field and method of theirs is in the list."""
    from tools.worker.hooks import Sandbox
    from tools.worker.instrument import LaunchCounter

    public = {f.name for f in dataclasses.fields(Sandbox)} | set(vars(Sandbox)) | set(vars(LaunchCounter))
    public |= set(vars(LaunchCounter()))
    assert {n for n in public if not n.startswith("_")} <= WORKER_ATTRIBUTES


@pytest.mark.filterwarnings("ignore::FutureWarning")  # deprecated torch names warn when inspected
def test_every_public_path_to_a_module_outside_the_allowlist_is_rejected():
    """Walk the installed torch and triton: any module attribute of a public module whose module is
    not importable by a candidate (sys, subprocess, numpy as np, multiprocessing as mp...) is
    rejected when read through its path. A new torch that re-exports one under a new name fails here."""
    import torch  # noqa: F401
    import torch.nn.functional  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401
    import triton  # noqa: F401
    import triton.language  # noqa: F401
    import triton.testing  # noqa: F401

    missed, seen = [], 0
    for name, module in sorted(sys.modules.items()):
        parts = name.split(".")
        if parts[0] not in ("torch", "triton") or any(p.startswith("_") for p in parts):
            continue
        for attr, value in sorted(vars(module).items()):
            if (isinstance(value, types.ModuleType) and not attr.startswith("_")
                    and value.__name__.split(".")[0] not in ALLOWED_IMPORTS):
                seen += 1
                if not rules(f"import {parts[0]}\nm = {name}.{attr}\n"):
                    missed.append(f"{name}.{attr} ({value.__name__})")
    assert seen > 50 and not missed


# -- honest code: no violation ---------------------------------------------------------------------

HONEST = [  # (id, source)
    ("torch.nn.modules.conv", "import torch\nc = torch.nn.modules.conv.Conv2d"),
    ("torch.types", "import torch\nN = torch.types.Number"),
    ("from torch import types", "from torch import types\nN = types.Number"),
    ("torch.signal", "import torch\nw = torch.signal.windows.hann(8)"),
    ("torch.random", "import torch\ns = torch.random.initial_seed()"),
    ("tl.math", "import triton.language as tl\nf = tl.math.exp"),
    ("tl.random", "import triton.language as tl\nf = tl.random.rand"),
    ("collections.abc", "import collections\nS = collections.abc.Sequence"),
    ("Tensor.select", "def f(x, i):\n    return x.select(0, i)"),
    ("torch.select, torch.chunk", "import torch\na = torch.select(x, 0, 1)\nb = torch.chunk(x, 2)"),
    ("torch.ops", "import torch\ny = torch.ops.aten.select.int(x, 0, 1)\nz = torch.ops.aten.trace.default(x)"),
    ("bound aten", "import torch\naten = torch.ops.aten\ny = aten.select.int(x, 0, 1)"),
    ("os allowed uses", "import os\na = os.environ.get('A')\nb = os.environ['B']\nc = os.path.join('a', 'b')\nd = os.getenv('C')\ne = os.cpu_count()\nf = 'A' in os.environ"),
    ("bound module", "import torch\nF = torch.nn.functional\ny = F.gelu(x)"),
    ("module bound to a name", "import triton.language as tl\nL = tl\ny = L.exp"),
    ("attrgetter of a literal", "import operator\nkey = operator.attrgetter('shape')"),
    ("methodcaller of a literal", "import operator\nc = operator.methodcaller('contiguous')"),
    ("functools.wraps decorator", "import functools\ndef deco(fn):\n    @functools.wraps(fn)\n    def inner(*a):\n        return fn(*a)\n    return inner"),
    ("type of a value", "def f(x):\n    return type(x).__name__"),
    ("module __all__", "__all__ = ['ModelNew']\n__version__ = '1.0'\n__doc__ = 'kernels'"),
    ("class __slots__", "class Launch:\n    __slots__ = ('block',)\n    def __init__(self, block):\n        self.block = block"),
    ("__name__ guard", "if __name__ == '__main__':\n    pass"),
    ("alignment == 0", "def f(x):\n    return x.data_ptr() % 16 == 0"),
    ("alignment mask", "def f(x):\n    return (x.data_ptr() & 15) == 0"),
    ("alignment constant first", "def f(x):\n    return 0 != x.data_ptr() % 128"),
    ("alignment as a condition", "def f(x):\n    if x.data_ptr() % 16:\n        return 1\n    return 2"),
    ("alignment negated", "def f(x):\n    v = 4 if not x.data_ptr() % 16 else 1\n    return v"),
    ("alignment in and/or", "def f(x, y):\n    if x.data_ptr() % 16 == 0 and not y.data_ptr() & 15:\n        return 1"),
    ("alignment of many", "def f(ts):\n    return all(t.data_ptr() % 16 == 0 for t in ts)"),
    ("alignment filter", "def f(ts):\n    return [t for t in ts if t.data_ptr() % 16 == 0]"),
    ("alignment asserted", "def f(x):\n    assert x.data_ptr() % 16 == 0"),
    ("storage alignment", "def f(x):\n    return x.untyped_storage().data_ptr() % 256 == 0"),
    ("class patterns that read nothing", "def f(v):\n    match v:\n        case int() as n if n > 0:\n            return n\n        case (a, b):\n            return a\n        case {'k': w}:\n            return w\n    return 0"),
    ("keys and methods that are not builtins", "def f(m, d):\n    m.eval()\n    return d.get('block', 64), d['eval_mode'], d.pop('k', 0)"),
    ("autotune", "import triton\nimport triton.language as tl\n@triton.autotune(configs=[triton.Config({'B': 64})], key=['n'])\n@triton.jit\ndef k(p, n, B: tl.constexpr):\n    pass"),
]


@pytest.mark.parametrize("src", [h[1] for h in HONEST], ids=[h[0] for h in HONEST])
def test_honest_code_passes(src):
    assert rules(src) == [], messages(src)


@pytest.mark.parametrize("name,needle", [("aligned_vector_ok", ".data_ptr() % 16 == 0"),
                                         ("dunder_all_ok", "__all__ = [")])
def test_honest_candidate_files_pass(name, needle):
    text = source(name)
    assert needle in text  # the construct the guard used to reject
    scan = guard.check(text)
    assert scan.violations == [], [str(v) for v in scan.violations]
    assert scan.triton_kernels == ["relu_add_scale_kernel"]


def test_a_policy_that_allows_an_import_allows_reaching_it():
    """The reach rule is the import rule by another road: a policy that lets a candidate import
    a module lets it read that module as an attribute too."""
    src = "import torch\nm = torch.textwrap.dedent"
    assert rules(src) == ["import"]
    assert rules(src, guard.GuardPolicy(disabled=frozenset({"own-kernel"}), allowed_imports=ALLOWED_IMPORTS | {"textwrap"})) == []


def test_every_rule_the_guard_flags_is_one_of_its_rules_and_documented():
    """`--allow` accepts exactly the rules (tools/guard/names.py RULES): every rule name the guard's
    code flags is one, and docs/evaluator.md's table lists each."""
    import re
    from pathlib import Path

    from tools.guard.names import RULES

    root = Path(__file__).resolve().parents[2]
    code = "".join(p.read_text() for p in (root / "tools" / "guard").glob("*.py"))
    flagged = (set(re.findall(r'flag\("([a-z-]+)"', code)) | set(re.findall(r'\(r"[^"]*", "([a-z-]+)"\)', code))
               | set(re.findall(r'\("[^"]*", "([a-z]+-[a-z-]+)"\)', code)))
    assert flagged and flagged <= RULES, flagged - RULES
    table = set(re.findall(r"^\| `([a-z-]+)` \|", (root / "docs" / "evaluator.md").read_text(), re.M))
    assert RULES <= table, RULES - table
