"""The workers' bytecode cache (tools/processes/bytecode.py): where torch has no .pyc beside its sources, the
reference worker writes them beside the evaluator's cache and candidates' workers read them; the
verdicts are the same. The attack on it is in tests/sandbox/test_sandbox_attacks.py."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers_eval import PROBLEMS, assert_ok, options, source
from tools import Evaluator, Verdict
from tools.processes.bytecode import prefix_for, torch_has_bytecode


def test_workers_share_one_bytecode_cache_and_verdicts_do_not_change(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    prefix = tmp_path / "cache-bytecode"
    with Evaluator(PROBLEMS / "elementwise.py", options(cache, bytecode_cache="on")) as ev:
        assert ev.spawner.bytecode == prefix
        assert_ok(ev.evaluate(source("elementwise_ok")))
        assert ev.evaluate(source("wrong_shape")).verdict is not Verdict.OK
    # by the reference worker, as it imported torch (the prefix mirrors the source's directory)
    assert list(prefix.rglob(f"torch/__init__.{sys.implementation.cache_tag}.pyc"))
    assert not list(prefix.rglob("elementwise*"))  # the problem's own file: never (later candidates read it)
    with Evaluator(PROBLEMS / "elementwise.py", options(cache, bytecode_cache="on")) as ev:
        r = ev.evaluate(source("elementwise_ok"))  # a second evaluator: the same cache, the same verdict
    assert_ok(r)


def test_no_cache_where_torch_has_bytecode_or_it_is_off(tmp_path: Path) -> None:
    if torch_has_bytecode():  # a pip install compiles it: the usual case, where "auto" does nothing
        assert prefix_for(tmp_path / "c", "auto", protected=True) is None
    assert prefix_for(tmp_path / "c", "off", protected=True) is None
    assert prefix_for(tmp_path / "c", "on", protected=False) is None  # a candidate could plant bytecode
    assert prefix_for(tmp_path / "c", "on", protected=True) == tmp_path / "c-bytecode"
    (tmp_path / "d-bytecode").write_text("a file where the directory would go")
    assert prefix_for(tmp_path / "d", "on", protected=True) is None  # cannot be made: no cache, no failure
    with pytest.raises(ValueError, match="bytecode_cache='yes'"):
        prefix_for(tmp_path / "c", "yes", protected=True)
