"""Decode's effective MFU (planning.decode.decode_mfu): the FLOPs a step executes over its roofline time, as a
share of the group's dense peak; worked on contexts that all have one length, so the answer is arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from servesize.planning.decode import ContextBank, DecodeSetup, decode_mfu

CONTEXT = 10_000


def _bank(fills: int = 4) -> ContextBank:
    return ContextBank.from_columns(lambda c0, c1: np.full((fills, c1 - c0), float(CONTEXT)), fills)


def _setup(**kw) -> DecodeSetup:
    base = dict(bandwidth_bytes_per_s=4.8e12, weight_bytes_per_step=54e9, kv_bytes_per_token_read=65_536,
                bandwidth_efficiency=0.8, tp_efficiency=1.0, peak_flops_per_s=989e12, compute_efficiency=0.7,
                flops_per_token=2 * 27e9, attention_flops_per_context_token=4 * 5120 * 16)
    return DecodeSetup(**{**base, **kw})


def test_decode_mfu_is_the_steps_flops_over_its_roofline_time_and_the_peak():
    setup = _setup()
    ns = [1, 16, 256]
    got = decode_mfu(setup, ns, _bank())
    for n, mfu in zip(ns, got):
        flops = n * 2 * 27e9 + 4 * 5120 * 16 * n * CONTEXT
        memory_s = (54e9 + n * CONTEXT * 65_536) / (4.8e12 * 0.8)
        compute_s = flops / (989e12 * 0.7)
        assert mfu == pytest.approx(flops / max(memory_s, compute_s) / 989e12)


def test_a_compute_bound_step_runs_at_the_compute_efficiency():
    """Past the roofline's ridge the step takes its compute time: MFU is then the compute efficiency itself."""
    setup = _setup(kv_bytes_per_token_read=0.0, weight_bytes_per_step=1.0)
    assert decode_mfu(setup, [64], _bank())[0] == pytest.approx(0.7)


def test_decode_mfu_is_none_where_the_gpus_flops_are_not_priced():
    assert decode_mfu(_setup(peak_flops_per_s=0.0), [1, 2], _bank()) is None
