"""The static gate: parse a candidate (AST, never regex on Python) and reject what no honest
kernel needs. Every rejection names its rule; the rules and their defaults are in README.md
("Evaluator policy") and a policy can switch any rule off (`GuardPolicy(disabled=...)`).

The gate is a first line only: the worker enforces the same classes of rule at run time
(sandbox.py), and correctness plus timing checks catch what neither can see statically.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

# Modules (and their submodules) a candidate may import. Everything else is rule `import`.
ALLOWED_IMPORTS = frozenset({
    "__future__", "torch", "triton", "math", "typing", "dataclasses", "functools", "itertools",
    "operator", "collections", "enum", "numbers", "os",
})
# Prefixes of dotted names, resolved through import aliases, and the rule each breaks.
FORBIDDEN_NAMES: tuple[tuple[str, str], ...] = (
    ("torch.compile", "torch-compile"), ("torch.jit", "torch-compile"),
    ("torch._dynamo", "torch-compile"), ("torch._inductor", "torch-compile"),
    ("torch.export", "torch-compile"), ("torch.fx", "torch-compile"),
    ("torch.compiler", "torch-compile"),
    ("torch.backends", "precision-flags"), ("torch.set_float32_matmul_precision", "precision-flags"),
    ("torch.set_default_dtype", "precision-flags"), ("torch.set_default_tensor_type", "precision-flags"),
    ("torch.use_deterministic_algorithms", "precision-flags"), ("torch.set_flush_denormal", "precision-flags"),
    ("torch.utils.deterministic", "precision-flags"), ("torch.set_default_device", "precision-flags"),
    ("torch.cuda.Stream", "streams-graphs"), ("torch.cuda.stream", "streams-graphs"),
    ("torch.cuda.set_stream", "streams-graphs"), ("torch.cuda.ExternalStream", "streams-graphs"),
    ("torch.cuda.graph", "streams-graphs"), ("torch.cuda.CUDAGraph", "streams-graphs"),
    ("torch.cuda.make_graphed_callables", "streams-graphs"), ("torch.cuda.Event", "streams-graphs"),
    ("torch.cuda.default_stream", "streams-graphs"), ("torch.cuda.streams", "streams-graphs"),
    ("torch.Stream", "streams-graphs"), ("torch.Event", "streams-graphs"), ("torch.cuda.set_sync_debug_mode", "streams-graphs"),
    ("torch.cuda.memory", "private-api"), ("torch.cuda.set_per_process_memory_fraction", "private-api"),
    ("torch.multiprocessing", "threads-processes"), ("torch.distributed", "threads-processes"),
    ("torch.utils.data", "threads-processes"),
    ("torch.overrides", "tensor-subclass"), ("torch.utils._python_dispatch", "tensor-subclass"),
    ("torch.Tensor.__", "patching"), ("functools.cache", "caching"), ("functools.lru_cache", "caching"),
    ("functools.cached_property", "caching"),
)
CPP_EXTENSION_ALLOWED = frozenset({"torch.utils.cpp_extension.load_inline"})
OS_ALLOWED = frozenset({"os.environ", "os.path", "os.getenv", "os.cpu_count", "os.sep"})
BANNED_BUILTINS = {
    "eval": "dynamic-code", "exec": "dynamic-code", "compile": "dynamic-code",
    "__import__": "dynamic-code", "globals": "dynamic-code", "locals": "dynamic-code",
    "vars": "dynamic-code", "getattr": "dynamic-code", "setattr": "dynamic-code",
    "delattr": "dynamic-code", "open": "file-io", "breakpoint": "dynamic-code",
    "input": "dynamic-code", "exit": "exit", "quit": "exit", "id": "caching",
}
ALLOWED_DUNDERS = frozenset({"__init__", "__name__", "__future__"})
# Attributes of frames, generators, coroutines and tracebacks: a way up the stack to the worker's
# own objects (its launch counter, its sandbox) with no import at all. Rule `dynamic-code`.
FRAME_ATTRIBUTES = frozenset({"gi_frame", "cr_frame", "ag_frame", "tb_frame", "tb_next", "f_back",
                              "f_locals", "f_globals", "f_builtins", "f_code", "f_trace", "gi_code",
                              "cr_code", "ag_code", "gi_yieldfrom", "cr_await"})
# Op families for single-op problems: calling any of these names is rule `single-op`.
OP_FAMILIES: dict[str, frozenset[str]] = {
    "matmul": frozenset({"mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "linear", "einsum",
                         "dot", "mv", "addmv", "tensordot", "inner", "outer", "chain_matmul",
                         "bilinear", "_scaled_mm", "vdot", "multi_dot", "ger"}),
    "conv": frozenset({"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                       "conv_transpose3d", "convolution", "_convolution", "conv_tbc"}),
    "softmax": frozenset({"softmax", "_softmax", "log_softmax", "_log_softmax", "softmin"}),
    "norm": frozenset({"layer_norm", "native_layer_norm", "batch_norm", "native_batch_norm",
                       "group_norm", "native_group_norm", "instance_norm", "rms_norm", "normalize"}),
}
# Tokens that must not appear in C++/CUDA source strings, and the rule each breaks.
CXX_FORBIDDEN: tuple[tuple[str, str], ...] = (
    (r"\bcudaStreamCreate\w*", "streams-graphs"), (r"\bcudaGraph\w*", "streams-graphs"),
    (r"\bcudaStreamBeginCapture\b", "streams-graphs"), (r"\bgetStreamFromPool\b", "streams-graphs"),
    (r"\bsetCurrentCUDAStream\b", "streams-graphs"), (r"\bCUDAStreamGuard\b", "streams-graphs"),
    (r"\bcudaEventCreate\w*", "streams-graphs"),
    (r"\bstd::thread\b", "threads-processes"), (r"\bpthread_create\b", "threads-processes"),
    (r"\bfork\s*\(", "threads-processes"), (r"\bsystem\s*\(", "threads-processes"),
    (r"\bpopen\s*\(", "threads-processes"), (r"\bexecv\w*\s*\(", "threads-processes"),
    (r"\bsocket\s*\(", "network"), (r"\bdlopen\s*\(", "threads-processes"),
    (r"\bcudaDeviceReset\b", "streams-graphs"), (r"\bcudaDeviceSetLimit\b", "streams-graphs"),
    (r"\bcudaSetDevice\b", "streams-graphs"),
)
CXX_LIBRARIES = r"\b(cublas\w*|cudnn\w*|cublasLt\w*|at::(mm|matmul|bmm|addmm|conv\w*|linear|softmax|layer_norm)|torch::(mm|matmul|bmm|addmm|conv\w*|linear|softmax|layer_norm))\b"


@dataclass(frozen=True)
class GuardPolicy:
    disabled: frozenset[str] = frozenset()  # rule names switched off
    single_op: str | None = None  # the op family of a single-op problem (see OP_FAMILIES), or an aten name
    allowed_imports: frozenset[str] = ALLOWED_IMPORTS


@dataclass(frozen=True)
class Violation:
    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"rule {self.rule} (line {self.line}): {self.message}"


@dataclass
class Scan:
    violations: list[Violation] = field(default_factory=list)
    triton_kernels: list[str] = field(default_factory=list)
    cuda_kernels: list[str] = field(default_factory=list)  # __global__ names in source strings
    uses_load_inline: bool = False


def check(source: str, policy: GuardPolicy = GuardPolicy()) -> Scan:
    """Scan a candidate. Raises SyntaxError for source that does not parse (a compile error)."""
    tree = ast.parse(source)
    visitor = _Visitor(policy)
    visitor.visit(tree)
    scan = visitor.scan
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            _scan_cxx(node, policy, scan)
    if not scan.triton_kernels and not scan.uses_load_inline:
        scan.violations.append(Violation("own-kernel", 1, "defines no kernel of its own: decorate a kernel with @triton.jit and launch it, or build CUDA C++ with torch.utils.cpp_extension.load_inline"))
    seen: set[tuple[str, int]] = set()
    kept: list[Violation] = []
    for v in scan.violations:
        if v.rule not in policy.disabled and (v.rule, v.line) not in seen:
            seen.add((v.rule, v.line))
            kept.append(v)
    scan.violations = kept
    return scan


def _scan_cxx(node: ast.Constant, policy: GuardPolicy, scan: Scan) -> None:
    text = node.value
    if "__global__" in text:
        scan.cuda_kernels.extend(re.findall(r"__global__\s+(?:void|[\w:<>]+)\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(", text))
    if not any(tok in text for tok in ("#include", "__global__", "torch::", "at::", "cuda")):
        return  # not C++ source: a docstring or a message
    for pattern, rule in CXX_FORBIDDEN:
        m = re.search(pattern, text)
        if m:
            scan.violations.append(Violation(rule, node.lineno, f"C++ source uses {m.group(0).strip()}"))
    if policy.single_op:
        m = re.search(CXX_LIBRARIES, text)
        if m:
            scan.violations.append(Violation("single-op", node.lineno, f"this problem is a single op ({policy.single_op}); C++ source calls the library routine {m.group(0)} instead of computing it"))


def _torch_or_method(dotted: str | None) -> bool:
    """Whether a name that matches a single-op family stands for torch's op: a torch name, or a
    method on some value (x.matmul, x.softmax). Triton's own tl.dot / tl.sum are the kernel's."""
    return dotted is None or dotted.split(".")[0] == "torch"


def _on_self(node: ast.Attribute) -> bool:
    """self.softmax(...): the candidate's own method or submodule; if a submodule computes the
    op with torch, the run-time op check sees it."""
    return isinstance(node.value, ast.Name) and node.value.id == "self"


class _Visitor(ast.NodeVisitor):
    def __init__(self, policy: GuardPolicy) -> None:
        self.policy = policy
        self.scan = Scan()
        self.aliases: dict[str, str] = {}  # local name -> dotted module path it stands for
        self._inner: set[int] = set()  # attribute nodes inside a longer chain: checked once, whole
        self._kernel_depth = 0  # > 0 inside a @triton.jit body: x.sum(), a @ b there are Triton's own
        family = policy.single_op
        self.single_op_names = OP_FAMILIES.get(family or "", frozenset({family} if family else ()))

    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        self.scan.violations.append(Violation(rule, getattr(node, "lineno", 1), message))

    # imports ---------------------------------------------------------------------------
    def _check_module(self, name: str, node: ast.AST) -> None:
        root = name.split(".")[0]
        if root not in self.policy.allowed_imports:
            self.flag("import", node, f"imports {name}; a candidate may import only {', '.join(sorted(self.policy.allowed_imports))}")
        else:
            self._check_dotted(name, node)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_module(a.name, node)
            if a.asname:
                self.aliases[a.asname] = a.name
            else:
                self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag("import", node, "relative imports are not allowed")
            return
        module = node.module or ""
        self._check_module(module, node)
        for a in node.names:
            if a.name == "*":
                self.flag("import", node, f"from {module} import * hides what is used")
                continue
            full = f"{module}.{a.name}"
            self._check_dotted(full, node)
            self.aliases[a.asname or a.name] = full

    # names -----------------------------------------------------------------------------
    def resolve(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id], *reversed(parts)])
        return None

    def _check_dotted(self, dotted: str, node: ast.AST) -> None:
        for prefix, rule in FORBIDDEN_NAMES:
            if dotted == prefix or dotted.startswith(prefix + ".") or (prefix.endswith("__") and dotted.startswith(prefix)):
                self.flag(rule, node, f"uses {dotted}")
                return
        parts = dotted.split(".")
        if parts[0] in ("torch", "triton") and any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
            self.flag("private-api", node, f"uses the private API {dotted}")
        if dotted.startswith("torch.utils.cpp_extension.") and dotted not in CPP_EXTENSION_ALLOWED:
            self.flag("cpp-extension", node, f"uses {dotted}; build CUDA C++ with load_inline only")
        if parts[0] == "os" and len(parts) > 1 and ".".join(parts[:2]) not in OS_ALLOWED:
            self.flag("threads-processes", node, f"uses {dotted}; a candidate may only read os.environ and use os.path")
        if dotted == "os.environ" and isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del)):
            self.flag("patching", node, "writes os.environ")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ALLOWED_DUNDERS:
            self.flag("dunder", node, f"touches {node.attr}")
        if node.attr in FRAME_ATTRIBUTES:
            self.flag("dynamic-code", node, f"reads {node.attr}: frames and their locals are the evaluator's, not the kernel's")
        if node.attr == "from_file":
            self.flag("file-io", node, "reads a file with from_file (native I/O the sandbox cannot see)")
        if node.attr == "load_library":
            self.flag("cpp-extension", node, "loads a native library; build CUDA C++ with load_inline only")
        if node.attr == "data_ptr":
            self.flag("caching", node, "reads data_ptr(): results keyed on data pointers are not allowed; pass tensors to kernels")
        outermost = id(node) not in self._inner
        inner = node.value
        while isinstance(inner, ast.Attribute):
            self._inner.add(id(inner))
            inner = inner.value
        dotted = self.resolve(node)
        if outermost and dotted is not None and not isinstance(node.ctx, ast.Store):
            self._check_dotted(dotted, node)
        if (outermost and self.single_op_names and node.attr in self.single_op_names and isinstance(node.ctx, ast.Load)
                and _torch_or_method(dotted) and not self._kernel_depth and not _on_self(node)):
            self.flag("single-op", node, f"this problem is a single op ({self.policy.single_op}); calling {node.attr} leaves the work to torch")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_BUILTINS and node.id not in self.aliases:
            self.flag(BANNED_BUILTINS[node.id], node, f"uses the builtin {node.id}")
        if node.id.startswith("__") and node.id.endswith("__") and node.id not in ALLOWED_DUNDERS:
            self.flag("dunder", node, f"touches {node.id}")
        target = self.aliases.get(node.id, "")
        if self.single_op_names and target.split(".")[-1] in self.single_op_names and _torch_or_method(target):
            self.flag("single-op", node, f"this problem is a single op ({self.policy.single_op}); calling {node.id} ({target}) leaves the work to torch")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and "matmul" in self.single_op_names and not self._kernel_depth:
            self.flag("single-op", node, "this problem is a matrix product; the @ operator leaves it to torch")
        self.generic_visit(node)

    # statements ------------------------------------------------------------------------
    def visit_Try(self, node: ast.AST) -> None:
        self.flag("try-except", node, "try/except is not allowed: a fallback hides a failing kernel")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def _check_targets(self, targets: list[ast.expr], node: ast.AST) -> None:
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, (ast.Attribute, ast.Subscript)):
                    base = sub.value
                    dotted = self.resolve(base) if isinstance(base, (ast.Attribute, ast.Name)) else None
                    if dotted is not None:
                        whole = self.resolve(sub) if isinstance(sub, ast.Attribute) else None
                        named = next((r for p, r in FORBIDDEN_NAMES if whole and whole.startswith(p)), "patching")
                        rule = named if named == "precision-flags" else "patching"
                        self.flag(rule, node, f"assigns into the module {dotted}")
                        break

    def visit_Assign(self, node: ast.Assign) -> None:
        self._check_targets(node.targets, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_targets([node.target], node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_targets([node.target], node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        self._check_targets(node.targets, node)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            dotted = self.resolve(base) or (base.id if isinstance(base, ast.Name) else "")
            if dotted in ("torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter", "Tensor", "Parameter"):
                self.flag("tensor-subclass", node, f"class {node.name} subclasses {dotted}")
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name in ("__torch_function__", "__torch_dispatch__"):
                self.flag("tensor-subclass", item, f"defines {item.name}")
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        kernel = False
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            dotted = self.resolve(target) or ""
            if dotted in ("triton.jit", "triton.runtime.jit.jit", "triton.runtime.jit"):
                self.scan.triton_kernels.append(node.name)
                kernel = True
        self._kernel_depth += kernel
        self.generic_visit(node)
        self._kernel_depth -= kernel

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        dotted = self.resolve(node.func)
        if dotted == "torch.utils.cpp_extension.load_inline":
            self.scan.uses_load_inline = True
        self.generic_visit(node)
