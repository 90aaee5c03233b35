"""Cost per million output tokens of a bench run, from prices written with their unit.

A price is ``AMOUNT CURRENCY/UNIT``: ``12.5 USD/card-hour``, ``30 USD/server-hour``,
``0.8 CNY/kWh`` (``MWh`` and ``Wh`` too). The currency is an ISO 4217-style code of three
letters; every price of one run must be in the same currency. A price without a unit, with an
unknown unit, or two prices of one unit, is refused (:class:`PriceError`).

Where prices come from (``ascend-serve bench``): ``--price`` (repeatable), over the inventory
variable ``ascend_serve_bench_prices`` (a list of such strings, e.g. in ``group_vars/all.yml``)
read with ``--prices-inventory`` (a ``--price`` of the same unit wins).

The cost of a million output tokens, with ``T`` the output tokens per second of the run:

* capacity: ``(card price x cards + server price x servers) / (3600 x T) x 10^6`` (the hours the
  hardware is held for those tokens; ``cards`` is bench's ``--cards``, ``servers`` its
  ``--servers``);
* energy: ``energy price per kWh / (3.6 x 10^6 x tokens per joule) x 10^6``, with the tokens
  per joule the run measured (NPU telemetry, or the host's RAPL/hwmon/IPMI meter); "not
  measured" when there is none, and then no total either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Unit = Literal["card-hour", "server-hour", "kWh"]
# The units a price may be written in: per card-hour and per server-hour for the hardware, per
# kWh (also MWh, Wh, converted) for the energy.
_UNITS: dict[str, tuple[Unit, Decimal]] = {
    "card-hour": ("card-hour", Decimal(1)), "card-h": ("card-hour", Decimal(1)),
    "server-hour": ("server-hour", Decimal(1)), "server-h": ("server-hour", Decimal(1)),
    "kwh": ("kWh", Decimal(1)), "mwh": ("kWh", Decimal("0.001")), "wh": ("kWh", Decimal(1000)),
}
UNITS_TEXT = "card-hour, server-hour, kWh (or MWh, Wh)"
_PRICE_RE = re.compile(r"^\s*(?P<amount>[0-9][0-9_.,]*)\s*(?P<currency>[A-Za-z]{3})\s*"
                       r"(?:/\s*(?P<unit>[A-Za-z-]+))?\s*$")
INVENTORY_VARIABLE = "ascend_serve_bench_prices"
JOULES_PER_KWH = 3.6e6
MILLION = 1e6


class PriceError(ValueError):
    """A price that cannot be used (no unit, unknown unit, mixed currencies...)."""


class Price(BaseModel):
    """One price, normalised to its unit (MWh and Wh prices are stored per kWh)."""

    model_config = ConfigDict(frozen=True)

    amount: float = Field(ge=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    unit: Unit
    text: str

    def __str__(self) -> str:
        return f"{self.amount:g} {self.currency}/{self.unit}"


def parse_price(text: str) -> Price:
    """``"12.5 USD/card-hour"`` → a :class:`Price`; raises :class:`PriceError` saying why."""
    match = _PRICE_RE.match(text)
    if match is None:
        raise PriceError(f"price {text!r}: write AMOUNT CURRENCY/UNIT, e.g. '12.5 USD/card-hour' "
                         f"or '0.8 CNY/kWh' (units: {UNITS_TEXT})")
    if match["unit"] is None:
        raise PriceError(f"price {text!r} has no unit: write it per {UNITS_TEXT}, e.g. "
                         f"'{match['amount']} {match['currency'].upper()}/card-hour'")
    unit = _UNITS.get(match["unit"].lower())
    if unit is None:
        raise PriceError(f"price {text!r}: unknown unit {match['unit']!r} (units: {UNITS_TEXT})")
    try:
        amount = Decimal(match["amount"].replace("_", ""))
    except InvalidOperation as exc:
        raise PriceError(f"price {text!r}: {match['amount']!r} is not a number") from exc
    return Price(amount=float(amount * unit[1]), currency=match["currency"].upper(),
                 unit=unit[0], text=text.strip())


class Prices(BaseModel):
    """The prices of one run: at most one per unit, all in one currency."""

    model_config = ConfigDict(frozen=True)

    card_hour: Price | None = None
    server_hour: Price | None = None
    kwh: Price | None = None

    @property
    def currency(self) -> str | None:
        return next((p.currency for p in self.all()), None)

    def all(self) -> list[Price]:
        return [p for p in (self.card_hour, self.server_hour, self.kwh) if p is not None]

    def __bool__(self) -> bool:
        return bool(self.all())


_FIELD: dict[Unit, str] = {"card-hour": "card_hour", "server-hour": "server_hour",
                           "kWh": "kwh"}


def prices_from(texts: Iterable[str], defaults: Iterable[str] = ()) -> Prices:
    """The prices of ``texts`` (``--price``) over ``defaults`` (the inventory's): a text of the
    same unit replaces a default; two texts of one unit, or two currencies, are refused."""
    chosen: dict[str, Price] = {}
    for price in (parse_price(t) for t in defaults):
        chosen[_FIELD[price.unit]] = price
    given: dict[str, Price] = {}
    for price in (parse_price(t) for t in texts):
        key = _FIELD[price.unit]
        if key in given:
            raise PriceError(f"two prices per {price.unit}: {given[key].text!r} and "
                             f"{price.text!r}")
        given[key] = price
    chosen.update(given)
    currencies = sorted({p.currency for p in chosen.values()})
    if len(currencies) > 1:
        raise PriceError("prices in more than one currency (" + ", ".join(
            f"{p.text!r}" for p in chosen.values()) + "): give them all in one currency")
    return Prices.model_validate(chosen)


def prices_of_inventory(value: Any, where: str) -> list[str]:
    """The list of price strings of the inventory variable (``where`` names the host)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise PriceError(f"{where}: {INVENTORY_VARIABLE} must be a list of prices like "
                     f"'12.5 USD/card-hour', not {value!r}")


class CostReport(BaseModel):
    """Cost per million output tokens and its parts (None: no price, or not measured)."""

    currency: str
    cards: int
    servers: int
    output_throughput: float
    tokens_per_joule: float | None
    prices: list[str]
    capacity_per_mtok: float | None
    energy_per_mtok: float | None
    total_per_mtok: float | None
    notes: list[str] = Field(default_factory=list)


def cost_per_mtok(prices: Prices, *, output_throughput: float, tokens_per_joule: float | None,
                  cards: int = 1, servers: int = 1) -> CostReport | None:
    """The cost report of one run; None without any price. See the module doc."""
    currency = prices.currency
    if currency is None:
        return None
    notes: list[str] = []
    capacity: float | None = None
    hourly = 0.0
    if prices.card_hour is not None:
        hourly += prices.card_hour.amount * cards
    if prices.server_hour is not None:
        hourly += prices.server_hour.amount * servers
    if prices.card_hour is not None or prices.server_hour is not None:
        if output_throughput > 0:
            capacity = hourly / (3600.0 * output_throughput) * MILLION
        else:
            notes.append("no output tokens: no capacity cost per token")
    energy: float | None = None
    if prices.kwh is not None:
        if tokens_per_joule is not None and tokens_per_joule > 0:
            energy = prices.kwh.amount / (JOULES_PER_KWH * tokens_per_joule) * MILLION
        else:
            notes.append("energy not measured: no energy cost")
    parts = [(p, v) for p, v in ((prices.card_hour or prices.server_hour, capacity),
                                 (prices.kwh, energy)) if p is not None]
    total = None if any(v is None for _, v in parts) else sum(v for _, v in parts if v)
    return CostReport(currency=currency, cards=cards, servers=servers,
                      output_throughput=output_throughput, tokens_per_joule=tokens_per_joule,
                      prices=[str(p) for p in prices.all()], capacity_per_mtok=capacity,
                      energy_per_mtok=energy, total_per_mtok=total, notes=notes)


def cost_line(cost: Mapping[str, Any]) -> str:
    """``cost per Mtok: 1.23 USD (capacity 1.00, energy 0.23)`` of a saved cost report."""
    cur = cost.get("currency", "")

    def money(value: Any) -> str:
        return "not measured" if value is None else f"{value:.4g} {cur}"

    parts = []
    if cost.get("capacity_per_mtok") is not None or any(
            "hour" in p for p in cost.get("prices", [])):
        parts.append(f"capacity {money(cost.get('capacity_per_mtok'))}")
    if any("kWh" in p for p in cost.get("prices", [])):
        parts.append(f"energy {money(cost.get('energy_per_mtok'))}")
    return (f"cost per million output tokens: {money(cost.get('total_per_mtok'))}"
            + (f" ({', '.join(parts)})" if parts else "")
            + f" at {', '.join(cost.get('prices', []))}")
