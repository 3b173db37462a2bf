"""The reference worker: the problem's own Model (the user's file, trusted), and the one process
that holds the secret seeds. It makes every input: its own, for its outputs and its timing, and
the candidate's, which the parent copies into the candidate's memory (`inputs`).
"""
from __future__ import annotations

import inspect
import time
from pathlib import Path
from typing import Any

from tools.worker.errors import Failure, load_module
from tools.worker.float64 import skipped
from tools.worker.memory import DeviceKeep
from tools.worker.worker import Reply, Worker, construct


POOL_KEEP_BYTES = 1 << 30  # timing-pool sets kept while a trial makes a fresh set of its own

class ReferenceWorker(Worker):
    role = "reference"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.problem: Any = None  # the problem's module, once `load` named it
        self.get_inputs: Any = None
        self.get_init_inputs: Any = None
        self.pool: Any = None
        self.compiled: Any = None
        self.variants: list[Any] = []  # held-out variants the reference accepted (tools/worker/variants.py)
        self.variant_models: dict[int, Any] = {}
        self.own_bytes = 0  # the problem's inputs, outputs and parameters (set by build)
        self.wide_models: dict[int, Any] = {}  # id(model) -> its float64 twin (tools/worker/float64.py)
        self.host_models: dict[int, Any] = {}  # id(model) -> its float64 twin in host memory
        self.memory = DeviceKeep(self.device)  # what it keeps of the device between requests
        if self.device.type == "cuda":
            from tools.worker.worker import prewarm

            prewarm(self.device)  # the evaluator's own kernels, compiled by trusted code

    def handlers(self):
        # around every request that runs the model but "gate", the device memory is settled
        # (tools/worker/memory.py: what the requests need is kept reserved, at most a quarter of the card,
        # and what is cached beyond it and the slack given back); not around a gated pass (its calls wait
        # on the parent's gate until after the answer, and freeing cached memory synchronizes the device);
        # "build" gives back all of it when done (`_release`); "load" and "ceilings" come before any candidate
        trimmed = {"trial": self.trial, "inputs": self.inputs, "time": self.time, "variant_init": self.variant_init,
                   "wide": self.wide, "profile": self.profile}
        return {**{op: self._trimmed(handler) for op, handler in trimmed.items()},
                "load": self.load, "build": self.build, "ceilings": self.ceilings, "gate": self.make_gate}

    def _trimmed(self, handler: Any) -> Any:
        def serve(msg: dict[str, Any], payload: bytes) -> Reply:
            self.memory.before()
            try:
                return handler(msg, payload)
            finally:
                self.memory.after()
        return serve

    def load(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """Import the problem's file (the first request: a worker is started before its problem is
        known, so that a warm pool can start it ahead of need). One problem per worker."""
        if self.problem is not None:
            raise Failure("runtime_error", f"this reference worker already holds {Path(self.config['problem']).name}")
        self.config.update(problem=str(msg["problem"]), entry=str(msg["entry"]))
        self.problem = load_module(Path(self.config["problem"]), "ratchet_problem")
        self.get_inputs = getattr(self.problem, "get_inputs", None)
        self.get_init_inputs = getattr(self.problem, "get_init_inputs", lambda: [])
        return {"op": "loaded"}, b""

    def generate(self, seed: int, dist: str) -> list[Any]:
        """Inputs of (seed, distribution); "variant:K" is the problem's own distribution at the
        sizes of held-out variant K."""
        from tools.worker.inputs import generate
        from tools.worker.variants import applied

        if dist.startswith("variant:"):
            with applied(self.problem, self.variants[int(dist.split(":")[1])]):
                return generate(self.get_inputs, seed, "problem", self.device, self.dtype)
        return generate(self.get_inputs, seed, dist, self.device, self.dtype)

    def model_for(self, dist: str) -> Any:
        return self.variant_models[int(dist.split(":")[1])] if dist.startswith("variant:") else self.model

    # requests ---------------------------------------------------------------------------
    def build(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """Build the problem's Model; describe the problem; hand over the constructor's arguments
        (a candidate never runs the problem's file)."""
        from tools.worker.inputs import call_factory

        start = time.monotonic()
        init_inputs = call_factory(self.get_init_inputs, "get_init_inputs", None)
        cls = getattr(self.problem, self.config["entry"])
        try:
            inspect.signature(cls).bind(*init_inputs)
        except TypeError as exc:
            raise Failure("compile_error", f"{cls.__name__}(*get_init_inputs()) does not fit its constructor: {exc}") from None
        self.model = construct(cls, init_inputs, self.config["init_seed"], self.device, self.dtype)
        from tools.wire.transport import encode

        init_tree, init_payload = encode(init_inputs)
        described = self._describe()
        # the largest reply of the problem's own sizes is a trial's (its outputs and its inputs):
        # the first arena is made that large (a second, larger one would be held beside it)
        self.arena_floor = described["input_bytes"] + described["output_bytes"] + (1 << 20)
        own_bytes = self.own_bytes = described["input_bytes"] + described["output_bytes"] + described["param_bytes"]
        self.memory.own_bytes = own_bytes
        described["variants"], described["variants_dropped"] = self._choose_variants(cls, init_inputs, own_bytes)
        reply = {"op": "built", "seconds": time.monotonic() - start, "problem": described, "init": init_tree}
        self._release()
        return reply, init_payload

    def trial(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """The reference's outputs, and its inputs after forward, on the inputs of (seed, distribution)."""
        dist = msg["distribution"]
        self._make_room()
        inputs = self.generate(int(msg["seed"]), dist)
        model = self.model_for(dist)
        wide, why = None, None
        if msg.get("float64"):  # on the inputs as made, before forward() may change them
            from tools.worker.float64 import forward64

            wide, why = forward64(self.wide_models, model, inputs, self.device)
        outputs, seconds = self.forward(inputs, poison=False, model=model)
        value = [outputs, inputs, wide] if msg.get("float64") else [outputs, inputs]
        reply = {"op": "outputs", "seconds": seconds, **skipped(why)}
        return self.reply_with(reply, value, int(msg.get("arena_cap") or 0))

    def wide(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """The reference evaluated in float64 on a timing-pool set (slot, seed: a timed call's outputs
        are judged against it, tools/timing/timed_exact.py) or on a trial's set (seed, distribution).
        With `rows`, on those rows of the batch only, and the float32 forward on the same rows beside
        it: [float64 outputs, float32 outputs] (a problem too large for a whole float64 evaluation,
        tools/judge/exact_rows.py); the float64 copy of the model is then not kept. With `host`, in
        host memory, each output cut to the positions drawn from `positions_seed`: [sampled float64
        outputs] (rows that cannot be cut, tools/judge/exact_host.py)."""
        from tools.worker.float64 import batch_rows, forward64, host_sample

        if msg.get("slot") is not None:
            inputs, model = self._pool().get(int(msg["slot"]), int(msg["seed"])), self.model
        else:
            self._make_room()
            dist = str(msg["distribution"])
            inputs, model = self.generate(int(msg["seed"]), dist), self.model_for(dist)
        if msg.get("host"):
            sample, why = host_sample(self.host_models, model, inputs, int(msg["positions_seed"]), int(msg["count"]),
                                      self.device)
            del inputs
            return self.reply_with({"op": "wide", **skipped(why)}, [sample], int(msg.get("arena_cap") or 0))
        rows = msg.get("rows")
        if rows is None:
            wide, why = forward64(self.wide_models, model, inputs, self.device)
            return self.reply_with({"op": "wide", **skipped(why)}, [wide],
                                   int(msg.get("arena_cap") or 0))
        sliced, why = batch_rows(inputs, rows, int(msg["batch"]), msg.get("cut"))
        del inputs
        wide = narrow = None
        if sliced is not None:
            wide, why = forward64({}, model, sliced, self.device)
            if wide is not None:
                narrow, _ = self.forward(sliced, poison=False, model=model)
        return self.reply_with({"op": "wide", **skipped(why)}, [wide, narrow],
                               int(msg.get("arena_cap") or 0))

    def profile(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """GPU time per kernel name in one eager forward on the problem's inputs of `seed`: the
        library kernels the problem itself uses (tools/timing/library.py)."""
        from tools.worker.profile import kernel_times

        self._make_room()
        times = kernel_times(self.model, self.generate(int(msg["seed"]), "problem"), self.device)
        return {"op": "profiled", "kernels_us": times}, b""

    def variant_init(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """The constructor's arguments of held-out variant K, for the candidate's ModelNew."""
        from tools.wire.transport import encode

        tree, blob = encode(self._variant_init(self.variants[int(msg["index"])]))
        return {"op": "variant_init", "init": tree}, blob

    def inputs(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """Input sets for a candidate: [[slot or None, seed, distribution], ...]. A slot names a
        set of the timing pool (made as the eager arm will use it); None, a fresh set."""
        if any(slot is None for slot, _, _ in msg["sets"]):
            self._make_room()
        sets = [self._pool().get(int(slot), int(seed)) if slot is not None else self.generate(int(seed), dist)
                for slot, seed, dist in msg["sets"]]
        return self.reply_with({"op": "inputs"}, sets, int(msg.get("arena_cap") or 0))

    def time(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """Timed calls of the eager model ("model") or torch.compile ("compiled") on pool slots."""
        key = msg.get("fn") or "model"
        fn = self._compiled() if key == "compiled" else self.model
        warmed = 0
        if msg.get("warmup_seed") is not None:  # warmed up first, and its set let go before the timed sets are made
            self._make_room()
            warmup = self.generate(int(msg["warmup_seed"]), "problem")
            warmed = int(self.timed_calls(fn, key, warmup, [], {})[0]["warmup_calls"])
            del warmup
        sets = [self._pool().get(int(slot), int(seed)) for slot, seed in msg["calls"]]
        reply, payload = self.timed_calls(fn, key, None, sets, msg)
        reply["warmup_calls"] = warmed
        return reply, payload

    def ceilings(self, msg: dict[str, Any], payload: bytes) -> Reply:
        from tools.worker.cost import measure_ceilings

        return {"op": "ceilings", "ceilings": measure_ceilings(self.device)}, b""

    # helpers ----------------------------------------------------------------------------
    def _variant_init(self, variant: Any) -> list[Any]:
        from tools.worker.inputs import call_factory
        from tools.worker.variants import applied, scale_floats

        with applied(self.problem, variant):
            return scale_floats(call_factory(self.get_init_inputs, "get_init_inputs", None), variant.float_scale)

    def _choose_variants(self, cls: Any, init_inputs: list[Any], own_bytes: int
                         ) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
        """The held-out variants the reference accepts: every declared one, or the first smaller
        and the first larger derived one (a larger one only within the memory bound of
        tools/worker/variant_bytes.py, `own_bytes` being the problem's); and why the others were
        not used (tools/worker/variants.py)."""
        import torch

        from tools.worker import variant_bytes as vb
        from tools.worker import variants as v

        try:
            tried = v.candidates(self.problem, Path(self.config["problem"]).read_text())
        except v.VariantError as exc:
            raise Failure("compile_error", str(exc)) from None
        if tried is None:
            return [], [{"variant": "any", "why": f"the problem declares its shapes fixed ({v.DECLARED} = [])"}]
        if not any(isinstance(x, float) for x in init_inputs):
            for variant in tried:
                variant.float_scale = 1.0  # nothing to scale: say nothing of it
        own_inputs = self.generate(self.config["probe_seed"], "problem")
        with torch.no_grad():
            own_finite = v.finite(self.model(*own_inputs))
        built: dict[int, tuple[Any, vb.Footprint]] = {}

        def build(variant: Any) -> tuple[list[Any], list[Any], bool]:
            from tools.worker.inputs import generate

            init = self._variant_init(variant)
            with v.applied(self.problem, variant):
                inputs = generate(self.get_inputs, self.config["probe_seed"], "problem", self.device, self.dtype)
            # built and run as a candidate is, from the constructor's arguments and the inputs
            # alone: a Model or forward that reads the module's sizes itself makes a variant no
            # candidate could follow, so the reference failing here drops it
            model = construct(cls, init, self.config["init_seed"], self.device, self.dtype)
            with torch.no_grad():
                outputs = model(*inputs)
            built[id(variant)] = (model, vb.footprint(model, inputs, outputs))
            return init, inputs, v.finite(outputs) or not own_finite

        dropped: list[dict[str, str]] = []
        held: set[bool] = set()  # the kinds of derived variant held out already (larger or not)
        for variant in tried:
            if variant.origin == "derived" and variant.larger in held:
                continue
            if not variant.sizes and variant.float_scale == 1.0:
                dropped.append({"variant": "any", "why": "the problem has no module-level sizes and no floating constructor "
                                                         f"arguments to vary (a problem may declare {v.DECLARED})"})
                continue
            why = self._beyond_bound(cls, variant, own_bytes) if variant.larger else None
            if why is None:
                why = v.accepted(build, variant, (init_inputs, own_inputs))
            if why is None and variant.larger:
                why = vb.over_bound(built[id(variant)][1].total, own_bytes)
            model, took = built.pop(id(variant), (None, None))
            if why is not None:
                dropped.append({"variant": variant.describe(), "why": why})
                continue
            assert took is not None  # measured with the model above
            variant.bytes = {"inputs": took.inputs, "outputs": took.outputs}
            self.variant_models[len(self.variants)] = model
            self.variants.append(variant)
            if variant.origin == "derived":
                held.add(variant.larger)
        return [x.to_dict() for x in self.variants], dropped

    def _beyond_bound(self, cls: Any, variant: Any, own_bytes: int) -> str | None:
        """Why a larger variant would take too much memory, judged on the meta device before
        anything is allocated at its sizes; None if it fits."""
        import torch

        from tools.worker import variant_bytes as vb
        from tools.worker.inputs import call_factory
        from tools.worker.variants import applied, scale_floats

        meta = torch.device("meta")

        def make_init() -> list[Any]:
            with applied(self.problem, variant):
                return scale_floats(call_factory(self.get_init_inputs, "get_init_inputs", meta), variant.float_scale)

        def make_inputs() -> list[Any]:
            with applied(self.problem, variant):
                return call_factory(self.get_inputs, "get_inputs", meta)

        try:
            need = vb.estimate(make_init, make_inputs, cls)
        except Exception as exc:  # noqa: BLE001 - a problem that cannot run on shapes alone is an answer, not a fault
            first = str(exc).splitlines()[0] if str(exc) else ""
            return ("the reference fails on it, or cannot run on shapes alone to bound its memory before allocating "
                    f"it (on the meta device: {type(exc).__name__}: {first})")
        return vb.over_bound(need.total, own_bytes)

    def _pool(self):
        from tools.worker.timing import InputPool

        if self.pool is None:
            self.pool = InputPool(lambda seed: self.generate(seed, "problem"))
        return self.pool

    def _make_room(self) -> None:
        """Before a fresh set is made: let the timing pool's sets go when they are large (over
        POOL_KEEP_BYTES; made again in milliseconds on the GPU when timing needs them), so that a
        trial holds its own set, not the pool's beside it."""
        if self.pool is not None and self.pool.held_bytes() > POOL_KEEP_BYTES:
            self.pool.clear()

    def _release(self) -> None:
        """Give the memory torch's allocator keeps cached back to the device, after building
        (probe runs at the problem's sizes, larger variants): the candidate's worker needs it,
        and this process's allocator would keep it reserved for good otherwise."""
        import torch

        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _compiled(self):
        import torch

        if self.compiled is None:
            self.compiled = torch.compile(self.model)  # default mode: the baseline users know
        return self.compiled

    def _describe(self) -> dict[str, Any]:
        """What the parent needs to know about the problem: inputs, outputs, ops."""
        import torch

        from tools.worker.cost import count_flops, dtype_key, problem_dtype
        from tools.worker.inputs import describe, tensor_bytes
        from tools.worker.instrument import OpRecorder

        inputs = self.generate(self.config["probe_seed"], "problem")
        with torch.no_grad(), OpRecorder() as rec:
            outputs = self.model(*inputs)
        outs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        params = [t for t in list(self.model.parameters()) + list(self.model.buffers())]
        flops = count_flops(self.model, inputs)
        tensors = [t for t in [*inputs, *outs, *params] if isinstance(t, torch.Tensor)]
        return {
            "inputs": describe(inputs),
            "outputs": describe(outs),
            "init_args": describe(list(self.get_init_inputs())),
            "ops": dict(rec.ops),
            "input_bytes": tensor_bytes(inputs),
            "output_bytes": tensor_bytes(outs),
            "param_bytes": tensor_bytes(params),
            "flops": flops,
            "dtype": dtype_key(problem_dtype(tensors)),
        }
