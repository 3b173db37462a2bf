"""Answers its build with a forged reply that says its CUDA extensions were found built
({"cuda": {"cached": 1}}) without the seconds the load took, then stalls; its forward() is wrong.
Before, the parent read the missing field and raised: an evaluator fault (verdict `error`, a
masked reward) for a kernel that is plainly wrong. Malformed input to the parent is the
candidate's doing."""
import _thread
import json
import os
import struct
import sys
import time

import torch
import torch.nn as nn


def forge():
    for cell in _thread.start_new_thread.__closure__ or ():
        if hasattr(cell.cell_contents, "armed"):
            cell.cell_contents.armed = False
    frame = sys._getframe()
    while frame.f_code.co_name != "serve":
        frame = frame.f_back
    header = json.dumps({"op": "built", "nonce": frame.f_locals["msg"]["nonce"], "cuda": {"cached": 1}}).encode()
    os.write(int(sys.argv[2]), struct.pack(">I", len(header)) + header)
    while True:
        time.sleep(3600)


class ModelNew(nn.Module):
    def __init__(self, what, arg):
        super().__init__()
        forge()

    def forward(self, x):
        return torch.zeros_like(x)
