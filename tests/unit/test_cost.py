"""Prices with their unit and the cost per million output tokens of a bench run."""

from __future__ import annotations

import pytest

from ascend_serve.bench.cost import (
    PriceError,
    Prices,
    cost_line,
    cost_per_mtok,
    parse_price,
    prices_from,
    prices_of_inventory,
)


def test_prices_parse_with_their_unit() -> None:
    card = parse_price("12.5 USD/card-hour")
    assert (card.amount, card.currency, card.unit) == (12.5, "USD", "card-hour")
    assert str(parse_price("0.8 cny/kWh")) == "0.8 CNY/kWh"
    assert parse_price("30USD / server-hour").unit == "server-hour"
    assert parse_price("800 CNY/MWh").amount == pytest.approx(0.8)  # stored per kWh
    assert parse_price("0.0008 EUR/Wh").amount == pytest.approx(0.8)


@pytest.mark.parametrize(("text", "message"), [
    ("12.5", "write AMOUNT CURRENCY/UNIT"),
    ("12.5 USD", "has no unit"),
    ("12.5 USD/hour", "unknown unit 'hour'"),
    ("12.5 USD/GPU-month", "unknown unit"),
    ("0,8 CNY/kWh", "is not a number"),
    ("-1 USD/kWh", "write AMOUNT CURRENCY/UNIT"),
    ("1 US$/kWh", "write AMOUNT CURRENCY/UNIT"),
])
def test_bad_prices_are_refused_saying_why(text: str, message: str) -> None:
    with pytest.raises(PriceError, match=message):
        parse_price(text)


def test_prices_of_a_run_one_currency_one_per_unit_cli_over_inventory() -> None:
    prices = prices_from(["10 USD/card-hour"], ["8 USD/card-hour", "0.1 USD/kWh"])
    assert prices.card_hour is not None and prices.card_hour.amount == 10.0
    assert prices.kwh is not None and prices.currency == "USD"
    with pytest.raises(PriceError, match="more than one currency"):
        prices_from(["10 USD/card-hour", "0.8 CNY/kWh"])
    with pytest.raises(PriceError, match="more than one currency"):
        prices_from([], ["10 USD/card-hour", "0.8 CNY/kWh"])
    with pytest.raises(PriceError, match="two prices per card-hour"):
        prices_from(["10 USD/card-hour", "11 USD/card-hour"])
    assert not prices_from([]) and prices_from([]).currency is None
    assert prices_of_inventory(["1 USD/kWh"], "host a") == ["1 USD/kWh"]
    assert prices_of_inventory("1 USD/kWh", "host a") == ["1 USD/kWh"]
    assert prices_of_inventory(None, "host a") == []
    with pytest.raises(PriceError, match="host a: ascend_serve_bench_prices must be a list"):
        prices_of_inventory({"kwh": 1}, "host a")


def test_cost_per_million_output_tokens() -> None:
    prices = prices_from(["12.6 USD/card-hour", "0.36 USD/kWh"])
    # 4 cards at 12.6/h = 50.4/h; 1000 tok/s = 3.6 M tok/h: 14 USD per Mtok of capacity.
    # 0.36 USD/kWh at 2 tok/J: 1 Mtok takes 0.5 MJ = 0.1389 kWh = 0.05 USD.
    cost = cost_per_mtok(prices, output_throughput=1000.0, tokens_per_joule=2.0, cards=4)
    assert cost is not None
    assert cost.capacity_per_mtok == pytest.approx(14.0)
    assert cost.energy_per_mtok == pytest.approx(0.05)
    assert cost.total_per_mtok == pytest.approx(14.05)
    assert cost.currency == "USD" and cost.notes == []
    line = cost_line(cost.model_dump())
    assert line.startswith("cost per million output tokens: 14.05 USD (capacity 14 USD, "
                           "energy 0.05 USD)")

    server = cost_per_mtok(prices_from(["36 CNY/server-hour"]), output_throughput=100.0,
                           tokens_per_joule=None, servers=2)
    assert server is not None and server.capacity_per_mtok == pytest.approx(200.0)
    assert server.total_per_mtok == pytest.approx(200.0) and server.energy_per_mtok is None


def test_energy_not_measured_leaves_no_total() -> None:
    cost = cost_per_mtok(prices_from(["1 USD/card-hour", "0.1 USD/kWh"]),
                         output_throughput=50.0, tokens_per_joule=None)
    assert cost is not None
    assert cost.capacity_per_mtok is not None and cost.energy_per_mtok is None
    assert cost.total_per_mtok is None
    assert cost.notes == ["energy not measured: no energy cost"]
    assert "energy not measured" in cost_line(cost.model_dump())
    assert cost_per_mtok(Prices(), output_throughput=1.0, tokens_per_joule=1.0) is None
    idle = cost_per_mtok(prices_from(["1 USD/card-hour"]), output_throughput=0.0,
                         tokens_per_joule=None)
    assert idle is not None and idle.total_per_mtok is None
