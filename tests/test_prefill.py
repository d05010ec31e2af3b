
import numpy as np
import pytest

from seed_reference import reference_contexts
from servesize.assumptions import assumption
from servesize.errors import BadInput
from servesize.model.hardware import find_gpu
from servesize.planning.prefill import PrefillSetup, prefill_costs, prefill_flops
from servesize.workload.model import Workload

# Qwen3.6-27B: 24.5e9 matmul params, 16 full-attention layers x (24 heads x 256) wide;
# H200 dense FP8 1.979e15 FLOP/s (the datasheet's 3,958 is with sparsity)
P_27B, D_27B, LA_27B, H200_FP8 = 24.5e9, 24 * 256, 16, 1.979e15


SEED_MFU = assumption("prefill.mfu", "seed")  # the seed's figures are at its own MFU (the default is fitted: #28)


def setup_27b(tp=1, **kw):
    return PrefillSetup(gemm_params=P_27B, attention_width=D_27B, full_attention_layers=LA_27B,
                        peak_flops_per_gpu=H200_FP8, tp=tp, **{"mfu": SEED_MFU, **kw})


def test_flops_are_gemm_plus_causal_attention_plus_attention_over_the_cache():
    flops = prefill_flops(1000, 500, gemm_params=1e9, attention_width=4096, full_attention_layers=8)
    assert flops == 2 * 1e9 * 1000 + 2 * 1000**2 * 4096 * 8 + 4 * 1000 * 500 * 4096 * 8


def test_chunking_does_not_change_the_flops_of_a_context():
    one_pass = prefill_flops(2 * 32_768, 0, P_27B, D_27B, LA_27B)
    two_chunks = prefill_flops(32_768, 0, P_27B, D_27B, LA_27B) + prefill_flops(32_768, 32_768, P_27B, D_27B, LA_27B)
    assert two_chunks == pytest.approx(one_pass, rel=1e-12)


def test_a_32k_chunk_of_the_27b_is_1817_tflop_and_2_04_s_on_one_h200():
    s = setup_27b()
    assert s.flops(32_768) / 1e12 == pytest.approx(1817, abs=1)
    expected_s = (2 * P_27B * 32_768 + 2 * 32_768**2 * D_27B * LA_27B) / (H200_FP8 * 0.45)
    assert s.seconds(32_768) == pytest.approx(expected_s)
    assert s.seconds(32_768) == pytest.approx(2.040, abs=0.001)  # working-set-model / seed docs: 2,040 ms


def test_tp2_divides_by_two_gpus_at_090_efficiency():
    assert setup_27b(tp=2).seconds(32_768) == pytest.approx(setup_27b().seconds(32_768) / (2 * 0.9))


def test_mfu_bracket_orders_prefill_times():
    t = [setup_27b(mfu=m).seconds(32_768) for m in (0.60, 0.45, 0.30)]
    assert t[0] < t[1] < t[2]


def test_miss_and_hit_moments_from_given_contexts_are_worked_out_per_context():
    s = PrefillSetup(gemm_params=1e9, attention_width=1000, full_attention_layers=10, peak_flops_per_gpu=1e15, mfu=0.5)
    contexts = np.array([10_000.0, 30_000.0])
    rate = 1e15 * 0.5
    miss = [(2 * 1e9 * L + 2 * L**2 * 1000 * 10) / rate for L in contexts]
    hit = [(2 * 1e9 * 2000 + 2 * 2000**2 * 1000 * 10 + 4 * 2000 * L * 1000 * 10) / rate for L in contexts]
    c = prefill_costs(s, contexts=contexts, warm_turn_tokens=2000)
    assert c.miss_s == pytest.approx(np.mean(miss))
    assert c.miss_s2 == pytest.approx(np.mean(np.square(miss)))
    assert c.hit_s == pytest.approx(np.mean(hit))
    assert c.hit_s2 == pytest.approx(np.mean(np.square(hit)))
    assert c.mean_context_tokens == 20_000


def test_the_seeds_miss_and_hit_costs_on_the_27b():
    # working-set-model / seed docs: mean context 40.1k; miss 2,826 ms, hit 146.4 ms on 1xH200,
    # 1,570 / 81.3 ms on TP2; a miss costs 19 hits; 0.35 cold requests/s saturate one H200
    one = prefill_costs(setup_27b(), sample_contexts=reference_contexts)
    assert one.mean_context_tokens == pytest.approx(40_100, rel=0.01)
    assert one.miss_s == pytest.approx(2.826, rel=0.01)
    assert one.hit_s == pytest.approx(0.1464, rel=0.01)
    assert round(one.thrash_ratio) == 19
    assert round(one.max_cold_rate_per_s, 2) == 0.35
    two = prefill_costs(setup_27b(tp=2), sample_contexts=reference_contexts)
    assert two.miss_s == pytest.approx(1.570, rel=0.01)
    assert two.hit_s == pytest.approx(0.0813, rel=0.01)


def test_the_expected_miss_prices_the_tail_not_the_mean_context():
    s = setup_27b()
    c = prefill_costs(s, sample_contexts=reference_contexts, samples=50_000)
    assert c.miss_s > s.miss_seconds(c.mean_context_tokens)
    assert c.miss_s2 > c.miss_s**2


def test_a_warm_hit_attends_over_its_cached_context():
    s = setup_27b()
    assert s.hit_seconds(100_000, 2000) > s.hit_seconds(0, 2000) == s.seconds(2000)


def test_prefill_costs_explain_the_miss_from_the_same_terms():
    c = prefill_costs(setup_27b(), sample_contexts=reference_contexts, samples=20_000)
    assert c.derivation.value("miss_ttft_s") == c.miss_s
    assert "(2 × P × E_L + 2 × d × L_a × E_L2) / achieved_flops_per_s" in c.derivation.render()
    assert c.to_dict()["hit_ttft_s"] == c.hit_s


@pytest.mark.parametrize("bad", [dict(mfu=0.0), dict(mfu=1.5), dict(gemm_params=0), dict(peak_flops_per_gpu=0), dict(tp=3.5)])
def test_impossible_prefill_settings_are_refused(bad):
    args = dict(gemm_params=P_27B, attention_width=D_27B, full_attention_layers=LA_27B, peak_flops_per_gpu=H200_FP8)
    with pytest.raises(BadInput):
        PrefillSetup(**{**args, **bad})


def test_prefill_costs_need_contexts():
    with pytest.raises(BadInput):
        prefill_costs(setup_27b())


def test_prefill_runs_on_the_projects_own_workload():
    wl = Workload.seed_reference()
    c = prefill_costs(setup_27b(), sample_contexts=lambda rng, n: wl.sample(rng, n).full_tokens)
    assert c.mean_context_tokens == pytest.approx(wl.mean_tokens(), rel=0.01)
    assert c.miss_s == pytest.approx(2.826, rel=0.01)


def test_the_catalogue_h200_fp8_peak_gives_the_seeds_32k_chunk_time():
    s = PrefillSetup(gemm_params=P_27B, attention_width=D_27B, full_attention_layers=LA_27B,
                     peak_flops_per_gpu=find_gpu("H200").dense_flops_per_s("fp8"), mfu=SEED_MFU)
    assert s.seconds(32_768) == pytest.approx(2.040, abs=0.001)


def test_from_the_length_moments_one_context_length_gives_plain_arithmetic():
    s = setup_27b()
    length = 40_000.0
    c = prefill_costs(s, length_moments=(length, length**2, length**3, length**4), warm_turn_tokens=2000)
    assert c.miss_s == pytest.approx(s.miss_seconds(length))
    assert c.miss_s2 == pytest.approx(s.miss_seconds(length) ** 2)
    assert c.hit_s2 == pytest.approx(s.hit_seconds(length, 2000) ** 2)
    assert c.samples == 0 and "closed form" in c.derivation.render()


def test_the_closed_form_moments_agree_with_a_large_sample_of_the_seed_workload():
    wl = Workload.seed_reference()
    exact = prefill_costs(setup_27b(), length_moments=tuple(wl.length_moment(k) for k in (1, 2, 3, 4)), warm_turn_tokens=2000)
    sampled = prefill_costs(setup_27b(), sample_contexts=lambda rng, n: wl.sample(rng, n).full_tokens, samples=1_000_000,
                            warm_turn_tokens=2000)
    for name in ("miss_s", "miss_s2", "hit_s", "hit_s2"):
        assert getattr(exact, name) == pytest.approx(getattr(sampled, name), rel=0.01)
    assert exact.miss_s == pytest.approx(2.826, rel=0.01)  # the seed's miss on the 27B


def test_a_warm_turn_prefills_its_turn_the_uncached_part_of_its_last_block_and_a_dropped_hit_block():
    """The plan's warm prefill (planning.ceilings.warm_prefill_tokens): the new turn, (block - 1) / 2 tokens of the
    block a hit cannot end inside, and the hit's last block where MTP drafts are priced (vLLM drops it)."""
    from dataclasses import replace

    from servesize.planning.ceilings import warm_prefill_tokens
    from servesize.resolve import plan_inputs
    from servesize.scenario import Scenario

    inputs = plan_inputs(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", kv_cache_dtype="fp8"))
    fixed, turn = inputs.memory_and_fixed()[1], inputs.workload.warm_turn_tokens
    assert fixed.block_size == 1600 and fixed.drops_hit_block
    assert warm_prefill_tokens(fixed, inputs.workload, inputs.knobs) == turn + 799.5 + 1600
    no_drafts = replace(inputs.knobs, mtp_speedup=1.0)
    assert warm_prefill_tokens(fixed, inputs.workload, no_drafts) == turn + 799.5
    dense = plan_inputs(Scenario(model="llama-3.1-8b", gpus="1xH100"))
    assert warm_prefill_tokens(dense.memory_and_fixed()[1], dense.workload, dense.knobs) == dense.workload.warm_turn_tokens + 7.5
