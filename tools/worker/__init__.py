"""Code that runs inside a worker process, next to untrusted candidate code.

A worker holds one model: the problem's reference (trusted) or a candidate (untrusted, confined
by the operating system: see tools/sandbox/). Nothing here decides a verdict; a worker reports
what happened and the trusted parent (tools/pipeline.py) judges it. The parent never imports
this package's modules that touch torch state on its behalf: what crosses is frames (tools/wire/protocol.py)
and tensors (tools/wire/transport.py).
"""
