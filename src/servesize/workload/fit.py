"""Fit a session-length workload from observed prompt lengths (``servesize workload fit``).

What is measured: the **prompt tokens of each request**. In agentic traffic every request
resends the whole session so far (system prompt, history, tool results, new tail), so a
request's prompt length is the session's resident length at that moment, which is what the
pool fill in ``warm_capacity`` draws. Cached tokens are part of the prompt: they are counted.

The fit is the log-normal maximum-likelihood estimate: mu = mean(ln x), sigma = std(ln x)
(population, ddof 0), median = exp(mu). Its goodness of fit is the Kolmogorov-Smirnov D
statistic: the largest vertical gap between the observed and the fitted CDF. Where the log-normal
fits badly (D >= 0.10, ``--distribution auto``) the workload takes the observed distribution itself
(an empirical class of 1,000 quantiles).

The file says only what it says. Every other field is fitted where the file has it, else left to
the preset the workload file names (``FieldFit``: the value and how it was found, or why not):
the shared prefix (system + tool tokens per session, or leading hash blocks), the invalidation (the
fraction of requests that find no cached prefix of their own: from hash blocks, or from each
record's cached tokens), the subagent class and ratio (where the file labels requests), the think
time (gaps between a session's requests), output tokens and the warm turn (a session's prompt
growth). Nothing is dropped unless ``min_tokens`` asks; unreadable rows are skipped and counted.
"""

from __future__ import annotations

import math
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.percentile import median, quantiles
from servesize.workload.catalogue import AWAY_AFTER_S
from servesize.workload.model import (
    FORMAT_KEY,
    FORMAT_VERSION,
    MAX_SESSION_TURNS,
    MIN_THINK_TIME_S,
    REUSE_POINTS,
    EmpiricalClass,
    SessionClass,
    Workload,
)
from servesize.workload.readers import Observations

if TYPE_CHECKING:  # numpy loads where a function needs it (the CLI starts without it)
    import numpy as np

DEFAULT_MIN_TOKENS = 0       # nothing dropped unless asked (the seed dropped rows under 1,000, biasing short workloads up)
MIN_SUBAGENT_SAMPLES = 30    # fewer subagent requests than this: no separate subagent class is fitted
MIN_SAMPLES = 2            # a log-normal needs two distinct values
MIN_WORKLOAD_SAMPLES = 10  # a workload from fewer readable lengths than this is refused: too few to say anything


# --- fitting -----------------------------------------------------------------------------------

def _phi(x: np.ndarray) -> np.ndarray:
    import numpy as np
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * (1.0 + erf(np.asarray(x, dtype=np.float64) / math.sqrt(2.0)))


_KS_CHUNK = 1 << 20  # sorted values whose CDF is computed at once: the temporaries stay ~40 MB, not 40 bytes a value


def ks_statistic(x: np.ndarray, mu: float, sigma: float) -> float:
    """Kolmogorov-Smirnov D between the sample and the log-normal(mu, sigma) CDF.

    D = max_i max(i/n - F(x_(i)), F(x_(i)) - (i-1)/n) over the sorted sample, taken ``_KS_CHUNK`` values at a time
    (the same expression per value: a 17.9M-record log holds one sorted copy, not a dozen temporaries).
    """
    import numpy as np
    xs = np.sort(np.asarray(x, dtype=np.float64))
    n = xs.size
    d = -math.inf
    for lo in range(0, n, _KS_CHUNK):
        part = xs[lo:lo + _KS_CHUNK]
        cdf = _phi((np.log(part) - mu) / sigma)
        i = np.arange(lo + 1, lo + part.size + 1)
        d = max(d, float(np.max(i / n - cdf)), float(np.max(cdf - (i - 1) / n)))
    return d


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


@frozen
class LogNormalFit(Record):
    n: int
    mu: float
    sigma: float
    ks_d: float
    ks_p: float

    JSON_EXTRA = ("median_tokens", "ks_meaning")

    @property
    def median(self) -> float:
        return math.exp(self.mu)

    @property
    def median_tokens(self) -> float:
        """The median under the name the documents give it (a token count's fit; think times are read as seconds)."""
        return self.median

    @property
    def ks_meaning(self) -> str:
        return fit_meaning(self.ks_d, self.n, self.ks_p)

    def expected_past(self, x: float) -> float:
        """n P(X > x) under this log-normal: how many of the sample it expects beyond ``x``."""
        return self.n * 0.5 * math.erfc((math.log(x) - self.mu) / (self.sigma * math.sqrt(2.0))) \
            if self.sigma > 0 else float(self.n if x < self.median else 0)


def fit_lognormal(x) -> LogNormalFit:
    """Maximum-likelihood log-normal: mu = mean(ln x), sigma = std(ln x) (ddof 0)."""
    import numpy as np
    arr = np.asarray(x, dtype=np.float64)
    if arr.size < MIN_SAMPLES:
        raise BadInput(f"need at least {MIN_SAMPLES} token counts to fit a distribution, got {arr.size}")
    if np.any(arr <= 0):
        raise BadInput("token counts must be > 0 to fit a log-normal")
    ln = np.log(arr)
    mu = float(np.mean(ln))
    sigma = float(np.std(ln))
    del ln  # 8 bytes a value: freed before the KS pass sorts its own copy
    if not sigma > 0:
        raise BadInput(f"all {arr.size:,} token counts are equal ({arr[0]:,.0f}): no spread to fit; use a fixed length")
    d = ks_statistic(arr, mu, sigma)
    return LogNormalFit(int(arr.size), mu, sigma, d, kolmogorov_p_value(d, arr.size))


# --- the command's result ----------------------------------------------------------------------

# the workload's scalar fields a log can set: what fit_observations changes and what the written file carries
SCALAR_FIELDS = ("subagent_ratio", "invalidation", "think_time_s", "think_time_sigma", "output_tokens",
                 "warm_turn_tokens", "session_turns", "output_spread", "reuse_tokens")
SPREAD_POINTS = 10         # the replies' spread: their deciles' midpoints (Workload.output_spread)
MIN_SPREAD_REPLIES = 20    # fewer timed replies say too little of a spread: every reply the mean, as before
DISTRIBUTIONS = ("auto", "lognormal", "empirical")
POOR_FIT_D = 0.10        # auto: at or above this KS D the log-normal is 'a poor fit' (fit_meaning) -> empirical
# auto: at most this many of the sample's requests expected past its largest value under the fitted log-normal,
# n P(X > max). For a sample the log-normal drew, that count is about Exp(1) (P(X > max) of n draws is Beta(1, n)):
# over 10 once in 22,000 samples. A sample whose tail stops short of the fit's (a trace of prompts that never pass
# a context, or cut at max_model_len) is read as itself: the fit's tail would price prompts the trace never sends
# (Mooncake's conversation trace: 73 of 12,031 expected past its largest, 126,195 tokens; D is only 0.067)
TAIL_EXCESS_MAX = 10.0
EMPIRICAL_POINTS = 1000  # an empirical class is written as this many evenly spaced quantiles of the sample
# Workload fields a request log cannot state: deployment choices, always the preset's (or a flag's)
NEVER_IN_A_LOG = {
    "max_model_len": "a deployment choice (--max-model-len), not in a request log",
    "subagents_share_prefix": "how the client builds its prompts; a log gives lengths, not prompt contents",
    "speculative": "a deployment choice (MTP or none), not in a request log",
}


@frozen
class FieldFit:
    """One workload field: fitted from the file (``value`` set, ``how`` says from what) or left to the preset
    (``value`` None, ``how`` says why the file cannot say)."""

    name: str
    value: Any
    how: str

    @property
    def fitted(self) -> bool:
        return self.value is not None


@dataclass
class WorkloadFit:
    """What ``servesize workload fit`` found, and the workload it builds over its preset."""

    observations: Observations
    min_tokens: int
    user_values: np.ndarray
    user_fit: LogNormalFit
    distribution: str
    subagent_values: np.ndarray | None
    subagent_fit: LogNormalFit | None
    workload: Workload
    preset_name: str
    fields: dict[str, FieldFit]
    notes: list[str]
    derivation: Derivation
    out: str | None = None
    plot: str | None = None
    exit_code: int = 0

    @property
    def dropped(self) -> int:
        return len(self.observations.user) - int(self.user_values.size)

    @property
    def prefix_source(self) -> str:
        return self.fields["user_prefix_tokens"].how

    def cache_hit_rate(self) -> float | None:
        o = self.observations
        return o.cached_tokens / o.cached_prompt_tokens if o.cached_prompt_tokens > 0 else None

    def fitted(self) -> list[str]:
        return [name for name, f in self.fields.items() if f.fitted]

    def from_preset(self) -> list[str]:
        return [name for name, f in self.fields.items() if not f.fitted]

    def workload_dict(self) -> dict:
        """The file ``plan --workload`` reads: the preset it stands on, the fields fitted, and how."""
        w = self.workload
        data: dict[str, Any] = {FORMAT_KEY: FORMAT_VERSION, "preset": self.preset_name}
        user = w.user.to_dict()
        if not self.fields["user_prefix_tokens"].fitted:
            user.pop("prefix_tokens", None)
        data["user"] = user
        if self.fields["subagent"].fitted:
            data["subagent"] = {} if w.subagent is None else w.subagent.to_dict()
        # every scalar field the fit set (session_turns too: left out, a file read back took the preset's turnover
        # on top of a fitted invalidation that already counts each session's first request)
        for key in SCALAR_FIELDS:
            if self.fields[key].fitted:
                data[key] = getattr(w, key)
        if self.fields["think_time_sigma"].fitted:
            data["think_time_median_s"] = w.think_time_median_s  # for the reader: derived from the two above
        o = self.observations
        data["fit"] = {
            "file": pathlib.Path(o.path).name, "format": o.format, "field": o.field, "n": self.user_fit.n,
            "min_tokens": self.min_tokens, "dropped_below_min_tokens": self.dropped, "skipped_bad_rows": o.skipped,
            **({"max_model_len": o.max_prompt_tokens, "refused_longer": o.refused} if o.max_prompt_tokens else {}),
            "distribution": self.distribution, "ks_d": round(self.user_fit.ks_d, 6),
            "fitted": {name: f.how for name, f in self.fields.items() if f.fitted},
            "from_preset": {**{name: f.how for name, f in self.fields.items() if not f.fitted}, **NEVER_IN_A_LOG},
            "notes": list(self.notes),
        }
        return data

    def to_dict(self) -> dict:
        o = self.observations
        return {
            "file": o.path, "format": o.format, "field": o.field, "records": o.records,
            "values_read": len(o.user), "skipped_bad_rows": o.skipped, "skip_examples": list(o.skip_examples),
            "min_tokens": self.min_tokens, "dropped_below_min": self.dropped,
            "user": self.user_fit.to_dict(), "distribution": self.distribution,
            "subagent": None if self.subagent_fit is None else self.subagent_fit.to_dict(),
            "subagent_values_read": len(o.subagent),
            "observed_cache_hit_rate": self.cache_hit_rate(),
            "preset": self.preset_name,
            "fields": {name: {"value": f.value, "fitted": f.fitted, "how": f.how} for name, f in self.fields.items()},
            "notes": list(self.notes),
            "workload": self.workload.to_dict(),
            "out": self.out, "plot": self.plot,
            "derivation": self.derivation.to_list(),
        }


def _filtered(values: Sequence[float], min_tokens: int) -> np.ndarray:
    import numpy as np
    arr = np.asarray(values, dtype=np.float64)
    return arr[arr >= max(min_tokens, 1)] if min_tokens > 0 else arr[arr > 0]


def _choose_distribution(choice: str, fit: LogNormalFit, largest: float) -> str:
    """auto: the log-normal where it fits the body (KS D under POOR_FIT_D) and its tail past the sample's largest
    value holds no more than TAIL_EXCESS_MAX of the sample; else the observed distribution itself."""
    if choice not in DISTRIBUTIONS:
        raise BadInput(f"--distribution {choice!r} is not one of {', '.join(DISTRIBUTIONS)}")
    if choice != "auto":
        return choice
    return "lognormal" if fit.ks_d < POOR_FIT_D and fit.expected_past(largest) <= TAIL_EXCESS_MAX else "empirical"


def _sigma_how(fit: LogNormalFit, dist: str, largest: float) -> str:
    how = f"KS D = {fit.ks_d:.3f}"
    if dist == "lognormal":
        return how
    past = fit.expected_past(largest)
    if fit.ks_d < POOR_FIT_D and past > TAIL_EXCESS_MAX:
        how += (f", but the log-normal expects {past:,.0f} of the {fit.n:,} past the largest read ({largest:,.0f} "
                "tokens)")
    return how + ": the observed distribution itself is used"


def empirical_points(values: np.ndarray, points: int = EMPIRICAL_POINTS) -> np.ndarray:
    """The sample itself when small, else ``points`` quantiles at (i + 0.5) / points: a bootstrap from them
    draws the same distribution to within 1 / points in probability."""
    import numpy as np
    if values.size <= points:
        return np.sort(values)
    at = quantiles(values, [float(f) for f in (np.arange(points) + 0.5) / points])
    return np.round(np.array(at, dtype=float), 1)


def _user_class(values: np.ndarray, fit: LogNormalFit, distribution: str, prefix: int, name: str):
    if distribution == "lognormal":
        return SessionClass("user", round(fit.median, 1), round(fit.sigma, 4), prefix,
                            source=f"fitted from {name} (n={fit.n}, KS D={fit.ks_d:.3f})")
    return EmpiricalClass("user", empirical_points(values), prefix,
                          source=f"empirical from {name} (n={fit.n}; the log-normal's KS D is {fit.ks_d:.3f})")


def _prefix_field(obs: Observations, prefix_tokens: int | None) -> FieldFit:
    if prefix_tokens is not None:
        return FieldFit("user_prefix_tokens", int(prefix_tokens), "given with --prefix-tokens")
    if obs.prefix_tokens:
        return FieldFit("user_prefix_tokens", int(round(median(obs.prefix_tokens))),
                        f"median system + tool tokens over {len(obs.prefix_tokens):,} sessions")
    if obs.hash_prefix_tokens is not None:  # 0 is a finding too: no leading block is shared by most requests
        return FieldFit("user_prefix_tokens", int(obs.hash_prefix_tokens),
                        f"leading hash blocks shared by more than half the requests ({obs.cold_basis.split(':')[0]})")
    return FieldFit("user_prefix_tokens", None, "the file has no system-prompt sizes or hash blocks")


@frozen
class _ColdBasis:
    """Per request of the file's cold basis, whether it matched no cached prefix of its own; the basis in words;
    which of those requests open their session, where the file groups requests into sessions (else None); and
    whether the basis is hash blocks (an infinite cache within the file's scope) or each record's cached tokens."""

    cold: np.ndarray
    basis: str
    opens: np.ndarray | None
    from_hashes: bool


def _cold_basis(obs: Observations, prefix: int | None) -> _ColdBasis | None:
    """Hash blocks, else each record's cached tokens (no more than the shared prefix); None where the file reports
    neither. Read once: the invalidation and the session turnover both count from it."""
    import numpy as np
    if obs.cold:
        cold, basis = np.asarray(obs.cold, dtype=bool), obs.cold_basis
    elif obs.cached_hits:
        limit = float(prefix) if prefix is not None else 0.0
        basis = (f"cached tokens no more than the {prefix:,}-token prefix" if prefix is not None
                 else "no cached tokens (the file does not say its prefix)")
        cold = np.asarray(obs.cached_hits, dtype=np.float64) <= limit
    else:
        return None
    opens = np.asarray(obs.opens, dtype=bool) if len(obs.opens) == cold.size and any(obs.opens) else None
    return _ColdBasis(cold, basis, opens, bool(obs.cold))


def _invalidation_field(found: _ColdBasis | None) -> FieldFit:
    """The --invalidation definition: the fraction of requests that match no cached prefix of their own. Where the
    file has sessions, over the requests after each session's first (a session's start is its own field,
    ``session_turns``: the Workload's reading, ``Workload.cold_shares``); else over every request."""
    import numpy as np
    if found is None:
        return FieldFit("invalidation", None, "the file reports no cached tokens or hash blocks")
    if found.opens is not None:
        later = found.cold[~found.opens]
        f = float(later.mean()) if later.size else 0.0
        return FieldFit("invalidation", round(f, 4), f"{f:.1%} of {later.size:,} requests after their session's first "
                        f"cold by {found.basis}")
    f = float(np.mean(found.cold))
    how = f"{f:.1%} of {found.cold.size:,} requests cold by {found.basis}"
    if not found.from_hashes:
        how += "; the server's own evictions count too, so it is an upper bound on the workload's own invalidation"
    return FieldFit("invalidation", round(f, 4), how)


def _turnover_field(invalidation: FieldFit, found: _ColdBasis | None) -> FieldFit:
    """Requests per session where the file groups them into sessions (each session's first starts it, cold beyond
    the shared prefix); else no turnover on top of a fitted invalidation, which counts each session's first."""
    if found is not None and found.opens is not None:
        sessions = int(found.opens.sum())
        turns = min(MAX_SESSION_TURNS, max(1, round(found.opens.size / sessions)))
        return FieldFit("session_turns", turns, f"{found.opens.size:,} requests over {sessions:,} sessions: each "
                        "session's first request starts it, cold beyond the shared prefix")
    if invalidation.fitted:
        return FieldFit("session_turns", 0, "the fitted invalidation counts each session's first request: no "
                        "turnover on top of it")
    return FieldFit("session_turns", None, "the file reports no cached tokens or hash blocks to count cold requests by")


def _mean_field(name: str, values: Sequence[float], what: str, unit: str, integer: bool) -> FieldFit:
    import numpy as np
    if not values:
        return FieldFit(name, None, f"the file has no {what}")
    arr = np.asarray(values, dtype=np.float64)
    mean = float(arr.mean())
    value: Any = int(round(mean)) if integer else round(mean, 2)
    if integer and value < 1:
        return FieldFit(name, None, f"the {what} average below one token")
    return FieldFit(name, value, f"mean of {arr.size:,} {what} (median {median(arr):,.4g}{unit})")


def _spread_field(outputs: Sequence[float], what: str) -> FieldFit:
    """The replies' lengths as multiples of their mean (Workload.output_spread): the deciles' midpoints of the
    replies of two tokens or more, the ones whose decode speed a client times ((tokens - 1) over the time after
    the first; vllm bench serve's TPOT, the engine simulator's floor)."""
    import numpy as np
    arr = np.asarray(outputs, dtype=np.float64)
    timed = arr[arr >= 2]
    if timed.size < MIN_SPREAD_REPLIES:
        return FieldFit("output_spread", None, f"fewer than {MIN_SPREAD_REPLIES} {what} of two tokens or more")
    mean = float(arr.mean())
    points = quantiles(timed, [(i + 0.5) / SPREAD_POINTS for i in range(SPREAD_POINTS)])
    value = tuple(round(p / mean, 4) for p in points)
    return FieldFit("output_spread", value, f"the deciles' midpoints of {timed.size:,} {what} of two tokens or more "
                                            f"({points[0]:,.0f} to {points[-1]:,.0f} tokens), over their mean {mean:,.4g}")


def _think_fields(gaps: Sequence[float], what: str) -> dict[str, FieldFit]:
    """The think time as a distribution over the pauses of at most ``AWAY_AFTER_S`` (a longer one is the user away,
    not thinking): ``think_time_s`` is their mean, zeros included (the load the users bring: the cycle is the mean
    pause), and ``think_time_sigma`` the shape of the log-normal MLE over the positive ones (what a pause's spread
    reads: the churn's hold, generated sessions). Without the away pauses the sample mean is no longer at the mercy
    of one lunch break."""
    import numpy as np
    if not gaps:
        why = f"the file has no {what}"
        return {"think_time_s": FieldFit("think_time_s", None, why), "think_time_sigma": FieldFit("think_time_sigma", None, why)}
    every = np.asarray(gaps, dtype=np.float64)
    arr = every[every <= AWAY_AFTER_S]
    away = every.size - arr.size
    left = (f"; {away:,} {'pause' if away == 1 else 'pauses'} over {AWAY_AFTER_S / 60:g} minutes "
            f"({every[every > AWAY_AFTER_S].sum() / every.sum():.0%} of the pause time) the user away, not think "
            f"time (AWAY_AFTER_S)" if away else "")
    positive = arr[arr > 0]
    if not positive.size:
        why = f"every one of the {what} is 0 s" if not away else f"every one of the {what} is 0 s or away{left}"
        return {"think_time_s": FieldFit("think_time_s", None, why), "think_time_sigma": FieldFit("think_time_sigma", None, why)}
    zeros = f", {arr.size - positive.size:,} of them 0 s" if positive.size < arr.size else ""
    mean = float(arr.mean())
    if positive.size < MIN_SAMPLES or not np.std(np.log(positive)) > 0:
        how = (f"the mean of {arr.size:,} {what}, {mean:,.4g} s: every positive one is {median(positive):,.4g} s "
               f"(no spread: sigma 0{zeros}){left}")
        return {"think_time_s": FieldFit("think_time_s", round(mean, 2), how),
                "think_time_sigma": FieldFit("think_time_sigma", 0.0, how)}
    fit = fit_lognormal(positive)
    how = (f"the mean of {arr.size:,} {what}, {mean:,.4g} s (median {median(arr):,.4g} s{zeros}); their spread the "
           f"log-normal MLE of the positive ones: sigma {fit.sigma:.3f}, KS D = {fit.ks_d:.3f}{left}")
    return {"think_time_s": FieldFit("think_time_s", round(mean, 2), how),
            "think_time_sigma": FieldFit("think_time_sigma", round(fit.sigma, 4), how)}


def _subagent_fields(obs: Observations, min_tokens: int, n_user: int, name: str
                     ) -> tuple[FieldFit, FieldFit, np.ndarray | None, LogNormalFit | None, Any]:
    """(subagent class, subagent ratio, values, fit, class): from labelled requests, or left to the preset."""
    if not obs.labels_field:
        why = "the file does not label subagent requests"
        return FieldFit("subagent", None, why), FieldFit("subagent_ratio", None, why), None, None, None
    sv = _filtered(obs.subagent, min_tokens)
    if sv.size == 0:
        how = f"no request is labelled a subagent's ({obs.labels_field})"
        return FieldFit("subagent", "none", how), FieldFit("subagent_ratio", 0.0, how), None, None, None
    if sv.size < MIN_SUBAGENT_SAMPLES:
        why = f"only {sv.size} subagent requests ({obs.labels_field}): too few to fit (< {MIN_SUBAGENT_SAMPLES})"
        return FieldFit("subagent", None, why), FieldFit("subagent_ratio", None, why), None, None, None
    fit = fit_lognormal(sv)
    sub_prefix = int(round(median(obs.subagent_prefix_tokens))) if obs.subagent_prefix_tokens else 0
    cls = SessionClass("subagent", round(fit.median, 1), round(fit.sigma, 4), sub_prefix,
                       source=f"fitted from {name} (n={fit.n}, KS D={fit.ks_d:.3f})")
    ratio = round(fit.n / n_user, 6)
    return (FieldFit("subagent", f"log-normal median {fit.median:,.0f}, sigma {fit.sigma:.3f}",
                     f"{fit.n:,} labelled subagent requests ({obs.labels_field}); prefix "
                     + (f"median {sub_prefix:,} over {len(obs.subagent_prefix_tokens):,}" if obs.subagent_prefix_tokens
                        else "0: the file gives none")),
            FieldFit("subagent_ratio", ratio, f"{fit.n:,} subagent / {n_user:,} user requests"), sv, fit, cls)


def _why_none(obs: Observations) -> str:
    """Why a file gave no prompt lengths: its unreadable rows, or every prompt over --max-model-len."""
    return ((f" ({obs.skipped:,} rows skipped: {obs.skip_examples[0]})" if obs.skipped else "")
            + (f" (all {obs.refused:,} are longer than max_model_len {obs.max_prompt_tokens:,.0f})" if obs.refused else ""))


def fit_observations(obs: Observations, *, min_tokens: int = DEFAULT_MIN_TOKENS, prefix_tokens: int | None = None,
                     preset_name: str | None = None, distribution: str = "auto") -> WorkloadFit:
    """The workload the file implies over a preset: each field fitted from the file or left to the preset."""

    from servesize.workload.presets import preset

    chosen = preset(preset_name)
    if not obs.user:
        raise BadInput(f"{obs.path}: no readable prompt lengths in {obs.field}{_why_none(obs)}")
    user = _filtered(obs.user, min_tokens)
    if user.size < MIN_WORKLOAD_SAMPLES:
        raise BadInput(f"{obs.path}: only {user.size} of {len(obs.user):,} prompt lengths are >= {max(min_tokens, 1):,} "
                       f"tokens, too few to fit (at least {MIN_WORKLOAD_SAMPLES}); lower --min-tokens or check the column"
                       + (f" ({obs.skipped:,} unreadable rows skipped: {obs.skip_examples[0]})" if obs.skipped else ""))
    name = pathlib.Path(obs.path).name
    d = Derivation()
    d.given("n", int(user.size), note=f"prompt lengths from {obs.field}" + (f" (>= {min_tokens:,} tokens)" if min_tokens else ""))
    user_fit = fit_lognormal(user)
    d.given("mu", user_fit.mu, note="mean(ln x): the maximum-likelihood log-normal location")
    d.given("sigma", user_fit.sigma, note="std(ln x), ddof 0: the maximum-likelihood shape")
    d.given("median_tokens", user_fit.median, unit="tokens", note="exp(mu)")
    d.given("ks_d", user_fit.ks_d, note="max |observed CDF - fitted CDF|")
    dist = _choose_distribution(distribution, user_fit, float(user.max()))

    prefix = _prefix_field(obs, prefix_tokens)
    sub, ratio, sub_values, sub_fit, sub_cls = _subagent_fields(obs, min_tokens, int(user.size), name)
    cold = _cold_basis(obs, prefix.value)
    outputs = f"output counts ({obs.output_field})" if obs.output_field else "output counts"
    fields = {
        "user_median_tokens": FieldFit("user_median_tokens", round(user_fit.median, 1) if dist == "lognormal"
                                       else median(user),
                                       f"{'log-normal MLE' if dist == 'lognormal' else 'the sample median'} of "
                                       f"{user.size:,} prompt lengths ({obs.field})"),
        "user_sigma": FieldFit("user_sigma", round(user_fit.sigma, 4) if dist == "lognormal" else "empirical",
                               _sigma_how(user_fit, dist, float(user.max()))),
        "user_prefix_tokens": prefix,
        "subagent": sub, "subagent_ratio": ratio,
        "invalidation": _invalidation_field(cold),
        **_think_fields(obs.gaps_s, f"pauses between a session's requests ({obs.think_field})"
                        if obs.think_field else "think times"),
        "output_tokens": _mean_field("output_tokens", obs.output, outputs, "", integer=True),
        "output_spread": _spread_field(obs.output, outputs),
        "warm_turn_tokens": _mean_field("warm_turn_tokens", obs.turn_growth,
                                        "prompt growths from one request of a session to the next", "", integer=True),
    }
    fields["session_turns"] = _turnover_field(fields["invalidation"], cold)
    fields["reuse_tokens"] = FieldFit("reuse_tokens", None, "not a trace of lone requests sharing prefixes across "
                                      "users (hash ids global): a returning turn is its session's")
    base = chosen.workload()
    user_prefix = prefix.value if prefix.fitted else base.user.prefix_tokens
    changes: dict[str, Any] = {"user": _user_class(user, user_fit, dist, user_prefix, name)}
    if sub.fitted:
        changes["subagent"] = sub_cls  # None: the file labels requests and none is a subagent's
    for key in SCALAR_FIELDS:
        if fields[key].fitted:
            changes[key] = fields[key].value
    if fields["think_time_s"].fitted and fields["think_time_s"].value < MIN_THINK_TIME_S:
        changes.pop("think_time_s")
        changes.pop("think_time_sigma", None)
        fields["think_time_s"] = FieldFit("think_time_s", None, "every gap is 0 s" if fields["think_time_s"].value <= 0
                                          else f"the mean gap is under {MIN_THINK_TIME_S:g} s: a load generator's")
    notes = _fit_notes(obs, fields, chosen, user_fit, base, user_prefix)
    try:
        workload = base.replace(**changes)
    except BadInput as exc:
        raise BadInput(f"the fitted workload is not usable: {exc}") from None
    return WorkloadFit(obs, int(min_tokens), user, user_fit, dist, sub_values, sub_fit, workload, chosen.name, fields,
                       notes, d)


def with_prefix_reuse(found: WorkloadFit, distances_tokens: np.ndarray, new_tokens: float, how: str) -> WorkloadFit:
    """``found`` for a trace of lone requests whose prefixes are shared across users (simulate.users.prefix_reuse):
    its warm requests' reuse distances (``Workload.reuse_tokens``, REUSE_POINTS equally likely points: the
    midpoints of as many equal shares) and, where the file gave no turn growth, their mean tokens past the hit as the
    warm turn (what a warm request prefills); and, where the file labels no subagents, no subagent requests on top
    of its rows (every request the service saw is one). ``how`` says over which requests."""
    import numpy as np
    x = np.asarray(distances_tokens, dtype=np.float64)
    if not x.size:
        return found
    points = tuple(float(round(v)) for v in quantiles(x, [(i + 0.5) / REUSE_POINTS for i in range(REUSE_POINTS)]))
    fields = dict(found.fields)
    fields["reuse_tokens"] = FieldFit("reuse_tokens", points, f"LRU stack distances of {x.size:,} warm requests' first "
                                      f"block past the shared prefix ({how}), {REUSE_POINTS} equally likely points")
    changes: dict[str, Any] = {"reuse_tokens": points}
    if not fields["subagent_ratio"].fitted:
        # the trace's rows are every request the service saw, each on its own: none is added on top as a subagent's
        fields["subagent_ratio"] = FieldFit("subagent_ratio", 0.0, "a trace of lone requests: every request is a row "
                                            "(the prompt lengths above), none added on top as a subagent's")
        changes["subagent_ratio"] = 0.0
    if not fields["warm_turn_tokens"].fitted and new_tokens >= 1:
        turn = int(round(new_tokens))
        fields["warm_turn_tokens"] = FieldFit("warm_turn_tokens", turn, f"mean prompt tokens past an unbounded cache's "
                                              f"hit over the same {x.size:,} warm requests")
        changes["warm_turn_tokens"] = turn
    return replace(found, workload=found.workload.replace(**changes), fields=fields)


def _fit_notes(obs: Observations, fields: dict[str, FieldFit], chosen, user_fit: LogNormalFit, base: Workload,
               user_prefix: int) -> list[str]:
    notes = []
    if not fields["user_prefix_tokens"].fitted and user_prefix >= user_fit.median:
        notes.append(f"the file does not say its prefix, and preset {chosen.name}'s {user_prefix:,} tokens is at or above "
                     f"the fitted median {user_fit.median:,.0f}: plan will refuse it; pass --prefix-tokens or a preset "
                     "that fits (--preset chat)")
    if fields["subagent"].fitted and base.subagent is None and not chosen.has_subagents \
            and fields["subagent_ratio"].value:
        notes.append(f"the file labels subagent requests, which preset {chosen.name} has none of")
    if obs.skipped:
        notes.append(f"{obs.skipped:,} unreadable row(s) skipped: " + "; ".join(obs.skip_examples))
    if obs.refused:
        notes.append(f"{obs.refused:,} prompt(s) longer than max_model_len {obs.max_prompt_tokens:,.0f} left out, as "
                     "vLLM refuses them: the workload is the requests this deployment accepts")
    return notes
