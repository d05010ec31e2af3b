"""A plan priced at a load its caller names: ``api.plan(scenario, load=Load(...))`` / ``api.at_load``.

The plan itself is priced at its binding ceiling with one cache miss at a time. The explorer also shows
the same deployment at the user's own load (``load_users``) and a burst of simultaneous misses
(``burst``: a count, or ``BURST_FLUSH``: every warm user of one replica group at once): the latency, the
per-user decode and the bill at that load, from the plan's own moments, decode setup and context bank
(the same seed: the same numbers as the plan where the load is the plan's).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from servesize.frozen import frozen
from servesize.planning.inputs import sub_ratio_of, ttft_queue_budget_s

if TYPE_CHECKING:  # the rest loads with the first plan: ``Load`` is a query type every face may build
    from collections.abc import Iterable

    import numpy as np

    from servesize.planning.decode import ContextBank, DecodeSetup
    from servesize.planning.latency import LatencyReport
    from servesize.planning.plan import Plan
    from servesize.planning.power import PowerBill

    SetupBank = tuple[DecodeSetup, ContextBank]  # decode_bank's: the plan's decode setup and its context bank

BURST_FLUSH = "flush"  # the burst of every warm user (p5) of one replica group missing at once
MAX_DECODERS = 4096    # the decoders a load is read at stop here (a bank of 400 fills x this many contexts)


@frozen
class Load:
    """A load to price the plan at: None = as ``servesize plan`` (the binding ceiling, one miss at a time)."""

    load_users: int | None = None     # users on the deployment (Scenario.users is fleet sizing, a different thing)
    burst: int | str | None = None    # simultaneous misses: a count, or BURST_FLUSH

    def given(self) -> dict[str, int | str]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@frozen
class AtLoad:
    """The plan evaluated at a load: the binding ceiling unless ``users`` is given."""

    users: float
    given: bool
    burst: float
    latency: LatencyReport
    decoders: int                # concurrent decoders per replica the decode is read at
    decoders_rule: str           # how they follow from the users: the load model's percentile, or every user
    decode: dict[str, float]     # p5/p50/p95 per-user tok/s there (the plan's own context bank)
    decode_status: str           # ok / tight / over against the comfortable and hard floors
    power: Any                   # planning.power's bill at this load (None: not priced, and why in power_note)
    power_note: str | None


def burst_of(plan: Plan, load: Load) -> float:
    if load.burst == BURST_FLUSH:
        return float(max(1, math.floor(plan.warm_users.p5 / plan.fixed.dp)))
    return float(load.burst) if load.burst is not None else 1.0


def latency_at(plan: Plan, users: float, *, burst: float = 1.0, miss_rate: float | None = None) -> LatencyReport:
    """The latency report at ``users`` on the whole deployment (shared over its replicas), at the plan's own
    miss rate unless ``miss_rate`` is given."""
    from servesize.planning.latency import latency_report, moments_from
    from servesize.planning.load import think_time_of

    moments = plan.result.moments if miss_rate is None else moments_from(plan.result.prefill, miss_rate)
    return latency_report(moments, users / plan.fixed.dp, sub_ratio_of(plan.workload), think_time_of(plan.workload),
                          ttft_queue_budget_s(plan.knobs), plan.knobs.a("latency.discipline"), burst=burst,
                          request_fixed_s=float(plan.knobs.a("step.request_fixed_s")))


def decode_bank(plan: Plan) -> SetupBank:
    """The plan's decode setup and its own context bank (the same seed: the same numbers)."""
    from servesize.planning.ceilings import CeilingCache, contexts_of, decode_setup

    setup = decode_setup(plan.fixed, plan.knobs)
    return setup, contexts_of(plan.workload, plan.knobs, setup.topk_tokens, CeilingCache())


def decode_at(plan: Plan, decoders: Iterable[int], setup_bank: SetupBank | None = None
              ) -> tuple[dict[str, np.ndarray], float]:
    """Per-user decode p5/p50/p95 (and ``aggregate_p50``, per replica) at each count of concurrent decoders per
    replica, on the plan's own context bank (``setup_bank``: decode_bank's, when the caller holds it); and the
    tokens per step speculative decoding gives."""
    from servesize.planning.decode import decode_curve

    setup, bank = setup_bank or decode_bank(plan)
    return decode_curve(setup, None, decoders, bank=bank), float(setup.spec_speedup)


def mfu_at(plan: Plan, decoders: Iterable[int], setup_bank: SetupBank | None = None) -> np.ndarray | None:
    """Decode's effective MFU (p50) at each count of concurrent decoders per replica (``decode.decode_mfu``), on the
    plan's own context bank; None where the GPU's FLOP/s are not priced."""
    from servesize.planning.decode import decode_mfu

    setup, bank = setup_bank or decode_bank(plan)
    return decode_mfu(setup, decoders, bank)


def tp_efficiency(plan: Plan) -> float:
    from servesize.planning.ceilings import decode_setup

    return float(decode_setup(plan.fixed, plan.knobs).tp_eff)


def decode_status(p50: float, plan: Plan) -> str:
    comfortable = plan.result.decode_comfortable
    if comfortable is not None and p50 >= comfortable.floor_tok_s:
        return "ok"
    return "tight" if p50 >= plan.result.decode.floor_tok_s else "over"


def power_at(plan: Plan, load: Load, users: float) -> tuple[PowerBill | None, str | None]:
    """The bill and its note: the plan's own, or at ``users`` when the load gives them."""
    if load.load_users is None:
        return plan.power, plan.power_note
    from servesize.planning.plan import power_of

    return power_of(plan.fixed, plan.workload, plan.knobs, plan.result, users=users)


def decoders_of(plan: Plan, users: float, setup_bank: SetupBank | None = None) -> tuple[int, str]:
    """The decoders per replica at ``users``, as the plan's own decode ceiling counts them: under the load model
    the percentile of simultaneous decoders (load.decoders_at, the fixed point its ceiling reads); under the
    seed's every-user rule, every user."""
    per_replica = users / plan.fixed.dp
    dl = plan.result.decode_load
    if dl is None or not math.isfinite(per_replica):
        return max(1, round(per_replica)) if math.isfinite(per_replica) else MAX_DECODERS, "every user decodes"
    from servesize.planning.decode import median_speed
    from servesize.planning.load import decoders_at, think_time_of

    setup, bank = setup_bank or decode_bank(plan)
    think = think_time_of(plan.workload)
    request_s = max(0.0, dl.cycle_s - think - dl.decode_s)
    k = decoders_at(lambda n: median_speed(setup, bank, n), min(int(round(per_replica)), MAX_DECODERS),
                    plan.workload.output_tokens, think, request_s, sub_ratio_of(plan.workload), dl.percentile)
    return k, f"p{dl.percentile:g} of simultaneous decoders at {per_replica:,.0f} users per replica (the load model)"


def at_load(plan: Plan, load: Load) -> AtLoad:
    binding_users = plan.result.values[plan.binding]
    users = float(load.load_users) if load.load_users is not None else binding_users
    burst = burst_of(plan, load)
    same_as_plan = load.load_users is None and burst == 1.0
    latency = plan.latency if same_as_plan and plan.latency is not None else latency_at(plan, users, burst=burst)
    max_seqs = plan.memory.deployment.max_num_seqs if plan.memory is not None else MAX_DECODERS
    setup_bank = decode_bank(plan)  # built once: the decoders' fixed point and the decode there read the same bank
    decoders, rule = decoders_of(plan, users, setup_bank)
    decoders = int(max(1, min(decoders, max_seqs or MAX_DECODERS, MAX_DECODERS)))
    curve, _ = decode_at(plan, [decoders], setup_bank)
    decode = {k: float(curve[k][0]) for k in ("p5", "p50", "p95")}
    power, note = power_at(plan, load, users)
    return AtLoad(users, load.load_users is not None, burst, latency, decoders, rule, decode,
                  decode_status(decode["p50"], plan), power, note)
