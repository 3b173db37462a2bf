"""The static gate: parse a candidate (AST, never regex on Python) and reject what no honest
kernel needs. Every rejection names its rule; the rules and their defaults are in docs/evaluator.md
("Evaluator policy") and a policy can switch any rule off (`GuardPolicy(disabled=...)`).

The gate is a first line only: the worker enforces the same classes of rule at run time
(sandbox.py), and correctness plus timing checks catch what neither can see statically.

The names live in guard_names.py; guard_context.py says where an expression is used (a module as
a value, a data pointer in an alignment test); guard_calls.py checks calls that reach attributes
by string or write through a function.
"""
from __future__ import annotations

import ast
import re
from typing import cast
from dataclasses import dataclass, field

from tools.guard.calls import CALL_ONLY, CallChecks
from tools.guard.context import Parents, alignment_test, attribute_base, bound_to_name, called, parents_of
from tools.guard.keys import KeyChecks, dunder
from tools.guard.names import (
    ALLOWED_DUNDER_NAMES, ALLOWED_DUNDERS, ALLOWED_IMPORTS, BANNED_BUILTINS, CPP_EXTENSION_ALLOWED,
    CXX_FORBIDDEN, CXX_LIBRARIES, ENVIRON_WRITES, FORBIDDEN_NAMES, FRAME_ATTRIBUTES, HONEST_SUBMODULES,
    IDENTITY_ATTRIBUTES, KNOWN_MODULES, MODULE_ALIASES, OP_FAMILIES, OP_NAMESPACES, OS_ALLOWED, REACHING_MODULES, RULE_ROOTS,
    MODULE_NAMES, NAMESPACE_ATTRIBUTES, KEY_READERS,
)


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
    visitor = _Visitor(policy, parents_of(tree))
    visitor.bind_names(tree)
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
    text = str(node.value)  # a str constant (the caller's test)
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
    """Whether a name that matches a single-op family stands for torch's op: a torch name, a
    method on some value (x.matmul, x.softmax), or the operator module's (operator.matmul is `@`
    by name, on whatever its operands are). Triton's own tl.dot / tl.sum are the kernel's."""
    return dotted is None or dotted.split(".")[0] in ("torch", "operator")


def _on_self(node: ast.Attribute) -> bool:
    """self.softmax(...): the candidate's own method or submodule; if a submodule computes the
    op with torch, the run-time op check sees it."""
    return isinstance(node.value, ast.Name) and node.value.id == "self"


class _Visitor(CallChecks, KeyChecks, ast.NodeVisitor):
    def __init__(self, policy: GuardPolicy, parents: Parents) -> None:
        self.policy = policy
        self.parents = parents
        self.scan = Scan()
        self.aliases: dict[str, str] = {}  # local name -> dotted path it stands for (imports, plain bindings)
        self.modules: set[str] = set()  # dotted paths named by `import` statements: modules for sure
        self._inner: set[int] = set()  # attribute nodes inside a longer chain: checked once, whole
        self._kernel_depth = 0  # > 0 inside a @triton.jit body: x.sum(), a @ b there are Triton's own
        family = policy.single_op
        self.single_op_names = OP_FAMILIES.get(family or "", frozenset({family} if family else ()))
        self.reaching = MODULE_NAMES - policy.allowed_imports  # modules that must be imported to be used
        self.reaching_anywhere = REACHING_MODULES - policy.allowed_imports

    def flag(self, rule: str, node: ast.AST, message: str) -> None:
        self.scan.violations.append(Violation(rule, getattr(node, "lineno", 1), message))

    def bind_names(self, tree: ast.AST) -> None:
        """Imports and plain `name = <dotted name>` bindings, before the walk, so that a name used
        above the line that binds it resolves too (`c = torch.cuda` makes `c.Stream` torch.cuda.Stream)."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                self._bind_import(node)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                self._bind_from(node)
        assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, (ast.Name, ast.Attribute))]
        changed = True
        while changed:
            changed = False
            for node in assigns:
                dotted = self.resolve(node.value)
                for target in node.targets:
                    if dotted is not None and isinstance(target, ast.Name) and target.id not in self.aliases:
                        self.aliases[target.id] = dotted
                        changed = True

    # imports ---------------------------------------------------------------------------
    def _bind_import(self, node: ast.Import) -> None:
        for a in node.names:
            parts = a.name.split(".")
            self.modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
            self.aliases[a.asname or parts[0]] = a.name if a.asname else parts[0]

    def _bind_from(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            if a.name != "*":
                self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def _check_module(self, name: str, node: ast.AST) -> None:
        root = name.split(".")[0]
        if root not in self.policy.allowed_imports:
            self.flag("import", node, f"imports {name}; a candidate may import only {', '.join(sorted(self.policy.allowed_imports))}")
        else:
            self._check_path(name, node)

    def _check_path(self, dotted: str, node: ast.AST) -> None:
        """An imported path: every part past the first that is a module must be the package's own."""
        self._check_dotted(dotted, node)
        self._check_suffixes(dotted.split("."), 1, node)
        parts = dotted.split(".")
        for i in range(1, len(parts)):
            path = ".".join(parts[:i + 1])
            if path in MODULE_ALIASES or (parts[i] in self.reaching and path not in HONEST_SUBMODULES):
                self._flag_reach(parts[i], ".".join(parts[:i]), node)
                return

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_module(a.name, node)
        self._bind_import(node)

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
            self._check_path(f"{module}.{a.name}", node)
        self._bind_from(node)

    # names -----------------------------------------------------------------------------
    def resolve(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id], *reversed(parts)])
        return None

    def _check_dotted(self, dotted: str, node: ast.AST, via: str = "") -> None:
        """The rules on one dotted name; `via` names the chain it was found in, if longer."""
        shown = f"{dotted} (as {via})" if via else dotted
        for prefix, rule in FORBIDDEN_NAMES:
            if dotted == prefix or dotted.startswith(prefix + ".") or (prefix.endswith("__") and dotted.startswith(prefix)):
                self.flag(rule, node, f"uses {shown}")
                return
        parts = dotted.split(".")
        if parts[0] == "torch" and any(p.startswith(("Sym", "sym_")) for p in parts[1:]):
            # symbolic sizes (torch.SymInt, torch.sym_int): C++ calls their Python methods back from
            # inside an op, where torch has taken the op recorder off its mode stack (stop 29)
            self.flag("dynamic-code", node, f"uses {shown}: symbolic sizes run Python inside torch's ops")
        if parts[0] in ("torch", "triton") and any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
            self.flag("private-api", node, f"uses the private API {shown}")
        if dotted.startswith("torch.utils.cpp_extension.") and dotted not in CPP_EXTENSION_ALLOWED:
            self.flag("cpp-extension", node, f"uses {shown}; build CUDA C++ with load_inline only")
        if parts[0] == "os" and len(parts) > 1 and ".".join(parts[:2]) not in OS_ALLOWED:
            self.flag("threads-processes", node, f"uses {shown}; a candidate may only read os.environ and use os.path")
        if dotted == "os.environ" and isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del)):
            self.flag("patching", node, "writes os.environ")
        if parts[:2] == ["os", "environ"] and len(parts) > 2 and parts[2] in ENVIRON_WRITES:
            self.flag("patching", node, f"writes os.environ ({shown})")
        if (parts[0] not in ("torch", "triton", "os", "__future__") and parts[0] in self.policy.allowed_imports
                and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])):
            self.flag("private-api", node, f"uses the private name {shown}")

    def _check_suffixes(self, parts: list[str], start: int, node: ast.AST) -> None:
        """A chain is checked again from every part that names a rule's root: F.torch.compile is
        torch.compile, torch.os.system is os.system, wherever the chain starts."""
        for i in range(start, len(parts)):
            if parts[i] not in RULE_ROOTS:
                continue
            if parts[i] == "os" and i == len(parts) - 1:
                through = ".".join(parts[:i]) or "an attribute"
                self.flag("threads-processes", node, f"reaches os through {through}; a candidate may only read os.environ and use os.path")
            else:
                self._check_dotted(".".join(parts[i:]), node, via=".".join(parts) if i else "")

    def _flag_reach(self, module: str, through: str, node: ast.AST) -> None:
        self.flag("import", node, f"reaches the module {module} through {through}; a candidate may use only the modules it imports ({', '.join(sorted(self.policy.allowed_imports))})")

    def _check_reach(self, node: ast.Attribute, dotted: str | None) -> None:
        """An attribute named like a module outside the allowlist: an import by another road."""
        if called(node, self.parents):
            return  # modules are not callable: x.select(0, i) is a method
        if dotted is not None:
            if dotted in MODULE_ALIASES or (node.attr in self.reaching and dotted not in HONEST_SUBMODULES
                                            and not dotted.startswith(OP_NAMESPACES)):
                self._flag_reach(node.attr, dotted.rsplit(".", 1)[0], node)
        elif node.attr in self.reaching_anywhere:
            self._flag_reach(node.attr, "an attribute", node)

    def _module(self, dotted: str) -> bool:
        return dotted in self.modules or dotted in KNOWN_MODULES or dotted in self.policy.allowed_imports

    def _check_value(self, dotted: str, node: ast.AST) -> None:
        """A module, or a function that takes names as strings, used as a value: fine as the base
        of an attribute or bound to a plain name (the gate follows it), not passed around."""
        if attribute_base(node, self.parents) or bound_to_name(node, self.parents):
            return
        if self._module(dotted):
            self.flag("dynamic-code", node, f"uses the module {dotted} as a value; use its attributes where they are needed")
        elif dotted in CALL_ONLY and not called(node, self.parents):
            self.flag("dynamic-code", node, f"uses {dotted} as a value; it may only be called, with literal names")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if dunder(node.attr) and node.attr not in ALLOWED_DUNDERS:
            self.flag("dunder", node, f"touches {node.attr}")
        if node.attr in FRAME_ATTRIBUTES:
            self.flag("dynamic-code", node, f"reads {node.attr}: frames and their locals are the evaluator's, not the kernel's")
        if node.attr == "numpy":  # Tensor.numpy(): numpy's arrays, and their BLAS, by a method (stop 29)
            self.flag("import", node, "reads .numpy(): numpy is a module outside the allowlist, reached through a tensor")
        if node.attr == "set_":  # frees the old storage inside torch's op, unseen by the op recorder (stop 29)
            self.flag("dynamic-code", node, "swaps a tensor's storage (x.set_): finalizers of the old one run inside torch's op")
        if node.attr in NAMESPACE_ATTRIBUTES:
            self.flag("dynamic-code", node, f"reads {node.attr}: a builtin or a module's namespace reached through an object")
        if node.attr in KEY_READERS and called(node, self.parents) and cast(ast.Call, self.parents[id(node)]).args:
            self.check_key(cast(ast.Call, self.parents[id(node)]).args[0], node)
        if node.attr == "from_file":
            self.flag("file-io", node, "reads a file with from_file (native I/O the sandbox cannot see)")
        if node.attr == "load_library":
            self.flag("cpp-extension", node, "loads a native library; build CUDA C++ with load_inline only")
        if node.attr == "data_ptr" and not alignment_test(node, self.parents):
            self.flag("caching", node, "reads data_ptr(): results keyed on data pointers are not allowed; pass tensors to kernels (an alignment test such as `x.data_ptr() % 16 == 0` is allowed)")
        if node.attr in IDENTITY_ATTRIBUTES:
            self.flag("caching", node, f"reads {node.attr}, a tensor's identity: results keyed on identity are not allowed")
        outermost = id(node) not in self._inner
        inner = node.value
        while isinstance(inner, ast.Attribute):
            self._inner.add(id(inner))
            inner = inner.value
        dotted = self.resolve(node)
        if isinstance(node.ctx, ast.Load):
            self._check_reach(node, dotted)
        if outermost and not isinstance(node.ctx, ast.Store):
            if dotted is not None:
                self._check_dotted(dotted, node)
                self._check_suffixes(dotted.split("."), 1, node)
            else:
                self._check_suffixes(_attribute_names(node), 0, node)
            if dotted is not None and isinstance(node.ctx, ast.Load):
                self._check_value(dotted, node)
        if (outermost and self.single_op_names and node.attr in self.single_op_names and isinstance(node.ctx, ast.Load)
                and _torch_or_method(dotted) and not self._kernel_depth and not _on_self(node)):
            self.flag("single-op", node, f"this problem is a single op ({self.policy.single_op}); calling {node.attr} leaves the work to torch")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in BANNED_BUILTINS and node.id not in self.aliases:
            self.flag(BANNED_BUILTINS[node.id], node, f"uses the builtin {node.id}")
        if dunder(node.id) and node.id not in ALLOWED_DUNDER_NAMES:
            self.flag("dunder", node, f"touches {node.id}")
        target = self.aliases.get(node.id, "")
        if self.single_op_names and target.split(".")[-1] in self.single_op_names and _torch_or_method(target):
            self.flag("single-op", node, f"this problem is a single op ({self.policy.single_op}); calling {node.id} ({target}) leaves the work to torch")
        if target and isinstance(node.ctx, ast.Load):
            self._check_value(target, node)
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
                    if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "type":
                        self.flag("patching", node, "assigns into the class of a value (type(x).name = ...)")
                        break
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

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]  # the same checks for both

    def visit_Call(self, node: ast.Call) -> None:
        dotted = self.resolve(node.func)
        if dotted == "torch.utils.cpp_extension.load_inline":
            self.scan.uses_load_inline = True
        self.check_call(node, dotted)
        self.generic_visit(node)


def _attribute_names(node: ast.AST) -> list[str]:
    """The attribute names of a chain read from an expression that is not a name: [a, b] for f().a.b."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return parts[::-1]
