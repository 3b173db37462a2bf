"""Stops reading requests: switches the in-process hooks off, answers the build request itself
with a forged reply (the nonce read from the worker's frame), shrinks its request pipe to one
page and sleeps. The parent's next request must not block it for ever."""
import _thread
import fcntl
import json
import os
import struct
import sys
import time

import torch.nn as nn


def stall():
    for cell in _thread.start_new_thread.__closure__ or ():
        if hasattr(cell.cell_contents, "armed"):
            cell.cell_contents.armed = False
    frame = sys._getframe()
    while frame.f_code.co_name != "serve":
        frame = frame.f_back
    nonce = frame.f_locals["msg"]["nonce"]
    fcntl.fcntl(int(sys.argv[1]), 1031, 4096)  # F_SETPIPE_SZ
    header = json.dumps({"op": "built", "seconds": 0.0, "cuda": {}, "nonce": nonce, "violations": []}).encode()
    os.write(int(sys.argv[2]), struct.pack(">I", len(header)) + header)
    while True:
        time.sleep(3600)


class ModelNew(nn.Module):
    def __init__(self, what, arg):
        super().__init__()
        stall()

    def forward(self, x):
        return x
