"""The environment of a scripted agent run on the CPU (tests/loop, tests/learn): nothing from the
caller's shell (no endpoint, key, config or workspace), Triton's interpreter on the CPU, few trials,
fast model retries."""
from __future__ import annotations

from typing import Any

UNSET = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RATCHET_CONFIG", "RATCHET_MODEL", "RATCHET_BASE_URL", "RATCHET_WORKSPACE")


def agent_env(**overrides: str) -> dict[str, str]:
    """The variables a scripted run sets, with `overrides` (RATCHET_TRIALS="1", say)."""
    return {"TRITON_INTERPRET": "1", "RATCHET_DEVICE": "cpu", "RATCHET_TRIALS": "2", "RATCHET_RETRY_ATTEMPTS": "3",
            "RATCHET_RETRY_BASE_S": "0.01", "RATCHET_RETRY_MAX_S": "0.05", **overrides}


def quiet_agent_env(monkeypatch: Any, *also_unset: str, **overrides: str) -> None:
    """Set agent_env(**overrides) with `monkeypatch` (a pytest.MonkeyPatch), after unsetting UNSET and `also_unset`."""
    for name in (*UNSET, *also_unset):
        monkeypatch.delenv(name, raising=False)
    for key, value in agent_env(**overrides).items():
        monkeypatch.setenv(key, value)
