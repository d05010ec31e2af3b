"""The warm-capacity seed's reference workload as a plain sampler (working-set-model.md 2.6 steps 1-2).

Written independently of servesize.workload.model on purpose, so the decode/prefill/latency tests check
those modules against the seed's definition rather than against our own Workload: users log-normal
median 31k sigma 0.81 behind a 15k prefix, subagents r = 0.10 median 8k sigma 0.9 behind 3k, clipped
to [prefix, 180k]. Only the context length matters to decode and prefill.
"""

import math

import numpy as np


def reference_contexts(rng, size):
    is_sub = rng.random(size) < 0.10 / 1.10
    user = rng.lognormal(math.log(31_000), 0.81, size)
    sub = rng.lognormal(math.log(8_000), 0.9, size)
    prefix = np.where(is_sub, 3_000.0, 15_000.0)
    return np.clip(np.where(is_sub, sub, user), np.minimum(prefix, 180_000), 180_000)
