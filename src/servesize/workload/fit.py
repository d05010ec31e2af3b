"""Fit a session-length workload from observed prompt lengths (``servesize workload fit``).

What is measured: the **prompt tokens of each request**. In agentic traffic every request
resends the whole session so far (system prompt, history, tool results, new tail), so a
request's prompt length is the session's resident length at that moment, which is what the
pool fill in ``warm_capacity`` draws. Cached tokens are part of the prompt: they are counted.

The fit is the log-normal maximum-likelihood estimate: mu = mean(ln x), sigma = std(ln x)
(population, ddof 0), median = exp(mu). Its goodness of fit is the Kolmogorov-Smirnov D
statistic: the largest vertical gap between the observed and the fitted CDF.
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.workload.model import SEED_SUBAGENT_PREFIX_TOKENS, SEED_USER_PREFIX_TOKENS, SessionClass, Workload
from servesize.workload.readers import Observations

DEFAULT_MIN_TOKENS = 1_000   # the seed dropped rows under 1,000 tokens before fitting (working-set-model.md item 19)
MIN_SUBAGENT_SAMPLES = 30    # fewer subagent requests than this: no separate subagent class is fitted
MIN_SAMPLES = 2


# --- fitting -----------------------------------------------------------------------------------

def _phi(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * (1.0 + erf(np.asarray(x, dtype=np.float64) / math.sqrt(2.0)))


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



def fit_observations(obs: Observations, *, min_tokens: int = DEFAULT_MIN_TOKENS,
                     prefix_tokens: int | None = None) -> WorkloadFit:
    """Filter (x >= min_tokens), fit, and build the workload (other fields: the seed's defaults)."""
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
    kwargs: dict[str, Any] = {}
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
