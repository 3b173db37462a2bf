"""Answers a trial with a reply whose fields have the wrong types (a violation that is a number,
launches that are a string): malformed input to the parent is the candidate's doing, not an
evaluator fault (which would earn it a neutral, masked reward)."""
import _thread
import json
import os
import struct
import sys
import time

import torch.nn as nn


def forge():
    for cell in _thread.start_new_thread.__closure__ or ():
        if hasattr(cell.cell_contents, "armed"):
            cell.cell_contents.armed = False
    frame = sys._getframe()
    while frame.f_code.co_name != "serve":
        frame = frame.f_back
    header = json.dumps({"op": "outputs", "nonce": frame.f_locals["msg"]["nonce"], "violations": [0],
                         "launches": "many"}).encode()
    os.write(int(sys.argv[2]), struct.pack(">I", len(header)) + header)
    while True:
        time.sleep(3600)


class ModelNew(nn.Module):
    def __init__(self, what, arg):
        super().__init__()

    def forward(self, x):
        forge()
