import math

import numpy as np
import pytest

from seed_reference import reference_contexts
from servesize.assumptions import assumption, modelled_assumptions
from servesize.errors import BadInput
from servesize.model.hardware import find_gpu
from servesize.planning.decode import (
    DecodeSetup,
    ExpertRouting,
    contexts_from,
    decode_ceiling,
    decode_curve,
    decode_speed,
    dense_weights_read_per_step,
    mtp_acceptance_for,
    mtp_speedup,
    tp_efficiency,
)
from servesize.workload.model import Workload

GiB = 2**30





def constant_contexts(tokens):
    return lambda rng, size: np.full(size, float(tokens))


# Qwen3.6-27B FP8 on one H200, with the seed's conventions (working-set-model.md 2.7, section 3)
SEED_27B = dict(
    bandwidth_bytes_per_s=4.8e12,
    weight_bytes_per_step=28.8 * GiB,  # the seed counts the whole W, embedding included
    kv_bytes_per_token_read=16 * 4 * 256 * 2 * 1,  # 16 attention layers x 4 KV heads x 256 x K+V x FP8
    state_bytes_per_sequence=78_643_200,
    bandwidth_efficiency=1.0,
)
# Qwen3.6-35B-A3B FP8: shared 1.94e9 B; 256 experts x 3 x 2048 x 512 x 40 layers routed, 8 per token
SEED_35B_A3B = dict(
    bandwidth_bytes_per_s=4.8e12,
    weight_bytes_per_step=1.94e9,
    kv_bytes_per_token_read=10 * 2 * 256 * 2 * 1,
    state_bytes_per_sequence=33_423_360,
    bandwidth_efficiency=1.0,
    experts=ExpertRouting(all_expert_bytes=256 * 3 * 2048 * 512 * 40, num_experts=256, experts_per_token=8),
)


def test_mtp_speedup_is_the_geometric_sum_of_accepted_drafts():
    assert mtp_speedup(0.5, 2) == 1 + 0.5 + 0.25
    assert mtp_speedup(0.0, 3) == 1.0
    assert mtp_speedup(1.0, 3) == 4.0


def test_the_seeds_1_7x_is_47_percent_acceptance_with_two_drafts():
    a = mtp_acceptance_for(1.7, 2)
    assert a == pytest.approx((-1 + math.sqrt(1 + 4 * 0.7)) / 2)  # a^2 + a - 0.7 = 0
    assert round(a, 4) == 0.4747
    assert mtp_speedup(a, 2) == pytest.approx(1.7)


@pytest.mark.parametrize(
    "tp, expected",
    [(1, 1.0), (2, 0.90), (4, 0.90**2), (8, 0.90**3), (16, 0.90**3 * 0.65), (32, 0.90**3 * 0.65**2)],
)
def test_tp_efficiency_is_090_per_doubling_then_065_beyond_the_nvlink_domain(tp, expected):
    assert tp_efficiency(tp) == pytest.approx(expected)


def test_dense_decode_streams_everything_but_the_input_embedding():
    total, embed = 30_000_000_000, 1_270_000_000
    assert dense_weights_read_per_step(total, embed, tied_embeddings=False) == total - embed
    # tied: the embedding matrix is the lm_head, read in full every step
    assert dense_weights_read_per_step(total, embed, tied_embeddings=True) == total
    # the seed's convention (whole W) is one flag away
    assert dense_weights_read_per_step(total, embed, tied_embeddings=False, seed_convention=True) == total


def test_linear_expert_union_saturates_at_e_over_k_decoders():
    e = ExpertRouting(all_expert_bytes=256_000, num_experts=256, experts_per_token=8)
    assert e.union_bytes(1) == 256_000 * 8 / 256
    assert e.union_bytes(16) == 256_000 * 16 * 8 / 256
    assert e.union_bytes(32) == 256_000
    assert e.union_bytes(500) == 256_000


def test_expected_expert_union_under_uniform_routing():
    e = ExpertRouting(all_expert_bytes=256_000, num_experts=256, experts_per_token=8, union="expected")
    assert e.union_bytes(1) == pytest.approx(256_000 * 8 / 256)
    assert e.union_bytes(32) == pytest.approx(256_000 * (1 - (1 - 8 / 256) ** 32))
    linear = ExpertRouting(256_000, 256, 8)
    ns = np.arange(1, 200)
    assert np.all(e.union_bytes(ns) <= linear.union_bytes(ns) + 1e-9)


def test_step_bytes_are_weights_plus_every_context_plus_state_read_and_written():
    s = DecodeSetup(bandwidth_bytes_per_s=1e12, weight_bytes_per_step=10e9, kv_bytes_per_token_read=1000,
                    state_bytes_per_sequence=5e6, bandwidth_efficiency=1.0)
    contexts = np.array([[1000, 2000, 3000]])
    assert s.step_bytes(contexts)[0] == 10e9 + (1000 + 2000 + 3000) * 1000 + 2 * 3 * 5e6


def test_sparse_attention_adds_topk_reads_capped_at_the_context():
    s = DecodeSetup(bandwidth_bytes_per_s=1e12, weight_bytes_per_step=0, kv_bytes_per_token_read=10,
                    topk_tokens=2048, topk_bytes_per_token=100, bandwidth_efficiency=1.0)
    assert s.step_bytes(np.array([[1000, 5000]]))[0] == (1000 + 5000) * 10 + (1000 + 2048) * 100


def test_per_user_speed_is_speedup_times_effective_bandwidth_over_step_bytes():
    s = DecodeSetup(bandwidth_bytes_per_s=4e12, weight_bytes_per_step=20e9, kv_bytes_per_token_read=0, tp=2,
                    spec_speedup=1.5, bandwidth_efficiency=0.7)
    expected = 1.5 * 2 * 4e12 * 0.7 * 0.9 / 20e9
    assert s.per_user_tokens_per_s(20e9) == pytest.approx(expected)


def test_decode_ceiling_with_equal_contexts_matches_the_closed_form():
    s = DecodeSetup(bandwidth_bytes_per_s=4.8e12, weight_bytes_per_step=30e9, kv_bytes_per_token_read=32_768,
                    state_bytes_per_sequence=78_643_200, spec_speedup=1.7, bandwidth_efficiency=1.0)
    per_sequence = 40_000 * 32_768 + 2 * 78_643_200
    expected = math.floor((1.7 * 4.8e12 / 40 - 30e9) / per_sequence)
    assert decode_ceiling(s, constant_contexts(40_000), floor_tok_s=40, fills=8).n == expected


def test_the_seeds_118_decoders_at_40_tok_s_with_mtp():
    setup = DecodeSetup(**SEED_27B, spec_speedup=1.7)
    result = decode_ceiling(setup, reference_contexts, floor_tok_s=40, seed=0)
    assert abs(result.n - 118) <= 3
    assert result.at_ceiling.p50_tok_s >= 40 > result.p50_one_more_tok_s


def test_the_seeds_60_decoders_without_mtp():
    assert abs(decode_ceiling(DecodeSetup(**SEED_27B), reference_contexts, floor_tok_s=40).n - 60) <= 3


def test_fp16_kv_gives_the_seeds_39_tok_s_per_user_at_64_sequences():
    setup = DecodeSetup(**{**SEED_27B, "kv_bytes_per_token_read": 2 * 32_768}, spec_speedup=1.7)
    speed = decode_speed(setup, reference_contexts, 64, fills=2000)
    assert speed.p50_tok_s == pytest.approx(39.17, abs=0.5)
    assert speed.p5_tok_s < speed.p50_tok_s < speed.p95_tok_s


def test_tp2_reproduces_the_seeds_228_decoders():
    setup = DecodeSetup(**SEED_27B, spec_speedup=1.7, tp=2)
    assert abs(decode_ceiling(setup, reference_contexts).n - 228) <= 4


def test_moe_35b_a3b_reproduces_355_decoders_with_mtp_and_179_without():
    assert abs(decode_ceiling(DecodeSetup(**SEED_35B_A3B, spec_speedup=1.7), reference_contexts).n - 355) <= 5
    assert abs(decode_ceiling(DecodeSetup(**SEED_35B_A3B), reference_contexts).n - 179) <= 4


def test_the_realistic_default_bandwidth_efficiency_admits_fewer_decoders_than_the_seed():
    seed_setup = DecodeSetup(**SEED_27B, spec_speedup=1.7)
    default_setup = DecodeSetup(**{k: v for k, v in SEED_27B.items() if k != "bandwidth_efficiency"}, spec_speedup=1.7)
    assert default_setup.bandwidth_efficiency == assumption("decode.bandwidth_efficiency") < 1.0
    assert decode_ceiling(default_setup, reference_contexts).n < decode_ceiling(seed_setup, reference_contexts).n


def test_per_user_speed_falls_monotonically_with_concurrency_under_common_random_numbers():
    curve = decode_curve(DecodeSetup(**SEED_27B, spec_speedup=1.7), reference_contexts, range(1, 300, 7))
    assert np.all(np.diff(curve["p50"]) < 0)
    assert np.all(curve["p5"] <= curve["p50"]) and np.all(curve["p50"] <= curve["p95"])


def test_the_same_seed_gives_the_same_ceiling_and_the_curve_agrees_with_the_ceiling():
    setup = DecodeSetup(**SEED_27B, spec_speedup=1.7)
    a = decode_ceiling(setup, reference_contexts, seed=7)
    assert a.n == decode_ceiling(setup, reference_contexts, seed=7).n
    curve = decode_curve(setup, reference_contexts, [a.n, a.n + 1], seed=7)
    assert curve["p50"][0] >= 40 > curve["p50"][1]


def test_a_floor_one_decoder_cannot_meet_gives_zero():
    s = DecodeSetup(bandwidth_bytes_per_s=1e12, weight_bytes_per_step=100e9, kv_bytes_per_token_read=0,
                    bandwidth_efficiency=1.0)
    assert decode_ceiling(s, constant_contexts(1000), floor_tok_s=40).n == 0  # 10 tok/s alone


def test_a_floor_never_reached_is_refused_rather_than_censored():
    s = DecodeSetup(bandwidth_bytes_per_s=1e12, weight_bytes_per_step=1e9, kv_bytes_per_token_read=1,
                    bandwidth_efficiency=1.0)
    with pytest.raises(BadInput, match="not the binding constraint"):
        decode_ceiling(s, constant_contexts(10), floor_tok_s=1, max_n=1024)


@pytest.mark.parametrize("bad", [dict(bandwidth_efficiency=0.0), dict(bandwidth_efficiency=1.2),
                                 dict(spec_speedup=0.5), dict(tp=0), dict(bandwidth_bytes_per_s=0)])
def test_impossible_decode_settings_are_refused(bad):
    with pytest.raises(BadInput):
        DecodeSetup(**{**SEED_27B, **bad})


def test_the_ceiling_explains_itself_from_the_same_numbers():
    result = decode_ceiling(DecodeSetup(**SEED_27B, spec_speedup=1.7), reference_contexts)
    text = result.derivation.render()
    assert "spec_speedup / (step_bytes_p50 / effective_bandwidth + step_overhead_s)" in text
    assert result.to_dict()["decode_ceiling"] == result.n
    assert result.derivation.value("decode_ceiling") == result.n


def test_every_modelled_assumption_has_a_default_the_seeds_value_a_unit_a_reason_and_a_source():
    entries = modelled_assumptions()
    assert "decode.bandwidth_efficiency" in entries and "power.price_per_kwh" in entries
    for name, entry in entries.items():
        for key in ("default", "seed", "unit", "reason", "source"):
            assert entry.get(key) not in (None, ""), f"{name} lacks {key}"
        if "low" in entry:
            assert entry["low"] <= entry["default"] <= entry["high"], name


def test_decode_runs_on_the_projects_own_workload_sampler():
    wl = Workload.seed_reference()  # working-set-model.md 2.6
    result = decode_ceiling(DecodeSetup(**SEED_27B, spec_speedup=1.7), contexts_from(wl))
    assert abs(result.n - 118) <= 3


def test_the_catalogue_h200_reproduces_the_seeds_ceiling():
    h200 = find_gpu("H200")
    setup = DecodeSetup(**{**SEED_27B, "bandwidth_bytes_per_s": h200.bandwidth_bytes_per_s}, spec_speedup=1.7)
    assert abs(decode_ceiling(setup, reference_contexts).n - 118) <= 3


@pytest.mark.parametrize("n", [1, 2, 149, 150, 400])
def test_the_median_by_partition_is_numpys_linear_percentile(n):
    from servesize.percentile import percentile50
    x = np.random.default_rng(n).lognormal(3, 1, n)
    assert percentile50(x) == float(np.percentile(x, 50))


def test_one_context_bank_serves_every_floor_and_setup_and_gives_the_ceiling_a_fresh_bank_gives():
    from servesize.planning.decode import ContextBank
    rng = np.random.default_rng(0)
    columns = rng.lognormal(math.log(31_000), 0.81, (400, 1024))
    bank = ContextBank.from_columns(lambda c0, c1: columns[:, c0:c1], 400)
    seed_setup, no_mtp = DecodeSetup(**SEED_27B, spec_speedup=1.7), DecodeSetup(**SEED_27B)
    shared = [decode_ceiling(s, None, floor_tok_s=f, bank=bank).n for s in (seed_setup, no_mtp) for f in (40, 50)]
    fresh = [decode_ceiling(s, None, floor_tok_s=f, bank=ContextBank.from_columns(lambda c0, c1: columns[:, c0:c1], 400)).n
             for s in (seed_setup, no_mtp) for f in (40, 50)]
    assert shared == fresh
    assert shared[0] > shared[1] and shared[0] > shared[2]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 150, 400, 1001, 51_200])
def test_the_partition_percentiles_are_numpys_bit_for_bit(size):
    from servesize.percentile import percentiles

    rng = np.random.default_rng(size)
    qs = (0, 5, 33.3, 50, 95, 99.9, 100)
    arrays = [rng.lognormal(3.0, 1.2, size), rng.integers(0, 500, size), np.full(size, 7.25),
              rng.normal(0.0, 1.0, size) * 1e300]
    for x in arrays:
        ours = percentiles(x, qs)
        theirs = tuple(float(v) for v in np.percentile(x, qs))
        assert [v.hex() for v in ours] == [v.hex() for v in theirs]  # the same double, not merely close
    with_nan = rng.random(size)
    with_nan[size // 2] = np.nan
    assert all(math.isnan(v) for v in percentiles(with_nan, qs))


def test_one_hand_written_percentile_in_the_source():
    # servesize.percentile is numpy's linear percentile (and median) by one partition (checked bit for bit above
    # and in tests/test_percentile.py); a second hand-written copy beside it is a rule kept equal by hand
    import ast
    import pathlib

    src = pathlib.Path(__file__).resolve().parents[1] / "src" / "servesize"
    found = []
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
                if isinstance(call.func, ast.Attribute) and call.func.attr in ("partition", "argpartition") \
                        and isinstance(call.func.value, ast.Name) and call.func.value.id == "np":
                    found.append(f"{path.relative_to(src)}:{fn.name}")
    assert {f.split(":")[0] for f in found} == {"percentile.py"}, found  # servesize.percentile: numpy's rules
