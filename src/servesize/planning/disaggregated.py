"""Prefill and decode apart (issue 32): a disaggregated layout's users, from an aggregated plan of each pool.

vLLM's disaggregated serving runs prefill and decode in separate ``vllm serve`` instances joined by a KV connector
(NixlConnector: the decode instance pulls the blocks it lacks, engine/kv_transfer.py). servesize plans it from two
ordinary plans and the transfer between them:

- **the decode pool** (y instances of ``decode_tp`` GPUs): the plan of those GPUs as data-parallel replicas, with no
  prefill chunk in their steps (``load.interference`` off: a decode instance prefills nothing but the
  ``prefill_backoff`` tokens it recomputes). Its **cache** and **decode** ceilings are the layout's: the decode
  instance keeps a returning session's context in its own prefix cache and pulls only the new turn.
- **the prefill pool** (x instances of ``prefill_tp`` GPUs): the plan of those GPUs, whose **latency** and
  **saturation** ceilings are the layout's, the TTFT budget less the handover of a cold turn (the pull and the
  decode instance's steps around it, ``kv_transfer.handover_steps``), and whose cache ceiling is the layout's
  **prefill cache**: the prefill instance must still hold a returning session's context to prefill only its new
  turn (a session-sticky router), so the users whose sessions it keeps warm bound the layout as the decode pool's do.
- **the link**: each request's pull occupies the decode ranks' links for its descriptors and bytes, and the prefill
  GPUs' links for its bytes; the **link** ceiling is the users at which either is busy all the time.

The binding ceiling is the smallest of the six. Not modelled yet: the decode pool's steps that recompute the
backoff tokens, the prefill instance's queue seen by the decode side (a pull waits for its prefill to finish: it is
in the TTFT, not in the decode pool's time), several connectors.

The pools may run on GPUs of two types (--prefill-gpu): each pool is planned on its own GPUs, the link defaults to a
NIC per GPU (GPUs of two types share no NVLink fabric), and the aggregated answer beside the layout is each type's
GPUs served apart, their users added (``Aggregated``).
"""

from __future__ import annotations

import json
import math
from dataclasses import field
from typing import Any

from servesize.engine.kv_transfer import KvTransfer, TransferTime, pull_seconds
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.jsonable import Record, json_as
from servesize.planning.ceilings import lowest_ceiling
from servesize.planning.inputs import Knobs, sub_ratio_of
from servesize.planning.latency import users_for_rate
from servesize.planning.load import think_time_of

# what sends each request to a prefill instance, then to a decode instance with the prefill's kv_transfer_params
ROUTER = ("a proxy that sends each request to a prefill instance with max_tokens 1, then to a decode instance with "
          "the kv_transfer_params the prefill returned, session-sticky on both sides: vLLM's "
          "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py to try it, llm-d or NVIDIA Dynamo in production")
# what NixlConnector allocates on the GPU beside vLLM's own pool: nothing; it registers the KV cache tensors in place
# (vLLM 0.32 kv_connector/v1/nixl/base_worker.py register_kv_caches: xfer_buffers = kv_caches unless kv_buffer_device
# is 'cpu', whose staging buffers live in host RAM)
CONNECTOR_GPU_BYTES = 0
CONNECTOR_GPU_SOURCE = ("vLLM 0.32 kv_connector/v1/nixl/base_worker.py register_kv_caches: the KV cache tensors are "
                        "registered in place (a host staging buffer only with kv_buffer_device 'cpu')")
CEILINGS = ("cache", "decode", "latency", "saturation", "prefill cache", "link")
WHERE = {"cache": "decode pool", "decode": "decode pool", "latency": "prefill pool", "saturation": "prefill pool",
         "prefill cache": "prefill pool", "link": "KV link"}


@frozen
class Layout:
    """xPyD: the instances, their TP sizes and GPUs, the link between them and the connector. ``gpu`` is --gpus's
    type, the decode pool's; ``prefill_gpu`` the prefill pool's, the same unless --prefill-gpu names another (then
    --gpus holds the decode pool alone)."""

    prefill_instances: int
    prefill_tp: int
    decode_instances: int
    decode_tp: int
    gpu: str
    gpus_given: int
    link_key: str
    link: dict[str, Any]
    link_assumed: str  # why the link is this one when --kv-link was not given ("" when it was)
    connector: str
    prefill_gpu: str  # --gpus's type unless --prefill-gpu names another

    @property
    def mixed(self) -> bool:
        """Whether the two pools run on GPUs of different types."""
        return self.prefill_gpu != self.gpu

    def gpus_words(self) -> str:
        """The GPUs the layout runs on: 'N of M H200-SXM', or each pool's where their types differ."""
        if self.mixed:
            return (f"{self.prefill_gpus} {self.prefill_gpu} (prefill) and {self.decode_gpus} of "
                    f"{self.gpus_given} {self.gpu} (decode)")
        return f"{self.prefill_gpus + self.decode_gpus} of {self.gpus_given} {self.gpu}"

    @property
    def prefill_gpus(self) -> int:
        return self.prefill_instances * self.prefill_tp

    @property
    def decode_gpus(self) -> int:
        return self.decode_instances * self.decode_tp

    @property
    def name(self) -> str:
        return f"{self.prefill_instances}P{self.decode_instances}D"

    def words(self) -> str:
        return (f"{self.name}: {self.prefill_instances} prefill instance(s) of TP {self.prefill_tp} and "
                f"{self.decode_instances} decode instance(s) of TP {self.decode_tp} on {self.gpus_words()}, "
                f"{self.connector} over {self.link['name']}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "prefill_instances": self.prefill_instances, "prefill_tp": self.prefill_tp,
                "decode_instances": self.decode_instances, "decode_tp": self.decode_tp, "gpu": self.gpu,
                "prefill_gpu": self.prefill_gpu,
                "gpus_used": self.prefill_gpus + self.decode_gpus, "gpus_given": self.gpus_given,
                "connector": self.connector, "link": {"key": self.link_key, "name": self.link["name"],
                                                      "gbps_per_direction": self.link["gbps_per_direction"],
                                                      "source": self.link["source"], "assumed": self.link_assumed}}


@frozen
class TurnTransfer(Record):
    """One kind of turn's pull: what crosses, how long it takes, and the handover it adds to the TTFT."""

    turn: str  # warm | cold | start
    context_tokens: int
    pull: KvTransfer
    time: TransferTime
    handover_s: float


@frozen
class LinkLoad(Record):
    """The link's ceiling: users at which the decode ranks' links (descriptors and bytes) or the prefill GPUs'
    (bytes) are busy all the time, and the mean pull per request it is taken from."""

    mean_pull_s: float       # per decode rank, per request (the turns at their shares)
    mean_bytes: float        # over the link, per request (every decode rank's share)
    decode_users: float = field(metadata=json_as("decode_side_users"))
    prefill_users: float = field(metadata=json_as("prefill_side_users"))
    shares: dict[str, float]

    @property
    def users(self) -> float:
        return min(self.decode_users, self.prefill_users)

    def utilisation_at(self, users: float) -> float:
        return users / self.users if self.users > 0 else float("inf")

    JSON_EXTRA = ("users",)


def pull_time(pull: KvTransfer, layout: Layout, knobs: Knobs) -> TransferTime:
    """How long ``pull`` takes over the layout's link from its prefill instances, at the knobs' kv_transfer.*
    assumptions: the one pricing plan and engine simulator share."""
    return pull_seconds(pull, layout.link, layout.prefill_tp,
                        link_efficiency=float(knobs.a("kv_transfer.link_efficiency")),
                        descriptor_post_s=float(knobs.a("kv_transfer.descriptor_post_s")),
                        blocks_per_descriptor=float(knobs.a("kv_transfer.blocks_per_descriptor")))


def link_load(layout: Layout, turns: dict[str, TurnTransfer], shares: dict[str, float], workload: Any,
              link_efficiency: float) -> LinkLoad:
    """The link's ceiling from each turn's pull at its share of requests (warm, cold re-prefill, session start):
    a decode instance's ranks pull in parallel, each busy ``time.seconds`` per request; the prefill GPUs send every
    byte, at ``link_efficiency`` of their links' rate."""
    mean_s = sum(shares[t] * turns[t].time.seconds for t in shares)
    mean_bytes = sum(shares[t] * turns[t].pull.bytes for t in shares)
    think, r = think_time_of(workload), sub_ratio_of(workload)
    decode_users = layout.decode_instances * users_for_rate(1.0 / mean_s, think, r) if mean_s > 0 else float("inf")
    send = layout.prefill_gpus * float(layout.link["gbps_per_direction"]) * 1e9 * link_efficiency
    prefill_users = users_for_rate(send / mean_bytes, think, r) if mean_bytes > 0 else float("inf")
    return LinkLoad(mean_s, mean_bytes, decode_users, prefill_users, dict(shares))


@frozen
class Aggregated:
    """The aggregated answer on the layout's GPUs: one plan of them all, or, where the pools' GPUs are of two types
    (--prefill-gpu), one plan of each type's GPUs, served apart behind one router: their users add up."""

    plans: tuple[Any, ...]   # planning.plan.Plan, --gpus's first

    @property
    def users(self) -> float:
        return float(sum(p.ceilings[p.binding] for p in self.plans))

    @property
    def binding(self) -> str:
        """The first group's binding ceiling (each group's is in ``groups``)."""
        return str(self.plans[0].binding)

    @staticmethod
    def _split(p: Any) -> str:
        split = p.placement
        tp, dp = (p.fixed.tp, p.fixed.dp) if split is None else (split.tp, split.dp)
        return f"TP {tp} x DP {dp}"

    @property
    def name(self) -> str:
        if len(self.plans) == 1:
            return f"aggregated {self._split(self.plans[0])}"
        return "aggregated " + " + ".join(f"{self._split(p)} on {p.fixed.gpu_key}" for p in self.plans)

    def words(self) -> str:
        """'140 users (decode binds), TP 1 x DP 4', or each type's group and the sum."""
        def one(p: Any) -> str:
            return f"{p.ceilings[p.binding]:,.0f} users ({p.binding} binds), {self._split(p)}"
        if len(self.plans) == 1:
            return one(self.plans[0])
        return f"{self.users:,.0f} users: " + " + ".join(f"{one(p)} on {p.fixed.gpu_key}" for p in self.plans)

    def to_dict(self) -> dict[str, Any]:
        def group(p: Any) -> dict[str, Any]:
            return {"users": p.ceilings[p.binding], "binding": p.binding, "ceilings": p.ceilings,
                    "tp": p.fixed.tp, "dp": p.fixed.dp, "recipe": p.recipe, "gpu": p.fixed.gpu_key}
        out = group(self.plans[0])
        if len(self.plans) > 1:
            out["users"] = self.users
            out["groups"] = [group(p) for p in self.plans]
        return out


@frozen
class DisaggregatedPlan:
    """A disaggregated layout's users: its six ceilings, each pool's plan, the transfers, and the aggregated plan on
    the same GPUs beside it."""

    layout: Layout
    prefill: Any   # planning.plan.Plan of the prefill pool (its latency, saturation and cache ceilings)
    decode: Any    # planning.plan.Plan of the decode pool, no prefill chunks in its steps
    turns: dict[str, TurnTransfer]
    link: LinkLoad
    decode_step_s: float     # a decode step at the floor: what the handover's steps take
    ttft_budget_s: float     # the TTFT limit; the prefill pool plans for it less the cold turn's handover
    prefill_budget_s: float
    aggregated: Aggregated   # the same GPUs, aggregated
    # the engine simulator on this layout (api.check_disaggregated; None: not run): its users at the comfort SLO
    engine_check: dict[str, Any] | None = None

    @property
    def values(self) -> dict[str, float]:
        d, p = self.decode.ceilings, self.prefill.ceilings
        return {"cache": d["cache"], "decode": d["decode"], "latency": p["latency"], "saturation": p["saturation"],
                "prefill cache": p["cache"], "link": self.link.users}

    @property
    def binding(self) -> str:
        values = self.values
        return lowest_ceiling(values, CEILINGS)

    @property
    def users(self) -> float:
        return self.values[self.binding]

    @property
    def binding_pool(self) -> str:
        """Where the binding ceiling lies: the decode pool, the prefill pool or the KV link."""
        return WHERE[self.binding]

    def verdict(self) -> str:
        return (f"{self.users:,.0f} users: {self.binding} binds first ({WHERE[self.binding]}), "
                f"{self.layout.name} on {self.layout.gpus_words()}")

    def engine_check_text(self) -> str | None:
        """The engine simulator's users beside the plan's, in one line (None: not run)."""
        c = self.engine_check
        if not c:
            return None
        above = "at least " if c["capped"] else ""
        verdict = f"within {c['tolerance']:.0%} of the plan" if c["agree"] else \
            (f"the plan is {c['gap']:+.0%} from it" if c["gap"] is not None else "the plan has no figure beside it")
        broke = f"; one user more breaks on {c['reason']}" if c.get("reason") else ""
        return (f"engine check: the engine simulator serves {above}{c['engine_users']:,} users comfortably on "
                f"{self.layout.name}, each instance an engine of its own ({verdict}{broke})")

    def comparison(self) -> str:
        """Which layout buys more comfortable users on these GPUs, and why, in one line."""
        agg = self.aggregated
        a_users, a_bind, a_name = agg.users, agg.binding, agg.name
        d_users, d_bind = self.users, self.binding
        if d_users > a_users:
            why = (f"the decode pool's steps carry no prefill chunk (aggregated, {a_bind} binds)"
                   if a_bind == "decode" else f"aggregated, {a_bind} binds at {a_users:,.0f}")
            return (f"disaggregated {self.layout.name} buys more: {d_users:,.0f} users against {a_users:,.0f} "
                    f"{a_name}, because {why}; here {d_bind} binds ({WHERE[d_bind]})")
        return (f"{a_name} buys more: {a_users:,.0f} users against {d_users:,.0f} disaggregated {self.layout.name}, "
                f"whose {d_bind} binds first ({WHERE[d_bind]}, {_ceiling_words(self, d_bind)})")

    def recipes(self) -> dict[str, str]:
        """The two ``vllm serve`` lines (each pool's recipe with the connector) and what joins them."""
        def config(role: str) -> str:
            # vLLM 0.32 deprecates kv_both for NixlConnector: kv_producer on prefill, kv_consumer on decode
            # (kv_connector/v1/nixl/connector.py)
            text = json.dumps({"kv_connector": self.layout.connector, "kv_role": role}, separators=(",", ":"))
            return f" --kv-transfer-config '{text}'"

        return {"prefill": self.prefill.recipe + config("kv_producer"),
                "decode": self.decode.recipe + config("kv_consumer"), "router": ROUTER}

    def memory(self) -> dict[str, Any]:
        """Each pool's instance as ``servesize memory`` sizes it (budget, pool, the lines it will log) and what the
        connector reserves beside it."""
        out: dict[str, Any] = {}
        for role, pool in (("prefill", self.prefill), ("decode", self.decode)):
            report = pool.memory
            out[role] = None if report is None else {
                "available_kv_bytes_per_gpu": report.budget.available_bytes, "block_size": report.pool.block_size,
                "num_blocks": report.pool.num_blocks, "kv_cache_tokens": report.pool.kv_cache_tokens,
                "max_concurrency": round(report.pool.max_concurrency, 2), "log_lines": list(report.pool.log_lines)}
        out["connector_gpu_bytes"] = CONNECTOR_GPU_BYTES
        out["connector_source"] = CONNECTOR_GPU_SOURCE
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"recipes": self.recipes(), "memory": self.memory(), "engine_check": self.engine_check,
            "layout": self.layout.to_dict(), "users": self.users, "binding": self.binding,
            "binding_pool": self.binding_pool, "ceilings": self.values, "verdict": self.verdict(),
            "comparison": self.comparison(),
            "prefill_pool": {"ceilings": self.prefill.ceilings, "binding": self.prefill.binding,
                             "ttft_budget_s": self.prefill_budget_s, "recipe": self.prefill.recipe},
            "decode_pool": {"ceilings": self.decode.ceilings, "binding": self.decode.binding,
                            "decode_step_s": self.decode_step_s, "recipe": self.decode.recipe},
            "transfer": {t: tt.to_dict() for t, tt in self.turns.items()},
            "link": self.link.to_dict(), "ttft_limit_s": self.ttft_budget_s,
            "aggregated": self.aggregated.to_dict(),
        }


@frozen
class DisaggregatedSizing:
    """The instances of each pool N users need, from a layout's ceilings per instance: each pool's ceilings scale
    with its instances (data-parallel replicas behind a session-sticky router; the link's with the GPUs that send
    and receive)."""

    users: int
    layout: Layout          # the layout the per-instance figures were planned on
    per_prefill: dict[str, float]   # ceiling -> users per prefill instance
    per_decode: dict[str, float]    # ceiling -> users per decode instance
    prefill_instances: int
    decode_instances: int

    @property
    def prefill_binding(self) -> str:
        return min(self.per_prefill, key=lambda k: self.per_prefill[k])

    @property
    def decode_binding(self) -> str:
        return min(self.per_decode, key=lambda k: self.per_decode[k])

    @property
    def gpus(self) -> int:
        return self.prefill_instances * self.layout.prefill_tp + self.decode_instances * self.layout.decode_tp

    @property
    def name(self) -> str:
        return f"{self.prefill_instances}P{self.decode_instances}D"

    def words(self) -> str:
        p, d = self.prefill_binding, self.decode_binding
        gpus = (f"{self.gpus} {self.layout.gpu}" if not self.layout.mixed else
                f"{self.prefill_instances * self.layout.prefill_tp} {self.layout.prefill_gpu} and "
                f"{self.decode_instances * self.layout.decode_tp} {self.layout.gpu}")
        return (f"{self.name} at TP {self.layout.prefill_tp}/{self.layout.decode_tp}, {gpus} for "
                f"{self.users:,} users (a prefill instance holds {self.per_prefill[p]:,.0f}: {p}; a decode instance "
                f"{self.per_decode[d]:,.0f}: {d})")

    def to_dict(self) -> dict[str, Any]:
        return {"users": self.users, "layout": self.name, "prefill_instances": self.prefill_instances,
                "decode_instances": self.decode_instances, "prefill_tp": self.layout.prefill_tp,
                "decode_tp": self.layout.decode_tp, "gpus": self.gpus, "gpu": self.layout.gpu,
                "per_prefill_instance": self.per_prefill, "per_decode_instance": self.per_decode,
                "prefill_binding": self.prefill_binding, "decode_binding": self.decode_binding, "words": self.words()}


def sizing_for(plan: DisaggregatedPlan, users: int) -> DisaggregatedSizing:
    """The prefill and decode instances ``users`` need, each pool at the layout's ceilings per instance."""
    x, y = plan.layout.prefill_instances, plan.layout.decode_instances
    v = plan.values
    per_p = {"latency": v["latency"] / x, "saturation": v["saturation"] / x, "prefill cache": v["prefill cache"] / x,
             "link": plan.link.prefill_users / x}
    per_d = {"cache": v["cache"] / y, "decode": v["decode"] / y, "link": plan.link.decode_users / y}
    if min(per_p.values()) <= 0 or min(per_d.values()) <= 0:
        raise BadInput(f"{plan.layout.name}: an instance serves no user ({plan.binding} binds at {plan.users:,.0f})")
    return DisaggregatedSizing(users, plan.layout, per_p, per_d, math.ceil(users / min(per_p.values())),
                               math.ceil(users / min(per_d.values())))


def _ceiling_words(plan: DisaggregatedPlan, ceiling: str) -> str:
    layout = plan.layout
    if ceiling == "saturation":
        return f"{layout.prefill_gpus} prefill GPU(s) busy all the time"
    if ceiling == "latency":
        return f"the prefill queue passes the {plan.prefill_budget_s:.2f} s left of the TTFT budget"
    if ceiling == "link":
        return f"{layout.link['name']} busy all the time"
    if ceiling == "prefill cache":
        return "the prefill instances keep too few sessions warm"
    if ceiling == "cache":
        return "the decode instances keep too few sessions warm"
    return "decode falls under the floor"
