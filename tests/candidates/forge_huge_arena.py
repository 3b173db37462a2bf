"""Answers a trial announcing an output arena of a terabyte: the parent maps what a reply announces,
and its mapping keeps that memory alive after the worker dies, so announcing all the card's free
memory could make the parent's own next allocation fail, turning the candidate's failure into an
evaluator `error` (an attacker helper's design, stop 57). The announcement is refused before the
parent maps anything: the candidate's doing."""
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
    header = json.dumps({"op": "outputs", "nonce": frame.f_locals["msg"]["nonce"], "tree": {"t": "none"},
                         "arena": {"nbytes": 1 << 40, "fd": True}}).encode()
    os.write(int(sys.argv[2]), struct.pack(">I", len(header)) + header)
    while True:
        time.sleep(3600)


class ModelNew(nn.Module):
    def __init__(self, *args):  # any problem's constructor arguments (it is run on two)
        super().__init__()

    def forward(self, *inputs):
        forge()
