#!/usr/bin/env python3
"""The public vLLM start-up logs with an "Available KV cache memory" line, replayed through servesize.

    PYTHONPATH=src python scripts/public_logs_accuracy.py          # the table in docs/accuracy.md

For each log (tests/fixtures/vllm-logs-available.json, each with its URL):

- exact: the lines vLLM printed, from what the log states. The logged GiB figure has two
  decimals, so the engine's bytes lie in [x - 0.005, x + 0.005) GiB: servesize sizes the pool for
  every block count that interval allows and one of them must print the logged lines character
  for character (or, for a refused start-up, servesize must predict the refusal). Where the log
  cannot pin its own lines (one rank's memory of several), the stated block count is the basis.
- flags alone: the available KV memory servesize predicts from the log's flags, the model and the
  GPU (its engine budget with the named reserve estimate), against the logged figure; or the fact
  the log does not state that the prediction would need.

tests/test_public_logs.py runs the same functions and checks that docs/accuracy.md holds this table.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "vllm-logs-available.json"
GIB = 2**30
HALF_STEP_GIB = 0.005


def cases() -> list[dict]:
    return json.loads(FIXTURE.read_text())


def _scenario(case: dict, **changes):
    from servesize.scenario import Scenario

    return Scenario(**{**case["scenario"], **changes})


def _given_memory(case: dict, **changes):
    """The scenario the exact check runs: the logged KV memory taken as given, which vLLM allocates beside the
    weights, so a checkpoint the catalogue stands in for at 16 bits takes the case's ``exact_scenario`` (its
    quantisation) for the weights to fit beside it; the pool's arithmetic does not depend on the weights."""
    return _scenario(case, **{**case.get("exact_scenario", {}), **changes})


def _logged_lines(case: dict) -> list[str]:
    import re

    out = []
    for quote in case["quotes"]:
        for pattern in (r"((?:GPU|CPU) KV cache size: [\d,]+ tokens(?:, Maximum concurrency .*x)?)",
                        r"(# GPU blocks: \d+, # CPU blocks: \d+)",  # V0's block line
                        r"(Maximum concurrency for [\d,]+ tokens per request: [\d.]+x)"):
            m = re.search(pattern, quote)
            if m and m.group(1) not in out and not any(m.group(1) in o for o in out):
                out.append(m.group(1))
    return out


@dataclass(frozen=True)
class Exact:
    ok: bool
    blocks: int | None
    detail: str


def exact(case: dict) -> Exact:
    """The logged lines from the logged available memory (or block count)."""
    from servesize.api import memory
    from servesize.errors import WouldNotStart

    reported = case["reported"]
    gib = reported["available_kv_gib"]
    lo, hi = int((gib - HALF_STEP_GIB) * GIB), int((gib + HALF_STEP_GIB) * GIB) - 1
    if reported.get("refused"):
        try:
            memory(_given_memory(case, kv_cache_memory_bytes=hi))
        except WouldNotStart as exc:
            return Exact(True, None, f"refused, as logged: {exc}")
        return Exact(False, None, "servesize predicts a start; vLLM refused")
    logged = _logged_lines(case)
    if not logged:
        return Exact(True, None, "the quotes hold no block, token or concurrency line to print")
    if case.get("basis") == "blocks":
        blocks = reported["kv_cache_tokens"] // 16
        rep = memory(_given_memory(case, num_gpu_blocks_override=blocks))
        return Exact(_printed(rep, logged), blocks, f"from the logged token line's {blocks:,} blocks")
    n_lo = memory(_given_memory(case, kv_cache_memory_bytes=lo)).pool.num_blocks
    n_hi = memory(_given_memory(case, kv_cache_memory_bytes=hi)).pool.num_blocks
    for n in range(n_lo, n_hi + 1):
        rep = memory(_given_memory(case, kv_cache_memory_bytes=hi, num_gpu_blocks_override=n))
        if _printed(rep, logged):
            return Exact(True, n, f"{n:,} blocks of {rep.pool.block_size} tokens (the interval allows {n_lo:,}..{n_hi:,})")
    return Exact(False, None, f"no block count in {n_lo:,}..{n_hi:,} prints the logged lines")


def _printed(report, logged: list[str]) -> bool:
    lines = list(report.pool.log_lines)
    joined = ", ".join(lines)
    return all(line in lines or line in joined for line in logged)


@dataclass(frozen=True)
class Predicted:
    available_bytes: int | None
    error: float | None  # predicted / logged - 1
    refused: bool
    not_modelled: tuple[str, ...] = ()  # what servesize's own output says it leaves out (a KV connector's pool)


def flags_alone(case: dict) -> Predicted:
    from servesize.api import memory
    from servesize.errors import DoesNotFit

    logged = case["reported"]["available_kv_gib"] * GIB
    not_modelled: tuple[str, ...] = ()
    try:
        report = memory(_scenario(case))
        avail, refused, not_modelled = report.budget.available_bytes, False, report.flags_not_modelled
    except DoesNotFit as exc:  # WouldNotStart carries what vLLM would have had; weights too big carry nothing
        avail, refused = getattr(exc, "available_bytes", None), True
    if avail is None:
        return Predicted(None, None, refused)
    return Predicted(int(avail), avail / logged - 1, refused, tuple(not_modelled))


def rows() -> list[dict]:
    out = []
    for case in cases():
        e, p = exact(case), flags_alone(case)
        out.append({"id": case["id"], "url": case["source"]["url"], "gpus": case["scenario"]["gpus"],
                    "version": case["scenario"].get("vllm_version", ""), "logged_gib": case["reported"]["available_kv_gib"],
                    "exact": e, "predicted": p, "missing": case.get("missing_for_flags_alone"),
                    "refused": bool(case["reported"].get("refused"))})
    return out


def _counted_errors(table: list[dict]) -> list[float]:
    """|predicted / logged - 1| of every log whose flags state what the prediction needs."""
    return [abs(r["predicted"].error) for r in table if not r["missing"] and r["predicted"].error is not None]


def median_error(table: list[dict]) -> float | None:
    errors = _counted_errors(table)
    return statistics.median(errors) if errors else None


def max_error(table: list[dict]) -> float | None:
    errors = _counted_errors(table)
    return max(errors) if errors else None


def markdown(table: list[dict]) -> str:
    lines = ["| log | GPUs, vLLM | logged available | exact (both lines) | from the flags alone | what the flags do not state |",
             "|---|---|---|---|---|---|"]
    for r in table:
        p = r["predicted"]
        e = r["exact"]
        exact_text = ("refusal predicted" if r["refused"] and e.ok else
                      f"yes, {e.blocks:,} blocks" if e.ok and e.blocks is not None else
                      "n/a (no line quoted)" if e.ok and "no block" in e.detail else "yes" if e.ok else "**no**")
        if p.available_bytes is None:
            flags_text = "n/a"
        else:
            flags_text = f"{p.available_bytes / GIB:.2f} GiB ({p.error:+.1%})" + (", refusal predicted" if p.refused else "")
        link = f"[{r['id']}]({r['url']})"
        lines.append(f"| {link} | {r['gpus']}, {r['version']} | {r['logged_gib']:.2f} GiB | {exact_text} | {flags_text} | "
                     f"{r['missing'] or '-'} |")
    med = median_error(table)
    counted = [r for r in table if not r["missing"]]
    lines.append("")
    lines.append(f"Logs whose flags state everything the prediction needs: {len(counted)} of {len(table)}; "
                 + (f"median |error| {med:.1%}, max |error| {max_error(table):.1%}." if med is not None else "none."))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    sys.stdout.write(markdown(rows()))
