"""Fit a session-length workload from request logs (``servesize workload fit``).

What is measured: the **prompt tokens of each request**. In agentic traffic every request
resends the whole session so far (system prompt, history, tool results, new tail), so a
request's prompt length is the session's resident length at that moment, which is what the
pool fill in ``warm_capacity`` draws. Cached tokens are part of the prompt: they are counted.

Formats, detected from the content (gzip allowed, detected from the magic bytes):

- CSV with a header: the ``--column`` named, else the first of the usual names
  (prompt_tokens, input_tokens, input_length, ...).
- JSONL (one object per line) or a JSON array of objects:
  - OpenAI-style usage records: ``usage.prompt_tokens`` (also under ``response`` or
    ``response.body``, as the batch API writes it); ``usage.prompt_tokens_details.cached_tokens``
    gives the observed prefix-cache hit rate;
  - Anthropic-style usage: ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``;
  - Claude Code sessions (kv-cache-tester traces, one session per line): every top-level
    ``requests[].in`` (the full input tokens of that request: ``in`` = 64 x the number of
    prefix-block hashes) is a user-class request; requests nested inside ``type: subagent``
    entries are subagent-class; ``system_tokens + tool_tokens`` of a session is its prefix;
  - Mooncake traces: ``input_length``;
  - any object with ``--column`` as a dotted path (``usage.prompt_tokens``).

The fit is the log-normal maximum-likelihood estimate: mu = mean(ln x), sigma = std(ln x)
(population, ddof 0), median = exp(mu). Its goodness of fit is the Kolmogorov-Smirnov D
statistic: the largest vertical gap between the observed and the fitted CDF.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import pathlib
import re
from dataclasses import dataclass, field

import numpy as np

from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.workload import (
    SEED_SUBAGENT_PREFIX_TOKENS,
    SEED_USER_PREFIX_TOKENS,
    SessionClass,
    Workload,
    save_workload_dict,
)

CSV_COLUMNS = ("prompt_tokens", "input_tokens", "input_length", "prompt_len", "prompt_length",
               "num_prompt_tokens", "context_tokens", "tokens", "in")
DEFAULT_MIN_TOKENS = 1_000   # the seed dropped rows under 1,000 tokens before fitting (working-set-model.md item 19)
MIN_SUBAGENT_SAMPLES = 30    # fewer subagent requests than this: no separate subagent class is fitted
MIN_SAMPLES = 2
_HASH_IDS = re.compile(r'"hash_ids":\s*\[[0-9,\s]*\]')


# --- reading -----------------------------------------------------------------------------------

@dataclass
class Observations:
    """Prompt token counts read from one file."""

    path: str
    format: str
    field: str                       # what was read, in words
    user: list = field(default_factory=list)
    subagent: list = field(default_factory=list)
    prefix_tokens: list = field(default_factory=list)        # per-session user prefix, when the file says
    subagent_prefix_tokens: list = field(default_factory=list)
    cached_tokens: float = 0.0       # sum of cached prompt tokens over records that report them
    cached_prompt_tokens: float = 0.0  # sum of prompt tokens over those same records
    records: int = 0


def _open_text(path: pathlib.Path) -> str:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise BadInput(f"{str(path)!r} looks gzip-compressed but cannot be decompressed: {exc}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadInput(f"{str(path)!r} is not UTF-8 text (CSV, JSONL or JSON, optionally gzip)") from None


def _number(value, where: str) -> float | None:
    """A token count, None for an empty cell; anything else is an error naming where."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise BadInput(f"{where}: expected a token count, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{where}: expected a token count, got {value!r}") from None
    if not math.isfinite(x) or x < 0:
        raise BadInput(f"{where}: expected a token count >= 0, got {value!r}")
    return x


def _dotted(obj, path: str):
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _usage(obj: dict):
    for path in ("usage", "response.usage", "response.body.usage", "body.usage"):
        u = _dotted(obj, path)
        if isinstance(u, dict):
            return u
    return None


def _read_csv(text: str, path: str, column: str | None) -> Observations:
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        raise BadInput(f"{path}: the file is empty") from None
    except csv.Error as exc:
        raise BadInput(f"{path}: not a readable CSV file: {exc}") from None
    names = [h.strip() for h in header]
    if column is not None:
        if column not in names:
            raise BadInput(f"{path}: no column {column!r} in the CSV header (columns: {', '.join(names[:12])})")
        col = column
    else:
        col = next((c for c in CSV_COLUMNS if c in names), None)
        if col is None:
            raise BadInput(f"{path}: no token column found (tried {', '.join(CSV_COLUMNS)}); name one with --column")
    i = names.index(col)
    obs = Observations(path, "csv", f"column {col!r}")
    try:
        for line_no, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            obs.records += 1
            if i >= len(row):
                raise BadInput(f"{path} line {line_no}: the row has no {col!r} cell")
            x = _number(row[i], f"{path} line {line_no}, column {col!r}")
            if x is not None:
                obs.user.append(x)
    except csv.Error as exc:
        raise BadInput(f"{path}: not a readable CSV file: {exc}") from None
    return obs


def _records(text: str, path: str):
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno})") from None
        for n, rec in enumerate(data, start=1):
            yield n, rec
        return
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if '"hash_ids"' in line:
            # prefix-block hash lists are most of a trace's bytes and are not needed here:
            # dropping them before parsing makes reading ~5x faster
            line = _HASH_IDS.sub('"hash_ids":null', line)
        try:
            yield line_no, json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{path} line {line_no}: not valid JSON ({exc.msg}); expected one JSON object per line") from None


def _detect(rec: dict, column: str | None) -> str | None:
    if column is not None:
        return "column"
    reqs = rec.get("requests")
    if isinstance(reqs, list) and any(isinstance(r, dict) and "in" in r for r in reqs):
        return "claude-code"
    u = _usage(rec)
    if u is not None and "prompt_tokens" in u:
        return "openai"
    if u is not None and "input_tokens" in u:
        return "anthropic"
    if "input_length" in rec:
        return "mooncake"
    for c in CSV_COLUMNS:
        if c in rec:
            return "flat"
    return None


def _read_json_records(text: str, path: str, column: str | None) -> Observations:
    obs: Observations | None = None
    kind = None
    flat_key = None
    for where, rec in _records(text, path):
        loc = f"{path} record {where}"
        if not isinstance(rec, dict):
            raise BadInput(f"{loc}: expected a JSON object, got {type(rec).__name__}")
        if kind is None:
            kind = _detect(rec, column)
            if kind is None:
                raise BadInput(f"{loc}: no token count recognised (usage.prompt_tokens, requests[].in, "
                               "input_length, prompt_tokens, ...); name the field with --column")
            described = {
                "column": f"field {column!r}", "claude-code": "requests[].in (input tokens per request)",
                "openai": "usage.prompt_tokens", "anthropic": "usage input + cache read + cache creation tokens",
                "mooncake": "input_length",
            }
            if kind == "flat":
                flat_key = next(c for c in CSV_COLUMNS if c in rec)
                described["flat"] = f"field {flat_key!r}"
            obs = Observations(path, {"column": "jsonl", "flat": "jsonl"}.get(kind, kind), described[kind])
        obs.records += 1
        if kind == "column":
            x = _number(_dotted(rec, column), f"{loc}, field {column!r}")
            if x is not None:
                obs.user.append(x)
        elif kind == "flat":
            x = _number(rec.get(flat_key), f"{loc}, field {flat_key!r}")
            if x is not None:
                obs.user.append(x)
        elif kind == "mooncake":
            x = _number(rec.get("input_length"), f"{loc}, field 'input_length'")
            if x is not None:
                obs.user.append(x)
        elif kind == "openai":
            u = _usage(rec) or {}
            x = _number(u.get("prompt_tokens"), f"{loc}, usage.prompt_tokens")
            if x is not None:
                obs.user.append(x)
                cached = _number(_dotted(u, "prompt_tokens_details.cached_tokens"), f"{loc}, usage.prompt_tokens_details.cached_tokens")
                if cached is not None:
                    obs.cached_tokens += cached
                    obs.cached_prompt_tokens += x
        elif kind == "anthropic":
            u = _usage(rec) or {}
            parts = [_number(u.get(k), f"{loc}, usage.{k}") for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
            if parts[0] is not None:
                total = sum(p for p in parts if p is not None)
                obs.user.append(total)
                if parts[1] is not None:
                    obs.cached_tokens += parts[1]
                    obs.cached_prompt_tokens += total
        else:  # claude-code
            reqs = rec.get("requests")
            if not isinstance(reqs, list):
                raise BadInput(f"{loc}: expected a 'requests' list (Claude Code session format)")
            prefix = _number(rec.get("system_tokens"), f"{loc}, system_tokens") or 0.0
            prefix += _number(rec.get("tool_tokens"), f"{loc}, tool_tokens") or 0.0
            if prefix > 0:
                obs.prefix_tokens.append(prefix)
            for j, r in enumerate(reqs):
                if not isinstance(r, dict):
                    raise BadInput(f"{loc}, requests[{j}]: expected an object")
                if r.get("type") == "subagent" and isinstance(r.get("requests"), list):
                    sp = (_number(r.get("system_tokens"), f"{loc}, requests[{j}].system_tokens") or 0.0) + (
                        _number(r.get("tool_tokens"), f"{loc}, requests[{j}].tool_tokens") or 0.0)
                    if sp > 0:
                        obs.subagent_prefix_tokens.append(sp)
                    for k, q in enumerate(r["requests"]):
                        x = _number(q.get("in") if isinstance(q, dict) else None, f"{loc}, requests[{j}].requests[{k}].in")
                        if x is not None:
                            obs.subagent.append(x)
                    continue
                x = _number(r.get("in"), f"{loc}, requests[{j}].in")
                if x is not None:
                    obs.user.append(x)
    if obs is None:
        raise BadInput(f"{path}: the file holds no records")
    return obs


def read_token_counts(path, column: str | None = None) -> Observations:
    """Prompt token counts from a CSV, JSONL or JSON file (gzip allowed), format auto-detected."""
    p = pathlib.Path(path)
    text = _open_text(p)
    if not text.strip():
        raise BadInput(f"{str(p)!r}: the file is empty")
    first = text.lstrip()[:1]
    if first in "{[":
        return _read_json_records(text, str(p), column)
    return _read_csv(text, str(p), column)


# --- fitting -----------------------------------------------------------------------------------

def _phi(x: np.ndarray) -> np.ndarray:
    erf = np.frompyfunc(math.erf, 1, 1)
    return 0.5 * (1.0 + erf(np.asarray(x, dtype=np.float64) / math.sqrt(2.0)).astype(np.float64))


def ks_statistic(x: np.ndarray, mu: float, sigma: float) -> float:
    """Kolmogorov-Smirnov D between the sample and the log-normal(mu, sigma) CDF.

    D = max_i max(i/n - F(x_(i)), F(x_(i)) - (i-1)/n) over the sorted sample.
    """
    xs = np.sort(np.asarray(x, dtype=np.float64))
    n = xs.size
    cdf = _phi((np.log(xs) - mu) / sigma)
    i = np.arange(1, n + 1)
    return float(max(np.max(i / n - cdf), np.max(cdf - (i - 1) / n)))


def kolmogorov_p_value(d: float, n: int) -> float:
    """Asymptotic P(D_n >= d) (Kolmogorov; Stephens' small-n correction, Numerical Recipes 14.3).

    With mu and sigma estimated from the same sample the true p-value is smaller (Lilliefors),
    so this one is optimistic.
    """
    sqrt_n = math.sqrt(n)
    lam = (sqrt_n + 0.12 + 0.11 / sqrt_n) * d
    if lam < 0.2:
        return 1.0
    total = 0.0
    for j in range(1, 101):
        term = 2.0 * (-1) ** (j - 1) * math.exp(-2.0 * j * j * lam * lam)
        total += term
        if abs(term) < 1e-12:
            break
    return min(1.0, max(0.0, total))


def fit_meaning(d: float, n: int, p: float) -> str:
    verdict = ("a close fit" if d < 0.05 else "a fair fit" if d < 0.10
               else "a poor fit: plan with an empirical workload or check the tails")
    text = (f"D = {d:.3f}: the fitted log-normal CDF is never more than {d * 100:.1f} percentage points "
            f"from the observed one ({verdict}). Kolmogorov p = {p:.3g} (optimistic: mu and sigma were fitted "
            "on the same data)")
    if n >= 1000:
        text += f"; with n = {n:,} even small departures are significant, so read D as the size of the misfit"
    return text


@dataclass(frozen=True)
class LogNormalFit:
    n: int
    mu: float
    sigma: float
    ks_d: float
    ks_p: float

    @property
    def median(self) -> float:
        return math.exp(self.mu)

    def to_dict(self) -> dict:
        return {"n": self.n, "median_tokens": self.median, "mu": self.mu, "sigma": self.sigma,
                "ks_d": self.ks_d, "ks_p": self.ks_p, "ks_meaning": fit_meaning(self.ks_d, self.n, self.ks_p)}


def fit_lognormal(x) -> LogNormalFit:
    """Maximum-likelihood log-normal: mu = mean(ln x), sigma = std(ln x) (ddof 0)."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.size < MIN_SAMPLES:
        raise BadInput(f"need at least {MIN_SAMPLES} token counts to fit a distribution, got {arr.size}")
    if np.any(arr <= 0):
        raise BadInput("token counts must be > 0 to fit a log-normal")
    ln = np.log(arr)
    mu = float(np.mean(ln))
    sigma = float(np.std(ln))
    if not sigma > 0:
        raise BadInput(f"all {arr.size:,} token counts are equal ({arr[0]:,.0f}): no spread to fit; use a fixed length")
    d = ks_statistic(arr, mu, sigma)
    return LogNormalFit(int(arr.size), mu, sigma, d, kolmogorov_p_value(d, arr.size))


# --- the command's result ----------------------------------------------------------------------

@dataclass
class WorkloadFit:
    """What ``servesize workload fit`` found, and the workload it builds."""

    observations: Observations
    min_tokens: int
    user_values: np.ndarray
    user_fit: LogNormalFit
    subagent_values: np.ndarray | None
    subagent_fit: LogNormalFit | None
    workload: Workload
    prefix_source: str
    derivation: Derivation
    out: str | None = None
    plot: str | None = None
    exit_code: int = 0

    @property
    def dropped(self) -> int:
        return len(self.observations.user) - int(self.user_values.size)

    def cache_hit_rate(self) -> float | None:
        o = self.observations
        return o.cached_tokens / o.cached_prompt_tokens if o.cached_prompt_tokens > 0 else None

    def workload_dict(self) -> dict:
        data = self.workload.to_dict()
        data["fit"] = {
            "file": pathlib.Path(self.observations.path).name, "format": self.observations.format,
            "field": self.observations.field, "n": self.user_fit.n, "min_tokens": self.min_tokens,
            "ks_d": round(self.user_fit.ks_d, 6), "prefix_source": self.prefix_source,
        }
        return data

    def to_dict(self) -> dict:
        o = self.observations
        return {
            "file": o.path, "format": o.format, "field": o.field, "records": o.records,
            "values_read": len(o.user), "min_tokens": self.min_tokens, "dropped_below_min": self.dropped,
            "user": self.user_fit.to_dict(),
            "subagent": None if self.subagent_fit is None else self.subagent_fit.to_dict(),
            "subagent_values_read": len(o.subagent),
            "observed_cache_hit_rate": self.cache_hit_rate(),
            "prefix_source": self.prefix_source,
            "workload": self.workload.to_dict(),
            "out": self.out, "plot": self.plot,
            "derivation": self.derivation.to_list(),
        }

    def render(self, explain: bool = False) -> str:
        o, f = self.observations, self.user_fit
        lines = [
            f"{o.path}: {o.format}, {o.field}; {o.records:,} records, {len(o.user):,} prompt lengths"
            + (f" ({self.dropped:,} under {self.min_tokens:,} tokens dropped)" if self.dropped else ""),
            f"user class: log-normal median {f.median:,.0f} tokens, sigma {f.sigma:.3f} (n = {f.n:,})",
            f"  goodness of fit: {fit_meaning(f.ks_d, f.n, f.ks_p)}",
        ]
        if self.subagent_fit is not None:
            s = self.subagent_fit
            lines.append(f"subagent class: log-normal median {s.median:,.0f} tokens, sigma {s.sigma:.3f} (n = {s.n:,}); "
                         f"r = {self.workload.subagent_ratio:.3f} subagent requests per user request; KS D = {s.ks_d:.3f}")
        elif o.subagent:
            lines.append(f"subagent requests: {len(o.subagent):,}, too few to fit (< {MIN_SUBAGENT_SAMPLES}); not written")
        hit = self.cache_hit_rate()
        if hit is not None:
            lines.append(f"observed prefix-cache hit rate (cached / prompt tokens): {hit:.1%}")
        lines.append(f"prefix: {self.workload.user.prefix_tokens:,} tokens ({self.prefix_source})")
        if self.out:
            lines.append(f"wrote {self.out} (use it with: servesize plan MODEL --gpus ... --workload {self.out})")
        if self.plot:
            lines.append(f"wrote {self.plot}")
        if explain:
            lines += ["", self.derivation.render(), "", "workload written:", self.workload.describe()]
        return "\n".join(lines)


def fit_workload(path, *, column: str | None = None, min_tokens: int = DEFAULT_MIN_TOKENS,
                 prefix_tokens: int | None = None) -> WorkloadFit:
    """Read, filter (x >= min_tokens), fit, and build the workload (other fields: the seed's defaults)."""
    obs = read_token_counts(path, column)
    if not obs.user:
        raise BadInput(f"{obs.path}: no token counts found in {obs.field}")
    user = np.asarray(obs.user, dtype=np.float64)
    user = user[user >= max(min_tokens, 1)]
    if user.size < MIN_SAMPLES:
        raise BadInput(f"{obs.path}: only {user.size} of {len(obs.user):,} prompt lengths are >= {min_tokens:,} tokens; "
                       "lower --min-tokens or check the column")
    d = Derivation()
    d.given("n", int(user.size), note=f"prompt lengths >= {min_tokens:,} tokens from {obs.field}")
    user_fit = fit_lognormal(user)
    d.given("mu", user_fit.mu, note="mean(ln x): the maximum-likelihood log-normal location")
    d.given("sigma", user_fit.sigma, note="std(ln x), ddof 0: the maximum-likelihood shape")
    d.given("median_tokens", user_fit.median, unit="tokens", note="exp(mu)")
    d.given("ks_d", user_fit.ks_d, note="max |observed CDF - fitted CDF|")

    sub_values = sub_fit = None
    if len(obs.subagent) > 0:
        sv = np.asarray(obs.subagent, dtype=np.float64)
        sv = sv[sv >= max(min_tokens, 1)]
        if sv.size >= MIN_SUBAGENT_SAMPLES:
            sub_values, sub_fit = sv, fit_lognormal(sv)

    if prefix_tokens is not None:
        prefix, source = int(prefix_tokens), "given with --prefix-tokens"
    elif obs.prefix_tokens:
        prefix = int(round(float(np.median(obs.prefix_tokens))))
        source = f"median system + tool tokens over {len(obs.prefix_tokens):,} sessions in the file"
    else:
        prefix, source = SEED_USER_PREFIX_TOKENS, "the seed default; the file does not say"
    user_cls = SessionClass("user", round(user_fit.median, 1), round(user_fit.sigma, 4), prefix,
                            source=f"fitted from {pathlib.Path(obs.path).name} (n={user_fit.n}, KS D={user_fit.ks_d:.3f})")
    kwargs = {}
    if sub_fit is not None:
        sub_prefix = int(round(float(np.median(obs.subagent_prefix_tokens)))) if obs.subagent_prefix_tokens else SEED_SUBAGENT_PREFIX_TOKENS
        kwargs["subagent"] = SessionClass("subagent", round(sub_fit.median, 1), round(sub_fit.sigma, 4), sub_prefix,
                                          source=f"fitted from {pathlib.Path(obs.path).name} (n={sub_fit.n})")
        kwargs["subagent_ratio"] = d.step("subagent_ratio", "n_subagent / n_user", note="subagent requests per user request",
                                          n_subagent=sub_fit.n, n_user=user_fit.n)
    try:
        workload = Workload(user=user_cls, **kwargs)
    except BadInput as exc:
        raise BadInput(f"the fitted workload is not usable: {exc}") from None
    return WorkloadFit(obs, int(min_tokens), user, user_fit, sub_values, sub_fit, workload, source, d)


def write_workload(result: WorkloadFit, path) -> str:
    """Write the workload file (JSON, or TOML for a .toml name) that ``plan --workload`` reads."""
    save_workload_dict(result.workload_dict(), path)
    result.out = str(path)
    return result.out


def plot_fit(result: WorkloadFit, path) -> str:
    """Histogram of prompt lengths on a log axis, with the fitted density (per unit of ln tokens)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = result.user_values
    f = result.user_fit
    edges = np.geomspace(x.min(), x.max() * 1.0001, min(80, max(10, int(np.sqrt(x.size)))))
    counts, _ = np.histogram(x, bins=edges)
    density = counts / (x.size * np.diff(np.log(edges)))  # per unit ln(tokens): comparable to the normal pdf of ln x
    grid = np.geomspace(edges[0], edges[-1], 400)
    pdf = np.exp(-0.5 * ((np.log(grid) - f.mu) / f.sigma) ** 2) / (f.sigma * math.sqrt(2 * math.pi))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(edges[:-1], density, width=np.diff(edges), align="edge", alpha=0.5, color="tab:blue",
           label=f"observed (n = {x.size:,})")
    ax.plot(grid, pdf, color="tab:red", lw=2,
            label=f"log-normal fit: median {f.median:,.0f}, sigma {f.sigma:.2f} (KS D = {f.ks_d:.3f})")
    ax.axvline(f.median, color="tab:red", ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("prompt tokens per request (log scale)")
    ax.set_ylabel("density per unit ln(tokens)")
    ax.set_title(f"servesize workload fit: {pathlib.Path(result.observations.path).name}")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise BadInput(f"cannot write plot {str(path)!r}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
    result.plot = str(path)
    return result.plot
