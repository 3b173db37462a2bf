"""Which model a run talks to: chosen by its name, never by which keys happen to be exported.

- A name given (`--model`, `RATCHET_MODEL`, `model` in the config file): that model. `builtin`
  is the built-in offline policy; any other name needs an endpoint (a base URL, or an API key
  for the OpenAI API itself).
- No name, but an endpoint (`--base-url`, `OPENAI_BASE_URL`, `RATCHET_BASE_URL`, `base_url`):
  the endpoint's `GET /models` list decides. One model listed: that one (one line says so).
  None or several: one line says a name is needed, listing a few (`NoModelNamed`).
- No name and no endpoint: the built-in policy, whatever API keys are set (one line says so,
  and that the key is ignored). Most ML engineers have `OPENAI_API_KEY` exported; it must not
  turn the quick start into a usage error.

`choose_model` settles `config.model` once; the commands (optimize, batch) call it before
anything else is started, and a batch passes the settled name to its workers. `model_client`
makes the client for one problem (the one factory: `ratchet optimize` and every batch worker).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from agent.config import AgentConfig

if TYPE_CHECKING:  # the model clients import openai: only when a run starts
    from agent.model import ModelClient, OpenAIChatClient

BUILTIN = "builtin"
LISTED = 5  # names shown when an endpoint lists several


class NoModelNamed(Exception):
    """A model name is needed and none can be chosen; str() is one line (a usage error)."""


def choose_model(config: AgentConfig, log: Callable[[str], None], *,
                 env: Mapping[str, str] | None = None) -> str:
    """Settle `config.model` (see the module's docstring) and return it, once its price is known
    (agent/cost.py: a line says when it has none). Raises NoModelNamed, agent.config.ConfigError (a
    price table naming a model like it, a typo), or agent.model.ModelUnreachable when the endpoint's
    list cannot be read at all."""
    name = _choose(config, log, env=env)
    # ConfigError: a typo in the price table. A table that prices other models only is said in a line;
    # with no prices configured at all, the run's summary says "no price" (no line for every run)
    if name != BUILTIN and config.model_price(name) is None and config.price_table():
        from agent.cost import no_price_line

        log(no_price_line(name, config.price_table(), getattr(config, "_prices_origin", "") or "the config file"))
    return name


def _choose(config: AgentConfig, log: Callable[[str], None], *, env: Mapping[str, str] | None = None) -> str:
    if config.model:
        if config.model != BUILTIN and not (config.base_url or config.api_key):
            raise NoModelNamed(f"model {config.model!r} (from {config.sources().get('model', 'the settings')}) has no "
                               f"endpoint: pass --model NAME --base-url URL (or set RATCHET_MODEL with "
                               f"OPENAI_BASE_URL), or set OPENAI_API_KEY for the OpenAI API; --model builtin is the "
                               f"built-in policy")
        return config.model
    if config.base_url:
        name = _only_listed(config, log)
        config.settle("model", name, f"the only model {config.base_url} lists")
        log(f"no model named (--model/RATCHET_MODEL): using {name}, the only model {config.base_url} lists")
        return name
    config.settle("model", BUILTIN, "default: no model named")
    key = key_origin(config, os.environ if env is None else env)
    log("no model named (--model/RATCHET_MODEL): using the built-in policy" + (f"; {key} is ignored" if key else ""))
    return BUILTIN


def _only_listed(config: AgentConfig, log: Callable[[str], None]) -> str:
    from agent.model import ModelRefused, RetryPolicy, list_models

    base_url = config.base_url or ""
    retry = RetryPolicy(attempts=config.retry_attempts, base_s=config.retry_base_s, max_s=config.retry_max_s)
    try:
        names = list_models(base_url, config.api_key, timeout_s=config.request_timeout_s, retry=retry, log=log)
    except ModelRefused as exc:  # no /models route, or the key is refused: a name would be needed anyway
        raise NoModelNamed(f"no model named (--model/RATCHET_MODEL), and {exc}: pass --model NAME") from None
    if len(names) == 1:
        return names[0]
    if not names:
        raise NoModelNamed(f"no model named (--model/RATCHET_MODEL), and {base_url} lists no model: pass --model NAME")
    shown = ", ".join(names[:LISTED]) + (f", ... ({len(names) - LISTED} more)" if len(names) > LISTED else "")
    raise NoModelNamed(f"no model named (--model/RATCHET_MODEL), and {base_url} lists {len(names)}: {shown}; "
                       f"pass --model NAME")


def key_origin(config: AgentConfig, env: Mapping[str, str]) -> str | None:
    """Where the configured API key came from, as a user would name it (None: no key)."""
    if not config.api_key:
        return None
    origin = config.sources().get("api_key", "")
    if origin == "environment":
        return next((name for name in ("RATCHET_API_KEY", "OPENAI_API_KEY") if env.get(name)), "the API key")
    if origin.startswith("config file"):
        return f"api_key in the {origin}"
    return "the API key"


def uses_builtin(config: AgentConfig) -> bool:
    """The built-in offline policy: `--model builtin`, which choose_model settles on when no model is named."""
    return config.model == BUILTIN


def model_client(config: AgentConfig, module: Path, log: Callable[[str], None] | None = None) -> ModelClient:
    """The model for one problem (chosen by name: agent.model_choice): an OpenAI-compatible endpoint,
    or the built-in offline policy (agent/builtin; it reads the problem module to recognize what it
    can write). Raises NoModelNamed, ModelError."""
    log = log or _stderr
    choose_model(config, log)
    if uses_builtin(config):
        from agent.builtin import BuiltinPolicy  # torch: it reads the problem module

        return BuiltinPolicy(module, entry=config.entry, precision=config.precision)
    return endpoint_client(config, log)


def endpoint_client(config: AgentConfig, log: Callable[[str], None] | None = None) -> OpenAIChatClient:
    """The configured OpenAI-compatible endpoint (config.model settled by choose_model)."""
    from agent.model import OpenAIChatClient, RetryPolicy

    return OpenAIChatClient(model=config.model or "", base_url=config.base_url, api_key=config.api_key,
                            timeout_s=config.request_timeout_s, temperature=config.temperature,
                            max_completion_tokens=config.max_completion_tokens, log=log or _stderr,
                            heartbeat_s=config.heartbeat_s,
                            retry=RetryPolicy(attempts=config.retry_attempts, base_s=config.retry_base_s,
                                              max_s=config.retry_max_s))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
