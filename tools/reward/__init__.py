"""The evaluator as a reinforcement-learning reward: `make_reward(config)` gives a `KernelReward`
over warm evaluators (tools/reward/kernel_reward.py) or, with `executor="ray"`, a
`RayKernelReward` over a Ray cluster's actors (tools/reward/on_ray.py); both score a completion
by tools/reward/score.py's policy. Nothing heavy is imported until it is used.
"""
from __future__ import annotations

import importlib
from dataclasses import asdict
from typing import Any

_LAZY = {"KernelReward": "tools.reward.kernel_reward", "RayKernelReward": "tools.reward.on_ray",
         "RewardConfig": "tools.reward.score", "RewardOutcome": "tools.reward.score"}


def make_reward(config: Any = None, **fields: Any) -> Any:
    """The reward a config asks for, for trainer configs that take a factory: a `KernelReward`, or
    with `executor="ray"` a `RayKernelReward` (same signature and outcomes). `fields` override the
    config's (`make_reward(device="cpu")` is `RewardConfig(device="cpu")`)."""
    from tools.reward.score import RewardConfig

    config = config or RewardConfig()
    if fields:
        config = RewardConfig(**{**asdict(config), **fields})
    if config.executor == "ray":
        from tools.reward.on_ray import RayKernelReward

        return RayKernelReward(config)
    from tools.reward.kernel_reward import KernelReward

    return KernelReward(config)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tools.reward' has no attribute {name!r}")


__all__ = ["KernelReward", "RayKernelReward", "RewardConfig", "RewardOutcome", "make_reward"]
