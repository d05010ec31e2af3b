"""Parameter ledger: term-by-term counts against published figures and a closed form."""

import pytest

from servesize.errors import UnsupportedArchitecture
from servesize.model.architecture import from_config
from servesize.model.catalogue import count_granularity, is_precise, load_catalogue
from servesize.model.ledger import GROUPS, parameter_ledger

CATALOGUE = load_catalogue()


def _published_cases():
    """(test id, key, which, published, tolerance) for every figure precise enough for a 1% check."""
    cases = []
    for key, e in CATALOGUE.items():
        if e.published_untestable:
            continue
        if is_precise(e.published_params_text):
            cases.append(pytest.param(key, "total", e.published_params,
                                      id=f"{key} total is within 1% of the published {e.published_params_text}"))
        if is_precise(e.published_active_text):
            cases.append(pytest.param(key, "active", e.published_active,
                                      id=f"{key} active is within 1% of the published {e.published_active_text}"))
        if is_precise(e.published_params_with_mtp_text):
            cases.append(pytest.param(key, "total_with_mtp", e.published_params_with_mtp,
                                      id=f"{key} total with MTP is within 1% of the published {e.published_params_with_mtp_text}"))
    return cases


@pytest.mark.parametrize("key, which, published", _published_cases())
def test_ledger_matches_the_published_count(key, which, published):
    entry = CATALOGUE[key]
    ledger = parameter_ledger(entry.architecture())
    if which == "active" and not entry.published_active_counts_embedding:
        counted = ledger.active - ledger.groups["embedding"]  # the source leaves out the embedding lookup
    else:
        counted = getattr(ledger, which)
    assert abs(counted / published - 1) <= 0.01, f"{counted:,} vs {published:,}"


def test_the_published_checks_cover_the_models_the_brief_names():
    ids = {p.values[0] + ":" + p.values[1] for p in _published_cases()}
    for must in ("llama-3.1-8b:total", "qwen3-30b-a3b:total", "gpt-oss-120b:total", "gpt-oss-120b:active",
                 "deepseek-v3:total", "deepseek-v3:active", "mixtral-8x7b:total", "mixtral-8x7b:active", "gemma-3-27b:total"):
        assert must in ids


@pytest.mark.parametrize("text, precise", [("8.03B", True), ("30.5B", True), ("235B", True), ("3.3B", False),
                                           ("27B", False), ("400B", False), ("1T", False), ("36.6B", True)])
def test_a_published_figure_is_tested_only_when_its_rounding_is_finer_than_one_percent(text, precise):
    assert is_precise(text) is precise
    assert count_granularity("30.5B") == pytest.approx(0.05 / 30.5)


def test_dense_llama_equals_the_term_by_term_count():
    arch = CATALOGUE["llama-3.1-8b"].architecture()
    h, L, V, I, kv = 4096, 32, 128256, 14336, 8 * 128  # noqa: E741 - paper notation: I is the FFN width
    expected = (V * h                                  # embedding
                + V * h                                # lm_head (untied)
                + L * (h * h + 2 * h * kv + h * h)     # q, k, v, o
                + L * 3 * h * I                        # gate, up, down
                + L * 2 * h + h)                       # two RMSNorms per layer, final norm
    ledger = parameter_ledger(arch)
    assert ledger.total == expected == 8_030_261_248
    assert ledger.active == ledger.total and ledger.expert_params_per_token == 0


def test_dense_llama_is_close_to_the_twelve_l_h_squared_closed_form():
    # Without GQA and with intermediate 4h, a block holds 4h^2 (attention) + 8h^2 (MLP) = 12 h^2.
    h, L, V = 1024, 8, 1000
    arch = from_config({"model_type": "llama", "hidden_size": h, "vocab_size": V, "num_hidden_layers": L,
                        "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": 4 * h,
                        "tie_word_embeddings": True})
    ledger = parameter_ledger(arch)
    # SwiGLU has three matrices: 3 * h * 4h = 12 h^2 for the MLP, so the block is 16 h^2 here.
    assert ledger.total == 16 * L * h * h + V * h + L * 2 * h + h
    assert ledger.groups["lm_head"] == 0


def test_mtp_is_reported_separately_and_not_in_total():
    ledger = parameter_ledger(CATALOGUE["deepseek-v3"].architecture())
    assert ledger.total_with_mtp == ledger.total + ledger.groups["mtp"]
    assert abs(ledger.total / 671e9 - 1) < 0.001
    # README_WEIGHTS.md: 11.5B unique MTP parameters plus the stored copies of the 0.9B embedding and head.
    copies = 2 * 129280 * 7168
    assert abs((ledger.groups["mtp"] - copies) / 11.5e9 - 1) < 0.01


def test_moe_active_is_total_minus_experts_plus_k_of_e():
    ledger = parameter_ledger(CATALOGUE["qwen3-30b-a3b"].architecture())
    experts = 48 * 128 * 3 * 2048 * 768
    assert ledger.groups["experts"] == experts
    assert ledger.active == ledger.total - experts + experts * 8 // 128


def test_qwen3_next_fused_and_qwen3_5_split_projections_hold_the_same_parameters():
    base = dict(hidden_size=2048, vocab_size=1000, num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=2,
                head_dim=256, intermediate_size=512, full_attention_interval=4, linear_num_key_heads=16,
                linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
                num_experts=8, num_experts_per_tok=2, moe_intermediate_size=512, shared_expert_intermediate_size=512,
                tie_word_embeddings=False)
    nxt = parameter_ledger(from_config({"model_type": "qwen3_next", **base}))
    q35 = parameter_ledger(from_config({"model_type": "qwen3_5_moe_text", **base}))
    key_dim, value_dim = 16 * 128, 32 * 128
    per_layer = 2048 * (2 * key_dim + 2 * value_dim + 2 * 32) + value_dim * 2048 + (2 * key_dim + value_dim) * 4 + 2 * 32 + 128
    assert nxt.groups["linear_attention"] == q35.groups["linear_attention"] == 3 * per_layer


def test_gpt_oss_counts_attention_sinks_and_expert_biases_outside_the_linear_part():
    ledger = parameter_ledger(CATALOGUE["gpt-oss-120b"].architecture())
    assert ledger.groups["experts"] - ledger.linear["experts"] == 36 * 128 * (2 * 2880 + 2880)
    assert ledger.groups["attention"] - ledger.linear["attention"] == 36 * ((64 + 2 * 8) * 64 + 2880) + 36 * 64


def test_deepseek_router_holds_the_score_correction_bias():
    ledger = parameter_ledger(CATALOGUE["deepseek-v3"].architecture())
    assert ledger.groups["router"] == 58 * 256 * 7168 + 58 * 256


def test_deepseek_v3_2_adds_the_indexer():
    v32 = parameter_ledger(CATALOGUE["deepseek-v3.2"].architecture())
    assert v32.groups["indexer"] == 61 * (1536 * 64 * 128 + 7168 * 128 + 7168 * 64) + 61 * 2 * 128


def test_llama4_maverick_interleaves_dense_and_moe_layers():
    ledger = parameter_ledger(CATALOGUE["llama-4-maverick-17b-128e"].architecture())
    assert ledger.groups["mlp"] == 24 * 3 * 5120 * 16384
    assert ledger.groups["experts"] == 24 * 128 * 3 * 5120 * 8192


def test_gemma3_vision_tower_is_counted_from_vision_config():
    ledger = parameter_ledger(CATALOGUE["gemma-3-27b"].architecture())
    # Gemma 3 technical report: a 417M-parameter SigLIP encoder; + 6.2M for the projector.
    assert abs((ledger.groups["vision"] - 1152 * 5376 - 1152) / 417e6 - 1) < 0.01


def test_every_ledger_has_every_group_and_linear_never_exceeds_the_group():
    for key, e in CATALOGUE.items():
        ledger = parameter_ledger(e.architecture())
        assert tuple(ledger.groups) == GROUPS, key
        assert all(0 <= ledger.linear[g] <= ledger.groups[g] for g in GROUPS), key


def test_the_derivation_renders_each_group_as_arithmetic():
    text = parameter_ledger(CATALOGUE["llama-3.1-8b"].architecture()).explain()
    assert "32 × (4,096 × 32 × 128 + 2 × 4,096 × 8 × 128 + 32 × 128 × 4,096)" in text
    assert "total = 8,030,261,248 params" in text


def test_an_unknown_vision_tower_is_refused():
    config = {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text", "hidden_size": 64, "vocab_size": 10,
              "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "intermediate_size": 64, "sliding_window": 8, "sliding_window_pattern": 6},
              "vision_config": {"model_type": "mystery_vit"}}
    with pytest.raises(UnsupportedArchitecture, match="vision_config.model_type"):
        parameter_ledger(from_config(config))


def test_to_dict_carries_totals_and_groups():
    d = parameter_ledger(CATALOGUE["mixtral-8x7b"].architecture()).to_dict()
    assert d["total"] == sum(v for g, v in d["groups"].items() if g != "mtp")
    assert set(d) >= {"groups", "linear", "total", "total_with_mtp", "active", "expert_params_per_token"}
