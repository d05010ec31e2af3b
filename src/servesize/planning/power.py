"""Electricity: watts from duty cycles, at the meter, per month, per user, per token (working-set-model.md 2.10).

Each GPU spends its time in three states that partition it (no overlap: a chunked-prefill
pass is priced as prefill):

    d_p = min(1, lambda_group x E[S])                          prefill duty (the M/G/1 rho)
    d_d = min(1 - d_p, lambda_group x out_tokens / decode_capacity_tok_s)
    W per GPU = d_p x P_prefill + d_d x P_decode + (1 - d_p - d_d) x P_idle

    kW at the meter = n_gpu x (W per GPU + host W per GPU) x PUE / 1000
    cost per month  = kW x hours_per_month x price_per_kwh
    cost per 1M output tokens = (kW x price_per_kwh / 3600) / (output tokens/s) x 1e6

``decode_capacity_tok_s`` is the output rate the group sustains while decoding. The seed
uses decode_ceiling x 40 tok/s (its capacity at the floor: ``seed_decode_capacity``); a
caller that knows the operating point's real aggregate speed should pass that instead
(working-set-model.md 5b.8). Prices are in ``currency`` (power.currency, default EUR: the default
tariff is the EU average in euros); every cost the bill prints carries it.
"""

from __future__ import annotations

from dataclasses import field

from servesize.assumptions import assumption
from servesize.derivation import Derivation
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as


@frozen
class PowerStates(Record):
    """Watts one GPU draws in each state, plus the host's share per GPU (flat)."""

    idle_w: float
    decode_w: float
    prefill_w: float
    host_w_per_gpu: float

    def __post_init__(self) -> None:
        if min(self.idle_w, self.decode_w, self.prefill_w, self.host_w_per_gpu) < 0:
            raise BadInput("power states must be >= 0 W")
        if not self.idle_w <= self.decode_w <= self.prefill_w:
            raise BadInput("power states must order idle <= decode <= prefill")

    @classmethod
    def from_tdp(
        cls,
        tdp_w: float,
        idle_fraction: float | None = None,
        decode_fraction: float | None = None,
        prefill_fraction: float | None = None,
        host_w_per_gpu: float | None = None,
    ) -> PowerStates:
        """States as fractions of the GPU's TDP (modelled assumptions; H200 700 W -> 80 / 385 / 630 W)."""
        if tdp_w <= 0:
            raise BadInput(f"TDP must be > 0 W, got {tdp_w!r}")
        idle = assumption("power.idle_fraction_of_tdp") if idle_fraction is None else idle_fraction
        dec = assumption("power.decode_fraction_of_tdp") if decode_fraction is None else decode_fraction
        pre = assumption("power.prefill_fraction_of_tdp") if prefill_fraction is None else prefill_fraction
        host = assumption("power.host_w_per_gpu") if host_w_per_gpu is None else host_w_per_gpu
        return cls(idle * tdp_w, dec * tdp_w, pre * tdp_w, host)


def seed_decode_capacity(decode_ceiling_users: float, floor_tok_s: float | None = None) -> float:
    """The seed's decode capacity: decode ceiling x floor tok/s (output tokens/s per group)."""
    floor = assumption("decode.floor_hard_tok_s") if floor_tok_s is None else floor_tok_s
    if decode_ceiling_users < 0 or floor <= 0:
        raise BadInput("decode ceiling must be >= 0 and the floor > 0")
    return decode_ceiling_users * floor


def duty_cycles(
    rate_group_per_s: float,
    mean_service_s: float,
    decode_capacity_tok_s: float,
    output_tokens_per_request: float | None = None,
) -> tuple[float, float]:
    """(d_p, d_d): prefill and decode fractions of time, partitioning it with idle."""
    out = assumption("power.output_tokens_per_request") if output_tokens_per_request is None else output_tokens_per_request
    if rate_group_per_s < 0 or mean_service_s < 0 or decode_capacity_tok_s < 0 or out < 0:
        raise BadInput("rates, service times, capacities and output tokens must be >= 0")
    d_p = min(1.0, rate_group_per_s * mean_service_s)
    demand = rate_group_per_s * out
    d_d = min(max(0.0, 1.0 - d_p), demand / decode_capacity_tok_s if decode_capacity_tok_s > 0 else 1.0)
    return d_p, d_d


@frozen
class PowerBill(Record):
    """Average draw and what it costs, for the whole deployment (all replica groups)."""

    d_p: float = field(metadata=json_as("prefill_duty"))
    d_d: float = field(metadata=json_as("decode_duty"))
    w_per_gpu: float
    kw_at_meter: float
    kwh_per_month: float
    cost_per_month: float
    cost_per_user_month: float
    cost_per_million_output_tokens: float
    n_gpu: int
    pue: float
    price_per_kwh: float
    states: PowerStates
    derivation: Derivation
    currency: str = "EUR"

    @property
    def idle_floor_kw(self) -> float:
        """kW at the meter with nothing to do."""
        return self.n_gpu * (self.states.idle_w + self.states.host_w_per_gpu) * self.pue / 1000.0

    @property
    def idle_fraction(self) -> float:
        """The share of time neither prefilling nor decoding."""
        return max(0.0, 1.0 - self.d_p - self.d_d)

    JSON_EXTRA = ("idle_fraction", "idle_floor_kw")


def power_bill(
    states: PowerStates,
    n_gpu: int,
    replicas: int,
    rate_group_per_s: float,
    mean_service_s: float,
    decode_capacity_tok_s: float,
    users: float,
    pue: float | None = None,
    price_per_kwh: float | None = None,
    output_tokens_per_request: float | None = None,
    hours_per_month: float | None = None,
    currency: str | None = None,
) -> PowerBill:
    """kW at the meter, cost per month, per user per month and per 1M output tokens.

    ``rate_group_per_s`` is the total request rate one replica group sees (main + subagent),
    ``mean_service_s`` its E[S] (latency.ServiceMoments.mean_s), ``decode_capacity_tok_s``
    its output rate while decoding; every group is assumed equally loaded.
    """
    pue = assumption("power.pue") if pue is None else pue
    price = assumption("power.price_per_kwh") if price_per_kwh is None else price_per_kwh
    out = assumption("power.output_tokens_per_request") if output_tokens_per_request is None else output_tokens_per_request
    hours = assumption("power.hours_per_month") if hours_per_month is None else hours_per_month
    if n_gpu < 1 or replicas < 1 or n_gpu % replicas:
        raise BadInput(f"{n_gpu} GPUs cannot form {replicas} equal replica groups")
    if pue < 1:
        raise BadInput(f"PUE must be >= 1 (facility power includes the IT load), got {pue!r}")
    if price < 0 or hours <= 0 or users < 0:
        raise BadInput("price must be >= 0, hours > 0, users >= 0")
    d_p, d_d = duty_cycles(rate_group_per_s, mean_service_s, decode_capacity_tok_s, out)
    cur = assumption("power.currency") if currency is None else currency

    d = Derivation()
    d.step("d_p", "min(1, rate_group * E_S)", note="prefill duty", source="working-set-model.md 2.10",
           rate_group=rate_group_per_s, E_S=mean_service_s)
    if decode_capacity_tok_s > 0:
        d.step("d_d", "min(max(0, 1 - d_p), rate_group * out_tokens / decode_capacity_tok_s)",
               note="decode duty: output demand over decode capacity, capped by what prefill leaves",
               d_p=d_p, rate_group=rate_group_per_s, out_tokens=out, decode_capacity_tok_s=decode_capacity_tok_s)
    else:
        d.step("d_d", "max(0, 1 - d_p)", note="no decode capacity: decoding whenever not prefilling", d_p=d_p)
    w = d.step(
        "w_per_gpu", "d_p * prefill_w + d_d * decode_w + max(0, 1 - d_p - d_d) * idle_w", unit="W",
        source="modelled power states (data/assumptions.toml power.*)",
        d_p=d_p, d_d=d_d, prefill_w=states.prefill_w, decode_w=states.decode_w, idle_w=states.idle_w,
    )
    kw = d.step("kw_at_meter", "n_gpu * (w_per_gpu + host_w_per_gpu) * pue / 1000", unit="kW",
                n_gpu=n_gpu, w_per_gpu=w, host_w_per_gpu=states.host_w_per_gpu, pue=pue)
    kwh = d.step("kwh_per_month", "kw_at_meter * hours", unit="kWh", kw_at_meter=kw, hours=hours)
    cost = d.step("cost_per_month", "kwh_per_month * price_per_kwh", unit=f"{cur}/month",
                  kwh_per_month=kwh, price_per_kwh=price)
    per_user = d.step("cost_per_user_month", "cost_per_month / users if users > 0 else float('nan')", unit=f"{cur}/user/month",
                      cost_per_month=cost, users=users)
    out_rate = rate_group_per_s * replicas * out
    if out_rate > 0:
        per_mtok = d.step("cost_per_million_output_tokens", "kw_at_meter * price_per_kwh / 3600 / output_tok_s * 1000000",
                          unit=f"{cur}/1M tokens", kw_at_meter=kw, price_per_kwh=price, output_tok_s=out_rate)
    else:
        per_mtok = float("inf")
        d.given("cost_per_million_output_tokens", "undefined", note="no output tokens")
    return PowerBill(
        d_p=d_p, d_d=d_d, w_per_gpu=float(w), kw_at_meter=float(kw), kwh_per_month=float(kwh),
        cost_per_month=float(cost), cost_per_user_month=float(per_user),
        cost_per_million_output_tokens=float(per_mtok), n_gpu=int(n_gpu), pue=float(pue),
        price_per_kwh=float(price), states=states, derivation=d,
        currency=cur,
    )
