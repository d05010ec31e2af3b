"""Units and their spellings. Bytes are integers; GiB = 2**30, GB = 10**9.

Token counts are read as vLLM reads ``--max-model-len`` (``human_readable_int``): a lowercase
suffix is decimal (``31k`` = 31,000, ``2.77m`` = 2,770,000), an uppercase one binary and whole
(``16K`` = 16,384, ``1M`` = 1,048,576; ``2.77M`` is refused, as vLLM refuses it). A digit separator
(``1,024``, ``1_6k``) is refused: ``1,024`` may mean 1.024 as well as 1024, and vLLM reads neither
``1,024`` nor ``1_6k``. Memory accepts ``80GiB``, ``81559MiB``, ``141GB``, ``16M`` (M/G/K
alone are binary, as vLLM's own flags read them).

vLLM's own numeric flags (``--max-model-len``, ``--max-num-batched-tokens``,
``--kv-cache-memory-bytes``) are read by ``parse_vllm_int``, vLLM's ``human_readable_int``
itself (``vllm/utils/argparse_utils.py``, from 0.8.5): the same suffixes, a decimal fraction
truncated as vLLM truncates it (``'25.6k'`` = 25,600); a comma refused, as vLLM refuses it, and an
underscore only where vLLM's ``int()`` takes it (``32_768``, never ``1_6k``).
"""

from __future__ import annotations

import math
import re

from servesize.errors import BadInput, UnreadableNumber, clip

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40
KB = 10**3
MB = 10**6
GB = 10**9
TB = 10**12

_TOKEN_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_TOKEN_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_BYTE_SUFFIX = {
    "": 1, "b": 1,
    "k": KiB, "kib": KiB, "kb": KB,
    "m": MiB, "mib": MiB, "mb": MB,
    "g": GiB, "gib": GiB, "gb": GB,
    "t": TiB, "tib": TiB, "tb": TB,
}
_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e([+-]?[0-9]+))?\s*([a-zA-Z]*)\s*$")
def refuse_separators(text: str, what: str) -> None:
    """A thousands comma or a digit underscore in a number: refused naming the value (1,024 may mean 1.024)."""
    if "," in text or "_" in text:
        raise UnreadableNumber(text, what, "write it without ',' or '_' between the digits (1024, 1.6k; 1,024 may "
                               "mean 1.024)")


def _split(text: str, what: str) -> tuple[float, str, str]:
    """(value, suffix as written, the mantissa's text)."""
    refuse_separators(str(text), what.partition(" (")[0])
    match = _NUMBER.match(str(text))
    if not match:
        raise BadInput(f"cannot read {clip(text)} as {what}")
    mantissa, exponent, suffix = match.groups()
    value = float(mantissa)
    if exponent:
        if len(exponent.lstrip("+-")) > 2:  # 1e400 overflows a float; 1e999999999 would take minutes to build
            raise UnreadableNumber(text, what, "the exponent is out of range")
        value *= 10 ** int(exponent)
    return value, suffix, mantissa


def parse_tokens(text: str | int | float) -> int:
    """As vLLM reads token counts: ``'31k'`` -> 31000, ``'2.77m'`` -> 2770000, ``'16K'`` -> 16384,
    ``'1,337,000'`` -> 1337000; ``'2.77M'`` (a fraction with a binary suffix) is refused."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return _whole(float(text), text, "a token count")
    value, suffix, mantissa = _split(str(text), "a token count (e.g. 32768, 31k, 16K, 2.77m)")
    if suffix in _TOKEN_BINARY:
        digits = mantissa
        if not (digits.isascii() and digits.isdigit()):
            raise UnreadableNumber(text, "a token count", f"a binary suffix ({suffix} = 2**"
                                   f"{_TOKEN_BINARY[suffix].bit_length() - 1}, as vLLM reads it) takes a whole number; "
                                   f"did you mean {(str(text).strip()[:-1] + suffix.lower())[-60:]} (decimal)?")
        return _whole(value * _TOKEN_BINARY[suffix], text, "a token count")
    if suffix not in _TOKEN_DECIMAL:
        raise UnreadableNumber(text, "a token count", f"unknown suffix {clip(suffix)} "
                               "(k, m = 10**3, 10**6; K, M = 2**10, 2**20, as vLLM reads them)")
    return _whole(value * _TOKEN_DECIMAL[suffix], text, "a token count")


def parse_bytes(text: str | int | float) -> int:
    """``'80GiB'`` -> 85899345920, ``'141GB'`` -> 141e9, ``'16M'`` -> 16 MiB."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return _whole(float(text), text, "a byte count")
    value, suffix, _ = _split(str(text), "memory (e.g. 80GiB, 81559MiB, 141GB)")
    suffix = suffix.lower()
    if suffix not in _BYTE_SUFFIX:
        raise BadInput(f"cannot read {clip(text)} as memory: unknown unit {clip(suffix)} (use B, KiB, MiB, GiB, GB, ...)")
    return _whole(value * _BYTE_SUFFIX[suffix], text, "a byte count")


_VLLM_NUMBER = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_VLLM_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_VLLM_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_vllm_int(text: str | int | float) -> int:
    """vLLM's human-readable integer: ``'25.6k'`` -> 25,600, ``'1K'`` -> 1,024, ``'32768'`` -> 32,768."""
    if isinstance(text, bool):
        raise BadInput(f"{clip(text)} is not a number")
    if isinstance(text, int):
        return text
    if isinstance(text, float):
        return _whole(text, text, "a whole number") if text.is_integer() else _refuse_fraction(text)
    value = str(text).strip()
    if len(value) > 40:  # past any count vLLM takes (int() of 5,000 digits is a ValueError, float() of them inf)
        raise UnreadableNumber(text, "vLLM reads a number", f"{len(value):,} characters, past any count")
    if "," in value:
        raise UnreadableNumber(text, "vLLM reads a number",
                               "vLLM reads no ',' between the digits (1024, 1k = 1,000, 1K = 1,024)")
    match = _VLLM_NUMBER.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in _VLLM_BINARY:
            if "." in number:
                raise BadInput(f"{clip(text)}: vLLM allows no decimals with a binary suffix like {suffix}; "
                               f"did you mean {(number + suffix.lower())[-60:]}?")
            return int(number) * _VLLM_BINARY[suffix]
        return int(float(number) * _VLLM_DECIMAL[suffix])  # int(), as vLLM truncates
    if not (value.isascii() and re.fullmatch(r"\d+(?:_\d+)*", value)):  # vLLM's int(): 32_768 yes, 1_6k no
        raise BadInput(f"cannot read {clip(text)} as vLLM reads a number (e.g. 32768, 32k = 32,000, 32K = 32,768)")
    return int(value)


def _refuse_fraction(value: float) -> int:
    raise BadInput(f"{clip(value)} is not a whole number")


def _whole(value: float, text, what: str) -> int:
    if not math.isfinite(value) or value < 0:
        raise BadInput(f"{clip(text)} is not {what} (a finite number >= 0)")
    return int(round(value))


def gib(n_bytes: float) -> float:
    return n_bytes / GiB


def fmt_bytes(n_bytes: float, unit: str = "GiB", digits: int = 2) -> str:
    """Always say which unit: ``fmt_bytes(3 * GiB)`` -> ``'3.00 GiB'``."""
    scale = {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB, "GB": GB, "MB": MB, "TB": TB}[unit]
    if unit == "B":
        return f"{int(n_bytes):,} B"
    return f"{n_bytes / scale:,.{digits}f} {unit}"


def fmt_tokens(n_tokens: float) -> str:
    """``1337000`` -> ``'1.34M'``; ``31000`` -> ``'31.0k'``; small counts as they are."""
    n = float(n_tokens)
    if abs(n) >= 10**6:
        return f"{n / 10**6:.2f}M"
    if abs(n) >= 10**4:
        return f"{n / 10**3:.1f}k"
    return f"{int(round(n)):,}"


def cdiv(a: int, b: int) -> int:
    """Ceiling division on integers, as the engine does it."""
    return -(-a // b)
