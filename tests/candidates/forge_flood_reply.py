"""Announces a reply of 32 TiB on the result channel and starts sending it: the parent must
refuse it before buffering any of it."""
import _thread
import json
import os
import struct
import sys
import time

import torch.nn as nn


def flood():
    for cell in _thread.start_new_thread.__closure__ or ():
        if hasattr(cell.cell_contents, "armed"):
            cell.cell_contents.armed = False
    frame = sys._getframe()
    while frame.f_code.co_name != "serve":
        frame = frame.f_back
    header = json.dumps({"op": "outputs", "nonce": frame.f_locals["msg"]["nonce"], "violations": [],
                         "payload_bytes": 1 << 45}).encode()
    os.write(int(sys.argv[2]), struct.pack(">I", len(header)) + header)
    chunk = b"\0" * (1 << 20)
    for _ in range(256):
        os.write(int(sys.argv[2]), chunk)
    while True:
        time.sleep(3600)


class ModelNew(nn.Module):
    def __init__(self, what, arg):
        super().__init__()

    def forward(self, x):
        flood()
