"""Forges its output's node in a trial's reply, after switching the in-process hooks off: values
the parent's decoder turned into an exception of its own rather than a refusal, so a wrong kernel
got verdict `error` (an evaluator fault, masked from training) instead of a verdict on itself.
The constructor's `arg` names the forgery: "float" (a float scalar beyond any float: OverflowError)
or "span" (an empty tensor whose strides overflow: RuntimeError in torch.empty). Found by an
attacker helper in stop 29; the reply must be refused as malformed."""
import _thread

import torch
import torch.nn as nn
import tools.transport

NODES = {
    "float": {"t": "scalar", "kind": "float", "value": 10**400},
    "span": {"t": "tensor", "plain": True, "dtype": "float32", "shape": [0, 2**62, 2**62], "bytes": [0, 0]},
}


def disarm():
    for cell in _thread.start_new_thread.__closure__ or ():
        if hasattr(cell.cell_contents, "armed"):
            cell.cell_contents.armed = False
            cell.cell_contents.violations.clear()


def forge(node):
    original = tools.transport.encode

    def encode(value, arena=None, hold=False):
        tree, payload = original(value, arena, hold)
        items = tree.get("items") if isinstance(tree, dict) else None
        if items and len(items) == 2 and items[0].get("t") == "tensor":
            items[0] = node
        return tree, payload

    tools.transport.encode = encode


class ModelNew(nn.Module):
    def __init__(self, what, arg):
        super().__init__()
        self.node = NODES[arg]

    def forward(self, x):
        disarm()
        forge(self.node)
        return torch.full_like(x, 123.0)  # wrong: the verdict must still be the candidate's
