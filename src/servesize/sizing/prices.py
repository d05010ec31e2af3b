"""GPU-hour prices (``data/prices.toml``): one rental price per GPU, with its provider, source and date.

    gpu_hour_prices()["H200-SXM"].per_hour     -> 4.59 (USD, RunPod Secure Cloud, 2026-09-25)

A price is the on-demand rental of one GPU for one hour; rental prices include the power, so the fleet
adds the power bill only when told the prices exclude it. ``with_overrides`` replaces rows with the
user's own (``--gpu-hour-price GPU=PRICE``), in the fleet's currency.
"""

from __future__ import annotations

import re
from functools import lru_cache

from servesize.datafiles import table
from servesize.errors import BadInput, clip
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.model.hardware import find_gpu, load_gpus

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_MAX_PRICE = 10_000.0  # per GPU-hour: past any rental or amortised price, a typo


@frozen
class GpuPrice(Record):
    """What one GPU costs per hour, in ``currency``, and where the figure comes from."""

    gpu: str
    per_hour: float
    currency: str
    provider: str
    offer: str
    date: str
    source: str
    includes_power: bool = True


@lru_cache(maxsize=1)
def gpu_hour_prices() -> dict[str, GpuPrice]:
    """The price list, GPU key -> GpuPrice (every row checked: a catalogue GPU, a positive price, a source, a date)."""
    data = table("prices.toml")
    currency = data.get("currency")
    if not isinstance(currency, str) or not currency:
        raise ValueError("prices.toml: a top-level currency is required")
    gpus = load_gpus()
    out: dict[str, GpuPrice] = {}
    for row in data.get("price", []):
        key = row.get("gpu")
        if key not in gpus:
            raise ValueError(f"prices.toml: {key!r} is not a key of data/gpus.toml")
        if key in out:
            raise ValueError(f"prices.toml: two prices for {key}")
        price = row.get(f"{currency.lower()}_per_gpu_hour")
        if not isinstance(price, (int, float)) or not 0 < price < _MAX_PRICE:
            raise ValueError(f"prices.toml: {key} needs {currency.lower()}_per_gpu_hour > 0")
        for name in ("provider", "offer", "source"):
            if not isinstance(row.get(name), str) or not row[name].strip():
                raise ValueError(f"prices.toml: {key} has no {name}")
        if not isinstance(row.get("date"), str) or not _DATE.match(row["date"]):
            raise ValueError(f"prices.toml: {key} needs date = 'YYYY-MM-DD' (the day the price was read)")
        out[key] = GpuPrice(key, float(price), currency, row["provider"], row["offer"], row["date"], row["source"])
    return out


def parse_price(text: str) -> tuple[str, float]:
    """'H200=3.10' -> ('H200-SXM', 3.10): a catalogue GPU and a price per GPU-hour."""
    name, sep, value = str(text).partition("=")
    if not sep or not name.strip() or not value.strip():
        raise BadInput(f"--gpu-hour-price {clip(text)}: write GPU=PRICE, e.g. H200=3.10 (per GPU per hour)", field="gpu_hour_price")
    gpu = find_gpu(name.strip())
    try:
        if "_" in value or "," in value:  # float('1_0') is 10.0; '2,5' may mean 2.5
            raise ValueError(value)
        price = float(value)
    except ValueError:
        raise BadInput(f"--gpu-hour-price {clip(text)}: {clip(value.strip())} is not a number", field="gpu_hour_price") from None
    if not 0 < price < _MAX_PRICE:
        raise BadInput(f"--gpu-hour-price {clip(text)}: the price per GPU-hour must be in (0, {_MAX_PRICE:g})", field="gpu_hour_price")
    return gpu.key, price


def with_overrides(overrides: dict[str, float], currency: str | None, includes_power: bool) -> dict[str, GpuPrice]:
    """The price list in ``currency`` (default: the list's own) with the user's prices over it.

    A listed price in another currency than the one asked for is dropped (never converted): those GPUs
    are searched only with a price of their own."""
    listed = gpu_hour_prices()
    own = next(iter(listed.values())).currency if listed else "USD"
    cur = currency or own
    out = {k: GpuPrice(p.gpu, p.per_hour, p.currency, p.provider, p.offer, p.date, p.source, includes_power)
           for k, p in listed.items() if p.currency == cur}
    for key, price in overrides.items():
        out[key] = GpuPrice(key, price, cur, "given", "--gpu-hour-price", "", "flag --gpu-hour-price", includes_power)
    return out
