"""What a run costs in dollars: the price table, the price of the model in use, and a turn's cost.

No price is built in: model prices change and differ by provider, so a built-in table would
pretend to be current. The user gives them (docs/config.md, "Prices"):

- a table in the config file, one entry per model name, in US dollars per million tokens:

      [prices."qwen2.5-coder-32b"]
      input = 0.20          # prompt tokens
      output = 0.60         # completion tokens
      cached_input = 0.05   # optional: prompt tokens the server reports as cached

- or the setting `price` for the model in use: `--price 0.20,0.60[,0.05]`, `RATCHET_PRICE`,
  `price = "0.20,0.60"` in the config file (it wins over the table).

A turn costs (prompt - cached) * input + cached * cached_input + completion * output, per
million; without a `cached_input` price, cached tokens cost `input`. The counts are the server's
(`usage`), or ratchet's approximations where it sent none, the same counts as the run's `tokens`.

A model with no price reads "no price" everywhere (never $0). The built-in policy is no model: it
spends no tokens and costs $0, whatever the prices. A price table whose names are all unlike the
model in use is allowed (one table may price several models: a line says the run has no price),
but one that names a model close to it (`qwen2.5-coder-32` for `qwen2.5-coder-32b`, another case,
or the same name behind a provider's prefix) is a typo: `PriceError`, one line, exit 2.
"""
from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NO_PRICE = "no price"
PER = 1_000_000  # prices are per million tokens
DIGITS = 10  # dollars kept to 1e-10: sums read 0.0003314 in a trailer, not 0.00033140000000000003
KEYS = ("input", "output", "cached_input")
BUILTIN = "builtin"  # agent.model_choice.BUILTIN (not imported: this module is imported by agent.config)


class PriceError(ValueError):
    """A malformed price, or a price table naming a model like the one in use but not it; str() is one line."""


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens; `origin` says where it came from (for lines and records)."""

    input: float
    output: float
    cached_input: float | None = None
    origin: str = ""

    def cost(self, prompt: int, completion: int, cached: int = 0) -> float:
        cached = max(0, min(cached, prompt))
        cached_rate = self.input if self.cached_input is None else self.cached_input
        return round(((prompt - cached) * self.input + cached * cached_rate + completion * self.output) / PER, DIGITS)

    def to_dict(self) -> dict[str, Any]:
        return {"input": self.input, "output": self.output, "cached_input": self.cached_input, "from": self.origin}

    def describe(self) -> str:
        cached = "" if self.cached_input is None else f", ${self.cached_input:g} cached input"
        return f"${self.input:g} input, ${self.output:g} output{cached} per million tokens ({self.origin})"


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise PriceError(f"{what} must be a number of dollars per million tokens, not {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise PriceError(f"{what} must be a number of dollars per million tokens, not {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise PriceError(f"{what} must be a finite number of dollars per million tokens, 0 or more, not {value!r}")
    return number


def parse_price(text: Any, origin: str) -> Price:
    """`INPUT,OUTPUT[,CACHED_INPUT]` (dollars per million tokens), the `price` setting."""
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) not in (2, 3) or not all(parts):
        raise PriceError(f"{origin}: bad value for price: {text!r} is not INPUT,OUTPUT[,CACHED_INPUT] "
                         f"(dollars per million tokens, e.g. 0.20,0.60)")
    values = [_number(p, f"{origin}: price's {key}") for p, key in zip(parts, KEYS)]
    return Price(values[0], values[1], values[2] if len(values) == 3 else None, origin)


def parse_table(table: Any, origin: str) -> dict[str, Price]:
    """The `[prices]` table of a config file: model name -> {input, output[, cached_input]}."""
    if not isinstance(table, Mapping):
        raise PriceError(f"{origin}: [prices] must be a table of models, e.g. [prices.\"my-model\"] input = 0.2, output = 0.6")
    out: dict[str, Price] = {}
    for name, entry in table.items():
        where = f"{origin}: [prices.{_quoted(name)}]"
        if not isinstance(entry, Mapping):
            raise PriceError(f"{where} must be a table with input and output (dollars per million tokens), "
                             f"not {entry!r}")
        unknown = sorted(set(entry) - set(KEYS))
        if unknown:
            raise PriceError(f"{where}: unknown key {unknown[0]!r} (the keys are {', '.join(KEYS)})")
        missing = [k for k in ("input", "output") if k not in entry]
        if missing:
            raise PriceError(f"{where}: no {missing[0]} price (input and output are needed, in dollars per million tokens)")
        values = {k: _number(entry[k], f"{where} {k}") for k in KEYS if k in entry}
        out[str(name)] = Price(values["input"], values["output"], values.get("cached_input"), f"{origin} [prices]")
    return out


def _quoted(name: Any) -> str:
    text = str(name)
    return text if text.replace("-", "").replace("_", "").isalnum() else f'"{text}"'


def _plain(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def near_names(model: str, names: list[str]) -> list[str]:
    """Names of a price table that look like `model` without being it: another case or punctuation,
    a provider's prefix (`openai/gpt-x` for `gpt-x`, or the reverse), or a close spelling with the
    same numbers (`qwen2.5-coder-32` for `qwen2.5-coder-32b`; but `llama-3-8b` is another model than
    `llama-3-70b`, not a typo of it: a shared table may price one and not the other)."""
    near = []
    for name in names:
        a, b = _plain(name), _plain(model)
        tail = name.rsplit("/", 1)[-1] == model.rsplit("/", 1)[-1]
        close = re.findall(r"\d+", name) == re.findall(r"\d+", model) and difflib.SequenceMatcher(None, a, b).ratio() >= 0.85
        if a == b or tail or close:
            near.append(name)
    return near


def price_for(model: str, table: Mapping[str, Price], setting: Price | None, *, table_origin: str = "") -> Price | None:
    """The price of `model`: the `price` setting, else its entry in the table, else None (no price).
    Raises PriceError where the table names a model like it but not it (a typo). The built-in policy
    has no price: it spends no tokens (see `run_cost`)."""
    if model == BUILTIN:
        return None
    if setting is not None:
        return setting
    if model in table:
        return table[model]
    near = near_names(model, sorted(table))
    if near:
        raise PriceError(f"{table_origin or 'the config file'}: [prices] has no entry for the model in use, {model!r}, "
                         f"but prices {near[0]!r}: a typo? (name the model exactly as the endpoint does, or price it "
                         f"with --price INPUT,OUTPUT)")
    return None


def no_price_line(model: str, table: Mapping[str, Price], table_origin: str) -> str:
    """The line a run without a price begins with."""
    listed = f"; {table_origin} prices {', '.join(sorted(table)[:5])}" if table else ""
    return (f"no price for model {model!r}{listed}: its cost reads \"{NO_PRICE}\" "
            f"(set one with --price INPUT,OUTPUT or [prices.\"{model}\"] in the config file; docs/config.md)")


def format_usd(value: float | None, *, builtin: bool = False) -> str:
    """`$0.0312`, `$1.25`; None: "no price". Small sums keep three significant digits, never `$0.00`
    for a cost that is not zero."""
    if value is None:
        return NO_PRICE
    if value == 0:
        return "$0"
    if abs(value) < 1:
        return f"${value:.3g}" if abs(value) < 0.01 else f"${value:.4f}".rstrip("0").rstrip(".")
    return f"${value:,.2f}"


def cost_phrase(value: float | None, model: str | None) -> str:
    """A run's cost in a few words: `$0.0123`, `$0 (the built-in policy: no model, no tokens)`, `no price`."""
    if model == BUILTIN:
        return f"{format_usd(value or 0.0)} (the built-in policy: no model, no tokens)"
    return format_usd(value) if value is not None else f"cost: {NO_PRICE} for model {model}"


def sum_costs(costs: list[float | None]) -> float | None:
    """The total of several costs; None ("no price") when any of them has none."""
    if any(c is None for c in costs):
        return None
    return round(sum(c for c in costs if c is not None), DIGITS)




def turn_tokens(turn: Any) -> int:
    """The tokens a model turn (agent.loop.state.TurnUsage) added to the run's count; turns saved
    before the count was kept per turn: the server's counts, else the approximation sent."""
    if isinstance(turn.get("tokens"), int):
        return int(turn["tokens"])
    prompt = turn.get("prompt_tokens")
    return int(prompt if prompt is not None else turn.get("context_tokens") or 0) + int(turn.get("completion_tokens") or 0)


def turn_cost(turn: Any) -> float | None:
    """A turn's dollars; None: no price. A turn saved before costs were kept costs $0 where it spent
    no token (the built-in policy's), else has no price."""
    if "cost_usd" in turn:
        return turn["cost_usd"]
    return 0.0 if turn_tokens(turn) == 0 else None


def spend(turns: Sequence[Any]) -> tuple[int, float | None]:
    """Tokens and dollars of some turns (None: a turn without a price among them)."""
    return sum(turn_tokens(t) for t in turns), sum_costs([turn_cost(t) for t in turns])


__all__ = ["NO_PRICE", "Price", "PriceError", "parse_price", "parse_table", "price_for", "near_names",
           "no_price_line", "format_usd", "cost_phrase", "sum_costs", "turn_tokens", "turn_cost", "spend"]
