"""argparse types for the flags a command declares itself (the Scenario's are generated: servesize.flags).

servesize's own numbers are ASCII: Python's ``int()`` and ``float()`` read any Unicode digit (``int('٣')`` is 3,
``float('１０')`` 10.0), so ``--users ٣`` would be planned as 3 users without a word. vLLM's own flags (``bench``'s
``--random-input-len`` and the like) keep vLLM's reading, which is Python's.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _ascii(text: str, what: str) -> str:
    stripped = text.strip()
    if not stripped.isascii():
        raise argparse.ArgumentTypeError(f"{text!r} is not {what} in ASCII digits (0-9)")
    return stripped


def whole(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number in ASCII digits, from ``lo`` to ``hi``."""

    def read(text: str) -> int:
        digits = _ascii(text, "a whole number")
        if not digits.lstrip("+-").isdigit() or len(digits) > 20:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
        value = int(digits)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text!r} must be from {lo:,} to {hi:,}")
        return value

    read.__name__ = "whole number"
    return read


def counts(most: int, lo: int, hi: int) -> Callable[[str], tuple[int, ...]]:
    """An argparse type: a comma list of 1 to ``most`` whole numbers in ASCII digits, each from ``lo`` to ``hi``,
    in the order given."""

    def read(text: str) -> tuple[int, ...]:
        parts = [part.strip() for part in text.split(",") if part.strip()]
        if not parts or len(parts) > most:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of 1 to {most} counts, e.g. 4,8,16")
        one = whole(lo, hi)
        return tuple(one(part) for part in parts)

    read.__name__ = "comma list of counts"
    return read


def fraction(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in ASCII, in the interval from ``lo`` to ``hi`` (each end open or closed)."""

    def read(text: str) -> float:
        number = _ascii(text, "a number")
        try:
            value = float(number)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < lo or value > hi or (lo_open and value == lo) or \
                (hi_open and value == hi):
            interval = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
            raise argparse.ArgumentTypeError(f"{text!r} must be a number in {interval}")
        return value

    read.__name__ = "number"
    return read


def positive_int(text: str) -> int:
    return whole(1, 2**63 - 1)(text)


def draft_tokens(text: str) -> int:
    """0 (no speculative decoding) up to the most draft tokens --speculative-config takes."""
    from servesize.engine.speculative import MAX_DRAFT_TOKENS

    return whole(0, MAX_DRAFT_TOKENS)(text)
