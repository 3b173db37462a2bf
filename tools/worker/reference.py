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
from tools.worker.worker import Reply, Worker


class ReferenceWorker(Worker):
    role = "reference"

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(config)
        self.problem = load_module(Path(config["problem"]), "ratchet_problem")
        self.get_inputs = getattr(self.problem, "get_inputs", None)
        self.get_init_inputs = getattr(self.problem, "get_init_inputs", lambda: [])
        self.pool: Any = None
        self.compiled: Any = None
        if self.device.type == "cuda":
            from tools.worker.worker import prewarm

            prewarm(self.device)  # the evaluator's own kernels, compiled by trusted code

    def handlers(self):
        return {"build": self.build, "trial": self.trial, "inputs": self.inputs, "time": self.time,
                "ceilings": self.ceilings}

    def generate(self, seed: int, dist: str) -> list[Any]:
        from tools.worker.inputs import generate

        return generate(self.get_inputs, seed, dist, self.device)

    # requests ---------------------------------------------------------------------------
    def build(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """Build the problem's Model; describe the problem; hand over the constructor's arguments
        (a candidate never runs the problem's file)."""
        import torch

        from tools.worker.inputs import call_factory

        start = time.monotonic()
        init_inputs = call_factory(self.get_init_inputs, "get_init_inputs", None)
        cls = getattr(self.problem, self.config["entry"])
        try:
            inspect.signature(cls).bind(*init_inputs)
        except TypeError as exc:
            raise Failure("compile_error", f"{cls.__name__}(*get_init_inputs()) does not fit its constructor: {exc}") from None
        torch.manual_seed(self.config["init_seed"])
        self.model = cls(*init_inputs).to(self.device)
        from tools.transport import encode

        init_tree, init_payload = encode(init_inputs)
        reply = {"op": "built", "seconds": time.monotonic() - start, "problem": self._describe(), "init": init_tree}
        return reply, init_payload

    def trial(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """The reference's outputs, and its inputs after forward, on the inputs of (seed, distribution)."""
        inputs = self.generate(int(msg["seed"]), msg["distribution"])
        outputs, seconds = self.forward(inputs, poison=False)
        return self.reply_with({"op": "outputs", "seconds": seconds}, [outputs, inputs], int(msg.get("arena_cap") or 0))

    def inputs(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """Input sets for a candidate: [[slot or None, seed, distribution], ...]. A slot names a
        set of the timing pool (made as the eager arm will use it); None, a fresh set."""
        sets = [self._pool().get(int(slot), int(seed)) if slot is not None else self.generate(int(seed), dist)
                for slot, seed, dist in msg["sets"]]
        return self.reply_with({"op": "inputs"}, sets, int(msg.get("arena_cap") or 0))

    def time(self, msg: dict[str, Any], payload: bytes) -> Reply:
        """Timed calls of the eager model ("model") or torch.compile ("compiled") on pool slots."""
        key = msg.get("fn") or "model"
        fn = self._compiled() if key == "compiled" else self.model
        warmup = self.generate(int(msg["warmup_seed"]), "problem") if msg.get("warmup_seed") is not None else None
        sets = [self._pool().get(int(slot), int(seed)) for slot, seed in msg["calls"]]
        return self.timed_calls(fn, key, warmup, sets, msg)

    def ceilings(self, msg: dict[str, Any], payload: bytes) -> Reply:
        from tools.roofline import measure_ceilings

        return {"op": "ceilings", "ceilings": measure_ceilings(self.device).to_dict()}, b""

    # helpers ----------------------------------------------------------------------------
    def _pool(self):
        from tools.worker.timing import InputPool

        if self.pool is None:
            self.pool = InputPool(lambda seed: self.generate(seed, "problem"))
        return self.pool

    def _compiled(self):
        import torch

        if self.compiled is None:
            self.compiled = torch.compile(self.model)  # default mode: the baseline users know
        return self.compiled

    def _describe(self) -> dict[str, Any]:
        """What the parent needs to know about the problem: inputs, outputs, ops."""
        import torch

        from tools.roofline import count_flops, dtype_key, problem_dtype
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
