"""Modelled assumptions: every named choice the planner makes, with its default, the warm-capacity
seed's value, a unit, a reason and a source (data/assumptions.toml). Only this loader reads the file.

    assumption("decode.bandwidth_efficiency")          -> 0.7  (the default)
    assumption("decode.bandwidth_efficiency", "seed")  -> 1.0  (the seed's value)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from servesize.datafiles import table

WHICH = ("default", "seed")


@lru_cache(maxsize=1)
def modelled_assumptions() -> dict[str, dict[str, Any]]:
    """Every modelled assumption, keyed ``section.name`` -> {default, seed, unit, reason, source, ...}."""
    raw = table("assumptions.toml")
    out: dict[str, dict[str, Any]] = {}
    for section, entries in raw.items():
        for name, entry in entries.items():
            out[f"{section}.{name}"] = dict(entry)
    return out


def assumption(name: str, which: str = "default") -> Any:
    """The default (or the seed's value, ``which='seed'``) of one named modelled assumption."""
    try:
        return modelled_assumptions()[name][which]
    except KeyError:
        raise KeyError(f"no modelled assumption {name!r} with a {which!r} value") from None
