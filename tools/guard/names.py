"""The static gate's name tables: which imports, dotted names, builtins, attributes and modules a
candidate may not use, and the rule each breaks. tools/guard/scan.py walks the source; this file only
says what the names are (docs/evaluator.md, "Evaluator policy", documents the rules).
"""
from __future__ import annotations

import sys

# Modules (and their submodules) a candidate may import. Everything else is rule `import`.
ALLOWED_IMPORTS = frozenset({
    "__future__", "torch", "triton", "math", "typing", "dataclasses", "functools", "itertools",
    "operator", "collections", "enum", "numbers", "os",
})
# Prefixes of dotted names, resolved through import aliases, and the rule each breaks. A prefix
# matches wherever the name appears in a chain: torch.nn.functional.torch.compile is torch.compile.
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
    ("torch.cuda.graphs", "streams-graphs"), ("torch.cuda.StreamContext", "streams-graphs"),
    ("torch.cuda.get_stream_from_external", "streams-graphs"), ("torch.accelerator.set_stream", "streams-graphs"),
    ("torch.cuda.memory", "private-api"), ("torch.cuda.set_per_process_memory_fraction", "private-api"),
    ("torch.multiprocessing", "threads-processes"), ("torch.distributed", "threads-processes"),
    ("torch.utils.data", "threads-processes"),
    ("torch.overrides", "tensor-subclass"), ("torch.utils._python_dispatch", "tensor-subclass"),
    ("torch.Tensor.__", "patching"), ("functools.cache", "caching"), ("functools.lru_cache", "caching"),
    ("functools.cached_property", "caching"),
    # torch.library registers Python kernels for aten ops: it rebinds torch's own ops in-process
    ("torch.library", "patching"),
    # code from bytes or strings: unpickling runs any callable a pickle names; packages and hub
    # modules are imported from files; string annotations are evaluated by get_type_hints (which
    # functools.singledispatch's register calls)
    ("torch.load", "dynamic-code"), ("torch.serialization", "dynamic-code"), ("torch.package", "dynamic-code"),
    ("torch.hub", "dynamic-code"), ("typing.get_type_hints", "dynamic-code"), ("typing.ForwardRef", "dynamic-code"),
    ("functools.singledispatch", "dynamic-code"), ("functools.singledispatchmethod", "dynamic-code"),
    # a class made by a call, out of the gate's sight: make_dataclass(..., bases=(torch.Tensor,)); a
    # module returned by a call (torch.get_device_module("cuda").Stream is torch.cuda.Stream)
    ("dataclasses.make_dataclass", "dynamic-code"), ("torch.get_device_module", "dynamic-code"),
    # triton's host-code builder compiles C with the system compiler and loads it, like cpp_extension.load
    ("triton.runtime.build", "cpp-extension"),
)
# The roots FORBIDDEN_NAMES and the os rule start from: a chain is checked again from every part
# that names one of them (torch.nn.functional.torch.compile, torch.os.system).
RULE_ROOTS = frozenset({"torch", "triton", "functools", "typing", "os", "operator", "dataclasses", "collections"})
CPP_EXTENSION_ALLOWED = frozenset({"torch.utils.cpp_extension.load_inline"})
OS_ALLOWED = frozenset({"os.environ", "os.path", "os.getenv", "os.cpu_count", "os.sep"})
# os.environ's methods that write the environment (a write with no assignment statement)
ENVIRON_WRITES = frozenset({"update", "setdefault", "pop", "popitem", "clear"})
BANNED_BUILTINS = {
    "eval": "dynamic-code", "exec": "dynamic-code", "compile": "dynamic-code",
    "__import__": "dynamic-code", "globals": "dynamic-code", "locals": "dynamic-code",
    "vars": "dynamic-code", "getattr": "dynamic-code", "setattr": "dynamic-code",
    "delattr": "dynamic-code", "open": "file-io", "breakpoint": "dynamic-code",
    "input": "dynamic-code", "exit": "exit", "quit": "exit", "id": "caching",
    "hash": "caching",  # a tensor's hash is its identity: id() by another name
}
ALLOWED_DUNDERS = frozenset({"__init__", "__name__", "__future__"})  # as attributes and as names
# Module-level and class-level names with no reach: allowed as plain names, not as attributes.
ALLOWED_DUNDER_NAMES = ALLOWED_DUNDERS | {"__all__", "__doc__", "__slots__", "__version__"}
# Attributes of frames, generators, coroutines and tracebacks: a way up the stack to the worker's
# own objects (its launch counter, its sandbox) with no import at all. Rule `dynamic-code`.
FRAME_ATTRIBUTES = frozenset({"gi_frame", "cr_frame", "ag_frame", "tb_frame", "tb_next", "f_back",
                              "f_locals", "f_globals", "f_builtins", "f_code", "f_trace", "gi_code",
                              "cr_code", "ag_code", "gi_yieldfrom", "cr_await"})
# Attributes that stand for an object's identity (rule `caching`, like id()).
IDENTITY_ATTRIBUTES = frozenset({"_cdata"})

# Modules that reach the interpreter, the OS, files or other processes. Many are re-exported as
# attributes of allowed modules (torch.sys, torch.os, typing.types, triton.testing.subprocess,
# os.path.os): an attribute with one of these names is rule `import` whatever expression it is
# read from, unless it is called (a module is not callable: x.select(0, i) is Tensor.select) or
# the chain names a package's own submodule of that name (HONEST_SUBMODULES).
REACHING_MODULES = frozenset({
    "sys", "os", "posix", "nt", "subprocess", "_posixsubprocess", "ctypes", "_ctypes", "socket", "_socket",
    "ssl", "socketserver", "http", "urllib", "ftplib", "smtplib", "webbrowser", "importlib", "imp", "_imp",
    "pkgutil", "zipimport", "runpy", "site", "sysconfig", "builtins", "gc", "inspect", "traceback",
    "linecache", "dis", "code", "codeop", "pdb", "bdb", "faulthandler", "tracemalloc", "atexit", "weakref",
    "_weakref", "threading", "_thread", "multiprocessing", "_multiprocessing", "concurrent", "asyncio",
    "signal", "_signal", "selectors", "select", "shutil", "tempfile", "io", "_io", "pathlib", "glob",
    "pickle", "_pickle", "marshal", "copyreg", "shelve", "dbm", "sqlite3", "zipfile", "tarfile", "types",
    "platform", "pty", "tty", "termios", "fcntl", "resource", "mmap", "logging",
})
# In a chain that resolves through the candidate's imports, any standard-library module name, and
# the third-party modules torch and triton import, is checked the same way (torch.textwrap,
# torch.nn.functional.np): a module outside the allowlist reached through an attribute is an
# import by another road (numpy alone loads pickles and reaches ctypes).
THIRD_PARTY_MODULES = frozenset({"numpy", "np", "typing_extensions", "sympy", "networkx", "jinja2", "filelock",
                                 "fsspec", "setuptools", "pkg_resources", "psutil", "yaml", "dill", "cloudpickle"})
MODULE_NAMES = frozenset(sys.stdlib_module_names) | REACHING_MODULES | THIRD_PARTY_MODULES
# Own submodules of allowed packages (and torch functions) that share a name with a standard
# module: torch.types is torch's module, not the `types` module.
HONEST_SUBMODULES = frozenset({
    "torch.types", "torch.signal", "torch.random", "torch.cuda.random", "torch.xpu.random",
    "torch.multiprocessing", "torch.multiprocessing.queue", "torch.fx.traceback",
    "triton.language.math", "triton.language.random", "triton.profiler.profile", "collections.abc",
    "torch.select", "torch.chunk", "torch.trace", "torch.Tensor.select", "torch.Tensor.chunk", "torch.Tensor.trace",
})
# Modules re-exported under another name by public torch modules (torch.cuda.tunable imports
# multiprocessing as mp): the attribute's name does not say it is a module. tests/eval/test_guard.py
# walks the installed torch and triton for new ones.
MODULE_ALIASES = frozenset({
    "torch.cuda.tunable.mp", "torch.multiprocessing.reducer", "torch.utils.data.dataloader.python_multiprocessing",
    "torch.utils.data.datapipes.iter.combining.copymodule",
})
# Chains under these are op namespaces, not modules (torch.ops.aten.select.int).
OP_NAMESPACES = ("torch.ops.",)
# Module paths a candidate commonly binds (besides names bound by `import`): passing one of these
# around as a value (a call argument, a list element, a return value) hides what is used from the
# gate. Binding it to a plain name is fine: the gate follows the name.
KNOWN_MODULES = frozenset({
    "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.cuda", "torch.utils", "torch.utils.cpp_extension",
    "torch.linalg", "torch.fft", "torch.special", "torch.autograd", "torch.amp", "torch.cuda.amp", "torch.ops",
    "torch.ops.aten", "torch.testing", "torch.types", "torch.random", "torch.backends", "torch.library",
    "triton.language", "triton.language.math", "triton.language.extra", "triton.language.extra.cuda",
    "triton.language.extra.libdevice", "triton.runtime", "triton.testing", "triton.compiler", "triton.knobs",
    "os.path", "collections.abc",
})

# operator.attrgetter / methodcaller: attribute access by string. The names they may not name
# (besides dunders, private names, frame attributes and the modules above): the in-process
# sandbox's and the worker's own state, which a candidate could otherwise switch off or read.
WORKER_ATTRIBUTES = frozenset({
    "armed", "arm", "check", "violations", "scratch", "writable", "hidden", "toolchains", "executables", "own_sockets", "hooks",
    "sandbox", "build_only",
    "launches", "count", "names", "module_name", "reset", "install_triton", "wrap_extension", "ops",
    "config", "builder", "arena", "input_arena", "gate", "outgoing", "timer", "pool", "compiled", "warmed", "source_name",
    "model", "problem", "data_ptr", "from_file", "load_library",
})
STRING_ACCESS = frozenset({"operator.attrgetter", "operator.methodcaller"})
# functools' attribute copiers: update_wrapper(wrapper, wrapped) writes wrapped's __dict__ into
# wrapper's, a setattr in all but name when wrapper is a module or a class
ATTRIBUTE_COPIERS = frozenset({"functools.update_wrapper", "functools.wraps"})

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
# Every rule of the static guard (docs/evaluator.md's table): what `--allow` and
# `EvalOptions.disabled_rules` may name (tests/eval/test_guard.py checks each flagged rule is here).
RULES = frozenset({"import", "dynamic-code", "dunder", "file-io", "exit", "threads-processes", "network",
                   "tensor-subclass", "try-except", "torch-compile", "precision-flags", "streams-graphs",
                   "patching", "private-api", "caching", "cpp-extension", "own-kernel", "single-op"})
# Tokens that must not appear in C++/CUDA source strings, and the rule each breaks.
CXX_FORBIDDEN: tuple[tuple[str, str], ...] = (
    (r"\bcudaStreamCreate\w*", "streams-graphs"), (r"\bcudaGraph\w*", "streams-graphs"),
    (r"\bcudaStreamBeginCapture\b", "streams-graphs"), (r"\bgetStreamFromPool\b", "streams-graphs"),
    (r"\bsetCurrentCUDAStream\b", "streams-graphs"), (r"\bCUDAStreamGuard\b", "streams-graphs"),
    (r"\bcudaEventCreate\w*", "streams-graphs"),
    # the driver API's streams, graphs and contexts (an attacker helper, stop 45: cuStreamCreate was not listed)
    (r"\bcu(Stream|Graph|Ctx|Event)\w*", "streams-graphs"),
    (r"\bstd::thread\b", "threads-processes"), (r"\bpthread_create\b", "threads-processes"),
    # more ways to run code beside the call (stop 45's lingering worker: std::async and inotify)
    (r"\bstd::(async|jthread)\b", "threads-processes"), (r"\binotify_\w+", "threads-processes"),
    (r"\b(timer_create|signal|sigaction)\s*\(", "threads-processes"),
    (r"\bfork\s*\(", "threads-processes"), (r"\bsystem\s*\(", "threads-processes"),
    (r"\bpopen\s*\(", "threads-processes"), (r"\bexecv\w*\s*\(", "threads-processes"),
    (r"\bsocket\s*\(", "network"), (r"\bdlopen\s*\(", "threads-processes"),
    (r"\bcudaDeviceReset\b", "streams-graphs"), (r"\bcudaDeviceSetLimit\b", "streams-graphs"),
    (r"\bcudaSetDevice\b", "streams-graphs"),
    (r"\bexecl\w*\s*\(", "threads-processes"), (r"\bvfork\s*\(", "threads-processes"),
    (r"\bposix_spawn\w*\s*\(", "threads-processes"), (r"\bptrace\s*\(", "threads-processes"),
    (r"\bkill\s*\(", "threads-processes"), (r"\bsetsid\s*\(", "threads-processes"),
    (r"\bsyscall\s*\(", "threads-processes"), (r"\bprocess_vm_\w+", "threads-processes"),
    # Python from C++: a pybind11 import, exec or eval reaches every module of the worker
    (r"\bpy::(module_?::import|exec|eval|eval_file)\b", "dynamic-code"), (r"\bPy(Run|Import|Eval)_\w+", "dynamic-code"),
    # the CPython C API's ways to the interpreter's state (sys.modules, a module's attributes): a
    # timer rewritten from C++ through PySys_GetObject("modules") (issue 36). A first filter only: the
    # verdict must not depend on it (the parent's clock does not read the worker's timer)
    (r"\bPy(Sys|Module|Capsule|GILState|Thread)_\w+", "dynamic-code"), (r"\bgil_scoped_acquire\b", "dynamic-code"), (r"\bPyObject_(Get|Set|Del)Attr\w*", "dynamic-code"),
    (r"\bPyDict_(Get|Set|Del)Item\w*", "dynamic-code"), (r"\bpy::(getattr|setattr|globals|reinterpret_borrow)\b", "dynamic-code"),
    # ATen's dispatcher entered below the op recorder: the op left to the library from C++ (issue 35;
    # tools/timing/library.py measures what ran, this names it first)
    (r"\bredispatch\b", "private-api"),
    (r"\b(f|fd)?open\s*\(", "file-io"),
)
CXX_LIBRARIES = r"\b(cublas\w*|cudnn\w*|cublasLt\w*|at::(mm|matmul|bmm|addmm|conv\w*|linear|softmax|layer_norm)|torch::(mm|matmul|bmm|addmm|conv\w*|linear|softmax|layer_norm))\b"

# Attributes that are a builtin or reach a namespace from any object: `builtins.exec` once the
# builtins are in hand, Triton's JITFunction.get_capture_scope() (its module's globals). `eval`
# and `compile` are left out: nn.Module.eval() and torch.compile are honest. Rule `dynamic-code`.
NAMESPACE_ATTRIBUTES = frozenset({"exec", "getattr", "setattr", "delattr", "globals", "locals", "vars",
                                  "breakpoint", "get_capture_scope"})
# Builtins that a constant key must not name (`b['exec']`, `b.get('eval')`, `case {'open': f}`).
KEYED_BUILTINS = frozenset(name for name, rule in BANNED_BUILTINS.items() if rule in ("dynamic-code", "file-io"))
# Methods that read a mapping by key: their first argument is checked as a subscript's key is.
KEY_READERS = frozenset({"get", "pop", "setdefault"})
