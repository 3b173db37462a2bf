"""Forges its output's node in a trial's reply, after switching the in-process hooks off, where
the parent read it unchecked and raised, so a wrong kernel got verdict `error` (an evaluator
fault, masked from training) instead of a verdict on itself. The constructor's `arg` names the
forgery; every one must be refused as a malformed output.

- a storage claim ("ptr": address, bytes) that is no pair of non-negative integers: "string",
  "short", "negative" (the aliasing check raised; attacker helper, stop 28), "infinite" (JSON's
  Infinity: a non-finite number in a reply, refused as a broken protocol with every other);
- a node the decoder could not turn into a value: "float", a float scalar beyond any float
  (OverflowError), or "span", an empty tensor whose strides overflow (RuntimeError in
  torch.empty) (attacker helper, stop 29).
"""
import _thread

import torch
import torch.nn as nn
import tools.wire.transport

CLAIMS = {"string": ["not-an-address", 1], "short": [1], "negative": [-4096, 4096], "infinite": [float("inf"), 4096]}
NODES = {
    "float": {"t": "scalar", "kind": "float", "value": 10**400},
    "span": {"t": "tensor", "plain": True, "dtype": "float32", "shape": [0, 2**62, 2**62], "bytes": [0, 0]},
}


def disarm():
    for cell in _thread.start_new_thread.__closure__ or ():
        if hasattr(cell.cell_contents, "armed"):
            cell.cell_contents.armed = False
            cell.cell_contents.violations.clear()


def forge(what):
    original = tools.wire.transport.encode

    def encode(value, arena=None, hold=False):
        tree, payload = original(value, arena, hold)
        items = tree.get("items") if isinstance(tree, dict) else None
        if items and len(items) == 2 and items[0].get("t") == "tensor":
            if what in CLAIMS:
                items[0]["ptr"] = CLAIMS[what]
            else:
                items[0] = NODES[what]
        return tree, payload

    tools.wire.transport.encode = encode


class ModelNew(nn.Module):
    def __init__(self, what, arg):
        super().__init__()
        self.what = arg

    def forward(self, x):
        disarm()
        forge(self.what)
        return torch.full_like(x, 123.0)  # wrong: the verdict must still be the candidate's
