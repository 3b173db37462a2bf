"""From a user's model to problem files: `ratchet extract` (docs/extract.md).

`load.py` resolves the model and its example inputs, `profile.py` runs one profiled forward and
attributes its time to module paths, `source.py` writes one module as a self-contained problem
file (checked against the module itself), `manifest.py` picks, merges and records the hot ones. `ratchet apply` puts the kept kernels back:
`apply.py` (found, checked, timed) and `recipe.py` (the importable patch it writes).
"""
