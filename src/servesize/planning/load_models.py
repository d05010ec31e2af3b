"""The load models: how the users of a plan load one replica, each a named object that says what it assumes.

The assumption ``load.model`` (data/assumptions.toml) names one of them:

- ``duty`` (the default): each user cycles think -> request -> decode, so only a share of them decode at once; the
  decode ceiling is the most users whose p95 of simultaneous decoders meets the floor, with the prefill chunks that
  share their steps priced (planning.load, planning.interference), and the latency ceiling is the load at which
  queueing adds 1 - p95 of turns past the TTFT budget;
- ``every_user`` (the seed's): every warm user decodes at once, and the latency ceiling is where a cache miss's mean
  TTFT reaches the budget.

The planner asks the model whether it prices the load (``cycles``); the CLI's ceiling lines, the page's ceiling tiles
and its verdict sentence, and the glossary read their words from the model that computed the numbers, so that a
text can never describe one rule beside a number from the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from servesize.errors import BadInput
from servesize.frozen import frozen

if TYPE_CHECKING:
    from servesize.planning.inputs import Knobs

Ceilings = Any  # planning.ceilings.Ceilings, which imports this module: the texts read its fields only
EVICTED_SHOWN = 0.001  # the decode line names the evicted turns' re-prefills from a tenth of a percent of turns


@frozen
class LoadModel:
    name: str                  # the value of the assumption load.model
    title: str                 # a short name for people
    cycles: bool               # users cycle think -> request -> decode (the load is priced); False: all at once
    summary: str               # what it assumes, in one sentence
    means: tuple[tuple[str, str], ...]  # per ceiling, what its users count under this model

    def meaning(self, ceiling: str) -> str:
        return dict(self.means)[ceiling]

    def describe(self, r: Ceilings, floor: str, budget_s: float, dp: int) -> dict[str, str]:
        """Each ceiling's line for the CLI (``floor``: the decode floor as the text writes it), with its figures."""
        desc = {"cache": "warm user sessions p5", "decode": floor, "latency": f"mean miss TTFT <= {budget_s:g} s",
                "saturation": "prefill duty 100%"}
        churn = r.churn
        if churn is not None and churn.binds(float(r.warm.users.p5), dp):
            desc["cache"] = f"{churn.text()} (warm user sessions p5 {r.warm.users.p5:,.0f})"
        dl = r.decode_load
        if self.cycles and dl is not None:
            desc["decode"] = (f"p{dl.percentile:g} of simultaneous decoders ({dl.decoders_at_percentile:,}; mean "
                              f"{dl.mean_decoders:,.1f}, duty {dl.duty * 100:.3g}%) at {floor}; every user decoding at "
                              f"once: {r.every_user_decode:,.0f}")
            if dl.stall_share is not None and dl.stall_binds:
                evicted = (f", {dl.evicted_share:.1%} of returning turns re-prefilling a prefix the pool evicted"
                           if dl.evicted_share is not None and dl.evicted_share >= EVICTED_SHOWN else "")
                desc["decode"] = (f"decodes wait for the prefill chunks in their steps{evicted}: {dl.stall_share:.1%} "
                                  f"of requests below {r.decode.floor_tok_s:g} tok/s (allowed {dl.stall_allowed:.1%}); "
                                  + desc["decode"])
        if self.cycles and r.ttft is not None:
            desc["latency"] = (f"load adds <= {r.ttft.allowed_extra_share:.0%} of turns past the {budget_s:g} s TTFT "
                               "budget" + (f" (to the {r.ttft.base_share:.1%} whose own cold prefill exceeds it)"
                                           if r.ttft.base_share >= 0.0005 else ""))
        return desc

    def why(self, r: Ceilings, users: str, budget_s: float, dp: int) -> str:
        """The verdict's sentence: what happens one user past the binding ceiling (``users``, as the page writes it)."""
        dl, churn, floor = r.decode_load, r.churn, f"{r.decode.floor_tok_s:g}"
        if r.binding == "decode" and self.cycles and dl is not None and dl.stall_binds:
            return (f"Past {users} users the prefill chunks in the decodes' steps slow over {dl.stall_allowed:.0%} of "
                    f"replies below the {floor} tok/s floor.")
        if r.binding == "cache" and churn is not None and churn.binds(float(r.warm.users.p5), dp):
            return f"Past {users} users the pool turns over within a user's pause: returning contexts are evicted (LRU)."
        if r.binding == "decode" and self.cycles and dl is not None:
            return (f"Past {users} users, at the p{dl.percentile:g} of those decoding at once, each decodes below the "
                    f"{floor} tok/s floor: the HBM bandwidth is shared by too many sequences.")
        if r.binding == "latency" and self.cycles and r.ttft is not None:
            return (f"Past {users} users the prefill queue pushes over {r.ttft.allowed_extra_share:.0%} more turns past "
                    f"the {budget_s:g} s TTFT budget.")
        return {
            "cache": f"Past {users} users the pool cannot keep every returning user's context: their next request "
                     "finds it evicted and re-prefills it all (a cold miss).",
            "decode": f"Past {users} concurrent users each one decodes below the {floor} tok/s floor "
                      "(p50): the HBM bandwidth is shared by too many sequences.",
            "latency": f"Past {users} users a cache miss waits longer than the {budget_s:g} s TTFT budget on average "
                       "(M/G/1 over the prefill queue).",
            "saturation": f"Past {users} users prefill is busy all the time: the queue grows without bound.",
        }[r.binding]


CEILING_ORDER = ("cache", "decode", "latency", "saturation")


def _load_models() -> dict[str, LoadModel]:
    """data/load_models.toml: each model's title, whether it cycles, its summary and each ceiling's meaning."""
    from servesize.datafiles import table

    return {name: LoadModel(name, str(row["title"]), bool(row["cycles"]), str(row["summary"]),
                            tuple((c, str(row["means"][c])) for c in CEILING_ORDER))
            for name, row in table("load_models.toml").items()}


LOAD_MODELS: dict[str, LoadModel] = _load_models()


def load_model(knobs: Knobs) -> LoadModel:
    """The load model the knobs' assumption ``load.model`` names."""
    name = str(knobs.a("load.model"))
    if name not in LOAD_MODELS:
        raise BadInput(f"load.model must be one of {', '.join(LOAD_MODELS)}, got {name!r}")
    return LOAD_MODELS[name]
