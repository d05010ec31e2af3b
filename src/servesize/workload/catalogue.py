"""The workload presets as data (data/workloads.toml): every field a value and its source.

Only this loader reads the file. ``servesize.workload.presets`` turns a preset into a Workload;
``servesize.workload.model`` takes the coding-agent preset's values as the Workload's defaults
(the warm-capacity seed's reference workload), so the two never disagree.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from servesize.datafiles import table

DEFAULT_PRESET = "coding-agent"  # the warm-capacity seed's reference workload

# every field a preset may give, in the order a reader meets them
FIELDS = ("user_median_tokens", "user_sigma", "user_prefix_tokens", "subagent_median_tokens", "subagent_sigma",
          "subagent_prefix_tokens", "subagent_ratio", "subagents_share_prefix", "invalidation", "max_model_len",
          "think_time_s", "output_tokens", "warm_turn_tokens", "speculative", "session_turns")
REQUIRED = ("user_median_tokens", "user_sigma", "user_prefix_tokens", "invalidation", "think_time_s", "output_tokens",
            "warm_turn_tokens", "speculative")
SUBAGENT_FIELDS = ("subagent_median_tokens", "subagent_sigma", "subagent_prefix_tokens", "subagent_ratio")
SPECULATIVE = ("mtp", "none")


@lru_cache(maxsize=1)
def preset_table() -> dict[str, dict[str, Any]]:
    """name -> {description, source, field -> {value, source}}, checked once."""
    raw = table("workloads.toml")
    for name, preset in raw.items():
        _check(name, preset)
    return raw


def _check(name: str, preset: dict[str, Any]) -> None:
    """A preset with a field missing, unknown or unsourced is a bug in the data file: fail loudly."""
    meta = {"description", "source"}
    unknown = sorted(set(preset) - set(FIELDS) - meta)
    missing = [f for f in (*REQUIRED, *meta) if f not in preset]
    if unknown or missing:
        raise ValueError(f"data/workloads.toml [{name}]: unknown {unknown}, missing {missing}")
    given_sub = [f for f in SUBAGENT_FIELDS if f in preset]
    if given_sub and len(given_sub) != len(SUBAGENT_FIELDS):
        raise ValueError(f"data/workloads.toml [{name}]: a subagent class needs all of {', '.join(SUBAGENT_FIELDS)}")
    for field in set(preset) - meta:
        entry = preset[field]
        if not isinstance(entry, dict) or set(entry) != {"value", "source"} or not str(entry["source"]).strip():
            raise ValueError(f"data/workloads.toml [{name}.{field}] needs a value and a source")
    if preset["speculative"]["value"] not in SPECULATIVE:
        raise ValueError(f"data/workloads.toml [{name}.speculative] must be one of {SPECULATIVE}")


def preset_names() -> tuple[str, ...]:
    return tuple(preset_table())


def reference_value(field: str) -> Any:
    """The default preset's (the seed's reference workload's) value of one field."""
    return preset_table()[DEFAULT_PRESET][field]["value"]


# --- the seed's reference workload: the coding-agent preset of data/workloads.toml, where each value
# --- carries its source (working-set-model.md 2.6; seed 000, "One measurement is not a capacity plan")
SEED_USER_MEDIAN_TOKENS = int(reference_value("user_median_tokens"))
SEED_USER_SIGMA = float(reference_value("user_sigma"))
SEED_USER_PREFIX_TOKENS = int(reference_value("user_prefix_tokens"))
SEED_SUBAGENT_MEDIAN_TOKENS = int(reference_value("subagent_median_tokens"))
SEED_SUBAGENT_SIGMA = float(reference_value("subagent_sigma"))
SEED_SUBAGENT_PREFIX_TOKENS = int(reference_value("subagent_prefix_tokens"))
SEED_SUBAGENT_RATIO = float(reference_value("subagent_ratio"))
SEED_INVALIDATION = float(reference_value("invalidation"))
SEED_MAX_MODEL_LEN = int(reference_value("max_model_len"))
SEED_THINK_TIME_S = float(reference_value("think_time_s"))
SEED_OUTPUT_TOKENS = int(reference_value("output_tokens"))
SEED_WARM_TURN_TOKENS = int(reference_value("warm_turn_tokens"))

MIN_THINK_TIME_S = 0.01  # a user who waits under 10 ms between requests is a load generator, not a user
# A pause longer than this between a session's requests is the user away, not thinking: the pause is not think time
# (workload.fit) and a replay's user does not sit it out (simulate.replay), so that "users" counts the people at
# work. 30 minutes of inactivity is the web's usual end of a user's session (Google Analytics' default session
# timeout: https://support.google.com/analytics/answer/2731565). A modelled choice, named so that it can be seen:
# the Claude Code trace's pauses have a tail no single distribution holds (median 9.6 s, mean 141 s, the longest
# 21.6 hours; docs/accuracy.md "The Claude Code trace").
AWAY_AFTER_S = 1800.0
