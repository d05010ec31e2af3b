"""The explorer's glossary: each term the page uses, in a sentence, with the figures it names read from the
library (the modelled assumptions of data/assumptions.toml, the planning percentile), never copied by hand:
change a default there and the glossary follows. Served with ``GET /api/catalogue``; the page only draws it.
"""

from __future__ import annotations

from typing import Any

import servesize.api as api
from servesize.api import PLANNING_PERCENTILE
from servesize.assumptions import modelled_assumptions


def _band(entry: dict[str, Any], unit: str = "") -> str:
    """'default 0.7, believed to lie in 0.55-0.85; the seed's 1', from one assumption's own entry."""
    out = f"default {entry['default']:g}{unit}"
    if "low" in entry and "high" in entry:
        out += f", believed to lie in {entry['low']:g}-{entry['high']:g}{unit}"
    if entry.get("seed") is not None and entry["seed"] != entry["default"]:
        out += f"; the seed's {entry['seed']:g}{unit}"
    return out


def glossary() -> list[dict]:
    """[{term, abbr, text, assumption}]: ``assumption`` names the data/assumptions.toml entry whose figures the
    text quotes (None when it quotes none), so a reader (and a test) can trace each number."""
    a = modelled_assumptions()
    mfu, mbu = a["prefill.mfu"], a["decode.bandwidth_efficiency"]
    ttft, floor, comfy = a["latency.ttft_limit_s"], a["decode.floor_hard_tok_s"], a["decode.floor_comfortable_tok_s"]
    link = a["offload.host_link_efficiency"]
    thinks = ", ".join(f"{p.name} {p.values['think_time_s']:g} s" for p in api.presets())
    default = api.load_model()[a["load.model"]["default"]]
    return [
        {"term": "Warm user", "abbr": "", "assumption": None,
         "text": "A user whose session's KV cache is still in the pool when their next request arrives: it prefills "
                 "only the new turn. The cache ceiling is the warm users a Monte-Carlo fill of the pool keeps; "
                 f"{PLANNING_PERCENTILE}."},
        {"term": "p5 / p50 / p95", "abbr": "", "assumption": None,
         "text": "Percentiles over the Monte-Carlo fills: p5 is the count 95% of fills reach or beat (the planning "
                 "number), p50 the median, p95 the optimistic end."},
        {"term": "Time to first token", "abbr": "TTFT", "assumption": "latency.ttft_limit_s",
         "text": "From a request's arrival to its first output token: the queue, then its prefill. The latency "
                 f"ceiling ({_band(ttft, ' s')} budget) is the {default.meaning('latency')}."},
        {"term": "Load model", "abbr": "", "assumption": "load.model",
         "text": " ".join(f"'{m.title}' (load.model = {m.name}"
                          f"{', the default' if m.name == a['load.model']['default'] else ''}): {m.summary}"
                          for m in api.load_model().values())},
        {"term": "Model FLOP utilisation", "abbr": "MFU", "assumption": "prefill.mfu",
         "text": f"The share of the GPU's dense peak FLOP/s that prefill achieves ({_band(mfu)}): every prefill time, "
                 "and so TTFT and the saturation ceiling, scales with 1 / MFU."},
        {"term": "Model bandwidth utilisation", "abbr": "MBU", "assumption": "decode.bandwidth_efficiency",
         "text": f"The share of the datasheet HBM bandwidth a decode step streams at ({_band(mbu)}): per-user decode "
                 "is memory-bound, so it scales with MBU."},
        {"term": "Decode floor", "abbr": "", "assumption": "decode.floor_hard_tok_s",
         "text": f"The per-user decode speed (p50) the decode ceiling keeps every user above: {floor['default']:g} "
                 f"tok/s, with {comfy['default']:g} tok/s the comfortable one."},
        {"term": "Cold miss", "abbr": "", "assumption": None,
         "text": "A request whose session is no longer in the pool (evicted, or invalidated): it prefills its whole "
                 "context again. A hit prefills only the new turn."},
        {"term": "Invalidation rate / miss rate", "abbr": "f, f*", "assumption": None,
         "text": "f is the share of requests whose cached prefix no longer matches (an edit, a new system prompt): "
                 "they miss however large the pool. f* is the miss rate at which the binding ceiling changes hands "
                 "(chart G, the ceilings against the cache-miss rate)."},
        {"term": "Cold-burst tolerance", "abbr": "B*", "assumption": "latency.ttft_limit_s",
         "text": f"How many cold misses arriving at once one replica answers within the TTFT budget "
                 f"({ttft['default']:g} s by default) at the load shown (chart F: against the miss rate)."},
        {"term": "Think time", "abbr": "", "assumption": None,
         "text": f"The mean time between one user's requests, the workload's own (the presets: {thinks}; or fitted "
                 "from a request log): with the users, it sets the request rate every queue sees."},
        {"term": "Tensor / data parallel", "abbr": "TP, DP", "assumption": None,
         "text": "TP splits one engine across GPUs (one KV pool, each GPU holding its share of every layer); DP runs "
                 "independent replicas, each with its own pool (warm capacity adds up only with sticky routing)."},
        {"term": "CPU offload and the host link", "abbr": "", "assumption": "offload.host_link_efficiency",
         "text": "vLLM's --kv-offloading-size keeps KV blocks in host RAM: more sessions stay warm, but a turn whose "
                 "session is in host RAM first brings it back over the GPU's host link (gpus.toml), at "
                 f"{_band(link)} of the link's one-way rate, uncontended."},
    ]
