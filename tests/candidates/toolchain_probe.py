"""An honest control for the run sandbox: the tools Triton needs (its bundled ptxas, the system C
compiler building a shared object, as Triton's launchers are) run there. It reports their exit
statuses instead of computing anything."""
import os
import subprocess

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, what, arg):
        super().__init__()
        self.ptxas = arg

    def forward(self, x):
        src = os.path.join(os.environ["TMPDIR"], "launcher.c")
        with open(src, "w") as f:
            f.write("int launch(void) { return 42; }\n")
        ptxas = subprocess.run([self.ptxas, "--version"], capture_output=True).returncode
        cc = subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", src, "-o", src + ".so"], capture_output=True)
        raise RuntimeError(f"attack report: ptxas {ptxas} cc {cc.returncode}")
