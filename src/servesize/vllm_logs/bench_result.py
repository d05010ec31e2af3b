"""A `vllm bench serve` result read back in: the text block it prints, or the JSON ``--save-result`` writes.

    ============ Serving Benchmark Result ============
    Successful requests:                     1000
    Maximum request concurrency:             64
    Benchmark duration (s):                  57.49
    Total input tokens:                      1024000
    Total generated tokens:                  128000
    ...
    Mean TTFT (ms):                          315.85
    Mean TPOT (ms):                          26.22

What a calibration of the step model needs from it: the load (requests, their mean input and output lengths, the
concurrency cap or the request rate) and what was measured (mean TTFT and TPOT, output throughput).
"""

from __future__ import annotations

import json
import math
import re

from servesize.errors import BadInput
from servesize.frozen import frozen

# the text block's labels -> the keys --save-result writes
TEXT_KEYS = {
    "Successful requests": "completed",
    "Maximum request concurrency": "max_concurrency",
    "Request rate configured (RPS)": "request_rate",
    "Benchmark duration (s)": "duration",
    "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens",
    "Output token throughput (tok/s)": "output_throughput",
    "Mean TTFT (ms)": "mean_ttft_ms",
    "Median TTFT (ms)": "median_ttft_ms",
    "Mean TPOT (ms)": "mean_tpot_ms",
    "Median TPOT (ms)": "median_tpot_ms",
    "Mean ITL (ms)": "mean_itl_ms",
}
_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 ()/.-]*?):\s+([0-9][0-9,]*\.?[0-9]*|inf)\s*$")
MAX_RESULT_NUMBER = 1e15
# what both benchmark_serving.py and vllm bench serve print once the ready check's test request is answered
READY_CHECK_LINE = "Initial test run completed"


@frozen
class MeasuredBench:
    """One benchmark's load and its measured means."""

    completed: int
    total_input_tokens: int
    total_output_tokens: int
    mean_ttft_ms: float
    mean_tpot_ms: float
    max_concurrency: int | None = None
    request_rate: float = math.inf
    output_throughput: float | None = None
    duration: float | None = None
    # the text shows the ready check's test request answered before the run ("Initial test run completed"): its
    # prompt was cached for the run's first request (simulate/bench.py); a saved JSON does not say, so False
    ready_check: bool = False

    @property
    def input_len(self) -> int:
        return max(1, round(self.total_input_tokens / self.completed))

    @property
    def output_len(self) -> int:
        return max(1, round(self.total_output_tokens / self.completed))

    def to_dict(self) -> dict:
        return {"completed": self.completed, "total_input_tokens": self.total_input_tokens,
                "total_output_tokens": self.total_output_tokens, "mean_ttft_ms": self.mean_ttft_ms,
                "mean_tpot_ms": self.mean_tpot_ms, "max_concurrency": self.max_concurrency,
                "request_rate": "inf" if math.isinf(self.request_rate) else self.request_rate,
                "output_throughput": self.output_throughput, "duration": self.duration,
                "ready_check": self.ready_check}


def _number(key: str, value, where: str) -> float:
    if value == "inf" or (isinstance(value, float) and math.isinf(value)):
        return math.inf
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BadInput(f"{where}: {key} must be a number, got {str(value)[:40]!r}")
    try:
        number = float(str(value).replace(",", ""))
    except ValueError:
        raise BadInput(f"{where}: {key} must be a number, got {str(value)[:40]!r}") from None
    if not (0 <= number <= MAX_RESULT_NUMBER):
        raise BadInput(f"{where}: {key} must be in [0, {MAX_RESULT_NUMBER:g}], got {str(value)[:40]}")
    return number


def _fields(text: str, where: str) -> dict:
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{where}: not JSON ({exc.msg}); give the text block vllm bench serve prints, or the "
                           "file --save-result writes") from None
        if not isinstance(data, dict):
            raise BadInput(f"{where}: a saved result is a JSON object")
        out = {k: data[k] for k in TEXT_KEYS.values() if data.get(k) is not None}
        if "total_output_tokens" not in out and data.get("total_output") is not None:
            out["total_output_tokens"] = data["total_output"]
        if "total_input_tokens" not in out and data.get("total_input") is not None:
            out["total_input_tokens"] = data["total_input"]
        return out
    out = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and m.group(1).strip() in TEXT_KEYS:
            out[TEXT_KEYS[m.group(1).strip()]] = m.group(2)
    return out


def read_bench_result(text: str, where: str = "the benchmark result") -> MeasuredBench:
    """The load and the means of one `vllm bench serve` result (its text block or its saved JSON)."""
    found = _fields(text, where)
    need = ("completed", "total_input_tokens", "total_output_tokens", "mean_ttft_ms", "mean_tpot_ms")
    missing = [k for k in need if k not in found]
    if missing:
        raise BadInput(f"{where} does not state {', '.join(missing)}: give the whole result block vllm bench serve "
                       "prints (from 'Successful requests' to 'Mean TPOT'), or the JSON --save-result writes")
    v = {k: _number(k, found[k], where) for k in found}
    completed = int(v["completed"])
    if completed < 1 or not math.isfinite(v["total_input_tokens"]) or not math.isfinite(v["total_output_tokens"]):
        raise BadInput(f"{where}: no request completed, so it measured nothing to calibrate on")
    if not v["mean_tpot_ms"] > 0:
        raise BadInput(f"{where}: its mean TPOT is 0 ms (every output one token, or no decode measured): nothing "
                       "to calibrate decode on")
    conc = v.get("max_concurrency")
    return MeasuredBench(completed=completed, total_input_tokens=int(v["total_input_tokens"]),
                         total_output_tokens=int(v["total_output_tokens"]), mean_ttft_ms=v["mean_ttft_ms"],
                         mean_tpot_ms=v["mean_tpot_ms"],
                         max_concurrency=int(conc) if conc is not None and math.isfinite(conc) and conc >= 1 else None,
                         request_rate=v.get("request_rate", math.inf) or math.inf,
                         output_throughput=v.get("output_throughput"), duration=v.get("duration"),
                         ready_check=READY_CHECK_LINE in text)
