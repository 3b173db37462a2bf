"""Configuration of `ratchet optimize`: command line over environment over a config file over defaults.

Each setting has one name used everywhere: the command-line flag `--max-attempts`, the
environment variable `RATCHET_MAX_ATTEMPTS`, the key `max_attempts` in the `[optimize]` table of
the config file. The model endpoint also reads the OpenAI SDK's own variables:
`OPENAI_BASE_URL` and `OPENAI_API_KEY` (`RATCHET_BASE_URL` / `RATCHET_API_KEY` win over them).

The config file is TOML: `--config PATH`, else `$RATCHET_CONFIG`, else `./ratchet.toml` when
present. Settings may sit at the top level or in an `[optimize]` table (the table wins). A
`[prices]` table prices models (agent/cost.py); `price` prices the model in use.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.cost import Price, PriceError, parse_price, parse_table, price_for
from tools.options import SANDBOX_MODES
from tools.precision import PRECISIONS

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser from PyPI (pyproject.toml requires tomli there)
    import tomli as tomllib


class ConfigError(Exception):
    """A bad value in the environment or the config file; str() is one line."""


@dataclass
class AgentConfig:
    # the model endpoint
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    request_timeout_s: float = 120.0  # one HTTP request; a timed-out request is tried twice in all (docs/model.md)
    heartbeat_s: float = 30.0  # a "waiting on the model" line this often while a request is out (0: none)
    temperature: float | None = None
    max_completion_tokens: int | None = None  # per reply; None: the server's default
    # the one retry policy (tests shrink the delays)
    retry_attempts: int = 6
    retry_base_s: float = 1.0
    retry_max_s: float = 60.0
    # the problem and the evaluator
    entry: str = "Model"
    language: str = "triton"  # triton | cuda
    device: str | None = None  # None: cuda:0 when there is a GPU, else cpu (Triton interpreter)
    trials: int = 5
    precision: str = "fp32"  # fp32 | tf32 | bf16 | fp16 (tools/precision.py): the baselines', workers' and policy's arithmetic
    sandbox: str = "required"  # required | best-effort: how candidates' workers are confined (tools/sandbox/)
    workspace: str | None = None  # the root; None: $RATCHET_WORKSPACE (read below), else ./workspaces
    gpu: str | None = None  # the target named in the system prompt; None: ask the device
    # control: decide stops at the first budget spent
    max_attempts: int = 20  # evaluated attempts and malformed replies
    max_tokens: int = 2_000_000  # prompt + completion tokens over the whole run
    max_wall_s: float = 4 * 3600.0
    patience: int = 8  # stop after this many attempts without a new best (0: never)
    # the search (agent/loop/beam.py): candidates per step, judged at once, and the lineages kept
    width: int = 1  # candidates per step: one conversation each (a lineage), asked and judged concurrently
    beam: int = 0  # the best lineages carried to the next step, each forked to fill the width; 0: half the width
    # a wide step's lineages send their next requests as soon as they are judged, before the fan-in
    # (agent/loop/ahead.py): the model and the GPU overlap across steps, for the tokens of requests not used
    ahead: bool = False
    roofline_target: float = 0.9  # stop when the best (faster than eager) reaches this fraction of the roofline floor; 0: never
    memory_roofline_target: float = 0.8  # the same for a memory-bound problem (the record's roofline.bound)
    stop_untimed: bool = True  # where nothing is timed (a CPU), the first correct kernel ends the run
    context_tokens: int = 32_000  # budget of one request's messages (approximate tokens)
    auxiliary_tools: bool = True  # offer get_best, diff_against_best, get_profile (and get_ncu_profile)
    max_aux_rounds: int = 4  # auxiliary-only turns in a row before it counts as a malformed reply
    max_counter_calls: int = 3  # get_ncu_profile calls per run (Nsight Compute, seconds of GPU each); 0: not offered
    keep_reasoning: bool = False  # send earlier reasoning text back to the model
    # cost (agent/cost.py): the model in use's price, INPUT,OUTPUT[,CACHED_INPUT] dollars per million
    # tokens; it wins over the config file's [prices] table. None: the table's, else no price
    price: str | None = None

    def sources(self) -> dict[str, str]:
        return dict(getattr(self, "_sources", {}))

    def settle(self, name: str, value: Any, origin: str) -> None:
        """Set a value decided after loading (the model an endpoint lists), naming where it came from."""
        setattr(self, name, value)
        object.__setattr__(self, "_sources", {**self.sources(), name: origin})

    def price_table(self) -> dict[str, Price]:
        """The config file's [prices] table (model name -> Price); empty without one."""
        return dict(getattr(self, "_prices", {}))

    def model_price(self, model: str | None = None) -> Price | None:
        """The price of `model` (default: the configured one): the `price` setting, else the table's
        entry, else None ("no price"; always None for the built-in policy). ConfigError where the
        table names a model like it but not it (a typo)."""
        table = self.price_table()
        try:
            setting = parse_price(self.price, self.sources().get("price", "price")) if self.price else None
            return price_for(model or self.model or "", table, setting,
                             table_origin=getattr(self, "_prices_origin", ""))
        except PriceError as exc:
            raise ConfigError(str(exc)) from None


FIELDS = {f.name: f for f in dataclasses.fields(AgentConfig)}
CHOICES = {"language": ("triton", "cuda"), "sandbox": SANDBOX_MODES, "precision": PRECISIONS}
SECRET = {"api_key"}


def env_name(name: str) -> str:
    return f"RATCHET_{name.upper()}"


def _convert(name: str, value: Any, origin: str) -> Any:
    kind = FIELDS[name].type
    try:
        if value is None:
            return None
        if "bool" in kind:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if kind.startswith("int"):
            if isinstance(value, bool):
                raise ValueError(f"not an integer: {value!r}")
            return int(value)
        if kind.startswith("float"):
            return float(value)
        text = str(value)
        if name in CHOICES and text not in CHOICES[name]:
            raise ValueError(f"{text!r} is not one of {', '.join(CHOICES[name])}")
        return text
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: bad value for {name}: {exc}") from None


def _config_file(explicit: str | None, env: Mapping[str, str]) -> Path | None:
    path = explicit or env.get("RATCHET_CONFIG")
    if path:
        if not Path(path).is_file():
            raise ConfigError(f"config file {path} not found")
        return Path(path)
    default = Path("ratchet.toml")
    return default if default.is_file() else None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from None


def _file_prices(path: Path) -> dict[str, Price]:
    """The file's [prices] table (agent/cost.py), checked entry by entry."""
    data = _read_file(path)
    if "prices" not in data:
        return {}
    try:
        return parse_table(data["prices"], f"config file {path}")
    except PriceError as exc:
        raise ConfigError(str(exc)) from None


def _file_values(path: Path) -> dict[str, Any]:
    data = _read_file(path)
    values = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = sorted(k for k, v in data.items() if isinstance(v, dict) and k not in ("optimize", "prices"))
    if tables:
        raise ConfigError(f"config file {path}: unknown table [{tables[0]}] (settings go at the top or under [optimize]; "
                          f"prices under [prices])")
    table = data.get("optimize", {})
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: [optimize] must be a table")
    values.update(table)
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError(f"config file {path}: unknown setting(s) {', '.join(unknown)}")
    return values


def load_config(cli: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None,
                config_file: str | None = None) -> AgentConfig:
    """Merge the four layers. `cli` holds the flags given (None for a flag not given)."""
    env = os.environ if env is None else env
    layers: list[tuple[str, dict[str, Any]]] = []
    path = _config_file(config_file, env)
    prices: dict[str, Price] = {}
    if path is not None:
        layers.append((f"config file {path}", _file_values(path)))
        prices = _file_prices(path)
    from_env: dict[str, Any] = {}
    for sdk_name, name in (("OPENAI_BASE_URL", "base_url"), ("OPENAI_API_KEY", "api_key")):
        if env.get(sdk_name):
            from_env[name] = env[sdk_name]
    for name in FIELDS:
        if env.get(env_name(name)):
            from_env[name] = env[env_name(name)]
    layers.append(("environment", from_env))
    layers.append(("command line", {k: v for k, v in (cli or {}).items() if k in FIELDS and v is not None}))

    config = AgentConfig()
    sources = {name: "default" for name in FIELDS}
    for origin, values in layers:
        for name, value in values.items():
            setattr(config, name, _convert(name, value, origin))
            sources[name] = origin
    object.__setattr__(config, "_sources", sources)
    object.__setattr__(config, "_prices", prices)
    object.__setattr__(config, "_prices_origin", f"config file {path}" if path is not None else "")
    _check(config)
    return config


def _check(config: AgentConfig) -> None:
    positive = ("max_attempts", "max_tokens", "context_tokens", "trials", "retry_attempts", "width")
    for name in positive:
        if getattr(config, name) < 1:
            raise ConfigError(f"{name} must be at least 1 (from {config.sources()[name]})")
    for name in ("max_wall_s", "request_timeout_s"):
        if getattr(config, name) <= 0:
            raise ConfigError(f"{name} must be positive (from {config.sources()[name]})")
    if not math.isfinite(config.request_timeout_s):
        raise ConfigError(f"request_timeout_s must be a finite number of seconds (from "
                          f"{config.sources()['request_timeout_s']})")
    if not (math.isfinite(config.heartbeat_s) and config.heartbeat_s >= 0):
        raise ConfigError(f"heartbeat_s must be a finite number of seconds, 0 or more (from "
                          f"{config.sources()['heartbeat_s']})")
    if not 0 <= config.beam <= config.width:
        raise ConfigError(f"beam must be between 0 (half the width) and the width, {config.width} (from "
                          f"{config.sources()['beam']})")
    if config.patience < 0:
        raise ConfigError(f"patience must be 0 (never stop for it) or more (from {config.sources()['patience']})")
    if config.max_counter_calls < 0:
        raise ConfigError(f"max_counter_calls must be 0 (get_ncu_profile not offered) or more (from "
                          f"{config.sources()['max_counter_calls']})")
    if config.base_url is not None:
        parts = urllib.parse.urlsplit(str(config.base_url))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"base_url {config.base_url!r} is not an http(s) URL (from {config.sources()['base_url']})")
    if config.price is not None:
        try:
            parse_price(config.price, config.sources()["price"])
        except PriceError as exc:
            raise ConfigError(str(exc)) from None
    for name in ("roofline_target", "memory_roofline_target"):  # 0: no roofline stop, as patience 0 is none
        if not 0 <= getattr(config, name) <= 1:
            raise ConfigError(f"{name} must be in [0, 1], 0 for no roofline stop (from {config.sources()[name]})")


def public(config: AgentConfig) -> dict[str, Any]:
    """The settings without secrets, for logs and trajectories."""
    data = dataclasses.asdict(config)
    for name in SECRET:
        if data.get(name):
            data[name] = "***"
    return data


__all__ = ["AgentConfig", "ConfigError", "load_config", "public", "env_name"]
