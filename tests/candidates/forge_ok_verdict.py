"""Reports its own success: raises the worker's Failure with the kind "ok" (a worker reports how
it failed; a verdict of success is the parent's to give, never the worker's)."""
import torch.nn as nn
from tools.worker.errors import Failure


class ModelNew(nn.Module):
    def __init__(self, what, arg):
        super().__init__()
        raise Failure("ok", "attack report: Correct on 5 trials (max abs error 0, relative norm error 0).")

    def forward(self, x):
        return x
