"""agent/cost.py: the price table, the price of the model in use, a turn's dollars, and how
they read (docs/config.md, "Prices"). The CLI's one-line errors are in tests/cli/test_cli_prices.py."""
from __future__ import annotations

import pytest

from agent.config import ConfigError, load_config
from agent.cost import (NO_PRICE, Price, PriceError, cost_phrase, format_usd, near_names, parse_price, parse_table,
                        price_for, spend, sum_costs)
from agent.workspace.attempt import Attempt, parse_trailers
from tools.record import Verdict

TABLE = {"qwen2.5-coder-32b": {"input": 0.2, "output": 0.6, "cached_input": 0.05}, "gpt-x": {"input": 1, "output": 4}}


def config(tmp_path, text: str, **cli):
    path = tmp_path / "ratchet.toml"
    path.write_text(text)
    return load_config(cli, env={}, config_file=str(path)), path


def test_a_turn_costs_input_output_and_cached_input_per_million():
    price = Price(0.2, 0.6, 0.05)
    assert price.cost(1_000_000, 0) == pytest.approx(0.2)
    assert price.cost(0, 1_000_000) == pytest.approx(0.6)
    # 400k of the prompt were cached: 600k at 0.2, 400k at 0.05, 10k out at 0.6
    assert price.cost(1_000_000, 10_000, cached=400_000) == pytest.approx(0.12 + 0.02 + 0.006)
    assert Price(1, 2).cost(1000, 0, cached=500) == pytest.approx(0.001)  # no cached price: cached tokens cost input
    assert price.cost(100, 0, cached=10**9) == pytest.approx(100 * 0.05 / 1e6)  # never more cached than the prompt


def test_the_table_from_the_config_file_and_the_price_setting(tmp_path):
    cfg, path = config(tmp_path, 'model = "qwen2.5-coder-32b"\n[prices."qwen2.5-coder-32b"]\ninput = 0.2\n'
                                 'output = 0.6\ncached_input = 0.05\n[prices.gpt-x]\ninput = 1\noutput = 4\n')
    price = cfg.model_price()
    assert (price.input, price.output, price.cached_input) == (0.2, 0.6, 0.05)
    assert price.origin == f"config file {path} [prices]"
    assert cfg.model_price("gpt-x").output == 4.0
    assert cfg.model_price("another-model") is None  # unlike every name: no price, not an error
    assert cfg.model_price("builtin") is None  # the built-in policy is no model
    # the setting (flag, variable or key) wins over the table, and says where it came from
    cfg, _ = config(tmp_path, '[prices."qwen2.5-coder-32b"]\ninput = 0.2\noutput = 0.6\n', price="1,2,0.5",
                    model="qwen2.5-coder-32b")
    assert cfg.model_price() == Price(1.0, 2.0, 0.5, "command line")
    env_cfg = load_config({}, env={"RATCHET_PRICE": "3,4"})
    assert env_cfg.model_price("m") == Price(3.0, 4.0, None, "environment")


@pytest.mark.parametrize("text, says", [
    ('[prices.m]\ninput = 1\nouput = 2\n', "[prices.m]: unknown key 'ouput'"),
    ('[prices.m]\ninput = 1\n', "[prices.m]: no output price"),
    ('[prices.m]\ninput = -1\noutput = 2\n', "[prices.m] input must be a finite number"),
    ('[prices.m]\ninput = "cheap"\noutput = 2\n', "[prices.m] input must be a number"),
    ('[prices]\nm = 0.5\n', "[prices.m] must be a table with input and output"),
    ('price = "0.2"\n', "bad value for price: '0.2' is not INPUT,OUTPUT"),
    ('[pricing.m]\ninput = 1\n', "unknown table [pricing]"),
])
def test_a_malformed_price_is_a_config_error_naming_the_file(tmp_path, text, says):
    with pytest.raises(ConfigError) as caught:
        config(tmp_path, text)
    assert says in str(caught.value) and str(tmp_path / "ratchet.toml") in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_name_close_to_the_model_in_use_is_a_typo():
    table = parse_table(TABLE, "config file x.toml")
    for typo in ("qwen2.5-coder-32", "Qwen2.5-Coder-32B", "hosted/qwen2.5-coder-32b"):
        with pytest.raises(PriceError) as caught:
            price_for(typo, table, None, table_origin="config file x.toml")
        assert "config file x.toml" in str(caught.value) and "a typo?" in str(caught.value)
        assert "'qwen2.5-coder-32b'" in str(caught.value)
    assert near_names("llama-3-70b", sorted(table)) == []
    # another size of a model is another model, priced or not: not a typo
    assert near_names("qwen2.5-coder-7b", sorted(table)) == [] and near_names("claude-sonet-4", ["claude-sonnet-4"])
    assert price_for("llama-3-70b", table, None) is None
    assert price_for("qwen2.5-coder-32", table, parse_price("1,1", "command line")) == Price(1, 1, None, "command line")


def test_no_price_reads_no_price_never_zero():
    assert format_usd(None) == NO_PRICE
    assert format_usd(0.0) == "$0"
    assert format_usd(0.00031234) == "$0.000312"  # a small cost keeps its digits, never $0.00
    assert format_usd(0.0312) == "$0.0312"
    assert format_usd(1234.5) == "$1,234.50"
    assert sum_costs([0.1, None]) is None and sum_costs([0.1, 0.2]) == pytest.approx(0.3)
    assert cost_phrase(None, "m") == "cost: no price for model m"
    assert cost_phrase(0.0, "builtin").startswith("$0 (the built-in policy")
    # turns: the server's counts, the approximation where it sent none; a turn saved before costs were kept
    turns = [{"tokens": 10, "cost_usd": 0.5}, {"prompt_tokens": None, "context_tokens": 7, "completion_tokens": 3}]
    assert spend(turns) == (20, None)
    assert spend([{"prompt_tokens": 0, "completion_tokens": 0, "context_tokens": 0}]) == (0, 0.0)


def test_cost_trailers_round_trip_and_read_na_on_older_commits():
    attempt = Attempt(number=3, sha="", verdict=Verdict.OK, tokens=5231, cost_usd=0.0031386, run_cost_usd=0.0094,
                      eval_s=2.8412)
    trailers = dict(attempt.trailers())
    assert (trailers["Ratchet-Tokens"], trailers["Ratchet-Cost-Usd"], trailers["Ratchet-Run-Cost-Usd"],
            trailers["Ratchet-Eval-S"]) == ("5231", "0.0031386", "0.0094", "2.8412")
    back = Attempt.from_trailers(parse_trailers(attempt.message()), sha="x")
    assert (back.tokens, back.cost_usd, back.run_cost_usd, back.eval_s) == (5231, 0.0031386, 0.0094, 2.8412)
    unpriced = Attempt(number=1, sha="", verdict=Verdict.OK, tokens=10)
    assert dict(unpriced.trailers())["Ratchet-Cost-Usd"] == NO_PRICE and unpriced.cost_cell() == NO_PRICE
    old = Attempt.from_trailers({"Ratchet-Attempt": "1", "Ratchet-Verdict": "ok"}, sha="y")  # before these trailers
    assert (old.tokens, old.cost_usd, old.eval_s) == (None, None, None) and old.cost_cell() == "n/a"
