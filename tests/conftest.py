"""Shared test set-up: kernels run in Triton's interpreter when there is no GPU."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
