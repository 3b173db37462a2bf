"""The worker zygote: a pre-imported process that workers are forked from (tools/processes/zygote.py
starts it and asks it for workers)."""
