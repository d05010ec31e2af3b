"""argparse types for the flags a command declares itself (the Scenario's are generated: servesize.flags)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def draft_tokens(text: str) -> int:
    """0 (no speculative decoding) up to the most draft tokens --speculative-config takes."""
    from servesize.engine.speculative import MAX_DRAFT_TOKENS

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 <= value <= MAX_DRAFT_TOKENS:
        raise argparse.ArgumentTypeError(f"{text!r} must be from 0 to {MAX_DRAFT_TOKENS}")
    return value
