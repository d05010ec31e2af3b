"""Architecture: every fixture config parses, the catalogue says the same thing, and bad configs are refused."""

import dataclasses
import json
import pathlib

import pytest

from servesize.errors import BadInput, ServesizeError, UnsupportedArchitecture
from servesize.model.architecture import (
    FULL,
    GDN,
    MAMBA,
    MLA,
    SLIDING,
    FullAttention,
    GatedDeltaNet,
    Mla,
    SlidingWindow,
    from_config,
    load_config_file,
)
from servesize.model.catalogue import load_catalogue

CONFIGS = pathlib.Path(__file__).resolve().parent / "fixtures" / "model-configs"  # sources: SOURCES.md there
CONFIG_FILES = sorted(CONFIGS.glob("*/config*.json"))

# catalogue key -> the tests/fixtures/model-configs folder its config facts were written from
CATALOGUE_SOURCES = {
    "llama-3.1-8b": "meta-llama--Meta-Llama-3.1-8B", "llama-3.1-70b": "meta-llama--Meta-Llama-3.1-70B",
    "llama-3.1-405b": "meta-llama--Meta-Llama-3.1-405B", "llama-3.3-70b": "meta-llama--Llama-3.3-70B-Instruct",
    "llama-3.2-1b": "meta-llama--Llama-3.2-1B-Instruct", "llama-3.2-3b": "meta-llama--Llama-3.2-3B-Instruct",
    "llama-4-scout-17b-16e": "meta-llama--Llama-4-Scout-17B-16E-Instruct",
    "llama-4-maverick-17b-128e": "meta-llama--Llama-4-Maverick-17B-128E-Instruct",
    "mistral-7b-v0.3": "mistralai--Mistral-7B-Instruct-v0.3", "mixtral-8x7b": "mistralai--Mixtral-8x7B-v0.1",
    "qwen2.5-7b": "Qwen--Qwen2.5-7B", "qwen2.5-32b": "Qwen--Qwen2.5-32B", "qwen2.5-coder-32b": "Qwen--Qwen2.5-32B",
    "qwen2.5-72b": "Qwen--Qwen2.5-72B", "qwen3-0.6b": "Qwen--Qwen3-0.6B", "qwen3-8b": "Qwen--Qwen3-8B",
    "qwen3-32b": "Qwen--Qwen3-32B", "qwen3-32b-fp8": "Qwen--Qwen3-32B-FP8", "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B",
    "qwen3-30b-a3b-fp8": "Qwen--Qwen3-30B-A3B-FP8", "qwen3-235b-a22b": "Qwen--Qwen3-235B-A22B",
    "qwen3-235b-a22b-fp8": "Qwen--Qwen3-235B-A22B-FP8", "qwen3-next-80b-a3b-thinking": "Qwen--Qwen3-Next-80B-A3B-Thinking",
    "qwen3.5-27b": "Qwen--Qwen3.5-27B", "qwen3.5-35b-a3b": "Qwen--Qwen3.5-35B-A3B", "qwen3.5-122b-a10b": "Qwen--Qwen3.5-122B-A10B",
    "qwen3.5-397b-a17b": "Qwen--Qwen3.5-397B-A17B", "qwen3.6-35b-a3b": "Qwen--Qwen3.6-35B-A3B",
    "qwen3.6-27b": "nvidia--Qwen3.6-27B-NVFP4", "qwen3.6-27b-nvfp4": "nvidia--Qwen3.6-27B-NVFP4",
    "deepseek-v3": "deepseek-ai--DeepSeek-V3", "deepseek-r1": "deepseek-ai--DeepSeek-R1", "deepseek-v3.1": "deepseek-ai--DeepSeek-V3.1",
    "deepseek-v3.2": "deepseek-ai--DeepSeek-V3.2", "deepseek-r1-distill-qwen-32b": "deepseek-ai--DeepSeek-R1-Distill-Qwen-32B",
    "gemma-3-27b": "google--gemma-3-27b-it", "phi-4": "microsoft--phi-4", "kimi-k2": "moonshotai--Kimi-K2-Instruct",
    "minimax-m2.5": "MiniMaxAI--MiniMax-M2.5", "gpt-oss-20b": "openai--gpt-oss-20b", "gpt-oss-120b": "openai--gpt-oss-120b",
    "glm-4.7": "zai-org--GLM-4.7-FP8", "glm-5.2": "zai-org--GLM-5.2",
    "mistral-small-3.1-24b": "mistralai--Mistral-Small-3.1-24B-Instruct-2503",
}
# What the catalogue deliberately states differently from the published file (each said in the entry's source).
ADJUST = {
    "qwen3.6-27b": lambda c: {k: v for k, v in c.items() if k != "quantization_config"},  # Qwen's original is bf16
    "glm-4.7": lambda c: {**c, "attention_bias": True, "use_qk_norm": True, "num_nextn_predict_layers": 1},  # SOURCES.md GLM note
}


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: p.parent.name)
def test_every_fixture_config_parses_into_an_architecture(path):
    if path.name == "config.refused.json":  # a design servesize has no reader for (SOURCES.md): refused, naming it
        with pytest.raises(UnsupportedArchitecture, match="no reader for its layer kind"):
            from_config(load_config_file(path), path.parent.name)
        return
    arch = from_config(load_config_file(path), path.parent.name)
    assert arch.num_layers == (arch.config.get("num_hidden_layers"))
    assert arch.hidden_size > 0 and arch.vocab_size > 0


def test_every_catalogue_entry_names_the_fixture_folder_it_was_written_from():
    assert set(CATALOGUE_SOURCES) == set(load_catalogue())


@pytest.mark.parametrize("key", sorted(CATALOGUE_SOURCES))
def test_catalogue_entry_and_published_config_give_the_same_architecture(key):
    folder = CONFIGS / CATALOGUE_SOURCES[key]
    config = ADJUST.get(key, lambda c: c)(load_config_file(folder))
    from_published = from_config(config, key)
    from_catalogue = load_catalogue()[key].architecture()
    for f in dataclasses.fields(from_published):
        if f.compare:
            assert getattr(from_catalogue, f.name) == getattr(from_published, f.name), f.name
    assert from_catalogue == from_published


def test_qwen3_32b_head_dim_is_the_explicit_128_not_hidden_over_heads():
    arch = from_config(load_config_file(CONFIGS / "Qwen--Qwen3-32B"))
    assert 5120 // 64 == 80
    assert arch.head_dim == 128 and arch.head_dim_explicit


def test_head_dim_falls_back_to_hidden_over_heads_when_absent():
    arch = from_config({"model_type": "llama", "hidden_size": 4096, "vocab_size": 10, "num_hidden_layers": 2,
                        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 1})
    assert arch.head_dim == 4096 // 32 and not arch.head_dim_explicit


def test_qwen2_slides_only_when_use_sliding_window_and_then_from_max_window_layers_on():
    qwen = load_config_file(CONFIGS / "Qwen--Qwen2.5-7B")  # use_sliding_window false, sliding_window 131072
    assert from_config(qwen).kinds == {FULL: 28}
    every = from_config({**qwen, "use_sliding_window": True, "max_window_layers": 0})
    assert every.kinds == {SLIDING: 28} and every.layers[0].window == 131072
    assert from_config({**qwen, "use_sliding_window": True}).kinds == {FULL: 28}  # max_window_layers 28 of 28
    named_none = {k: v for k, v in qwen.items() if k != "sliding_window"}
    assert from_config({**named_none, "use_sliding_window": True, "max_window_layers": 0}).layers[0].window == 4096
    listed = from_config({**qwen, "use_sliding_window": True, "layer_types": ["sliding_attention"] * 28})
    assert listed.kinds == {SLIDING: 28}


def test_a_qwen2_window_on_some_layers_is_refused_as_vllm_refuses_to_start_it():
    qwen = load_config_file(CONFIGS / "Qwen--Qwen2.5-7B")
    with pytest.raises(UnsupportedArchitecture) as e:
        from_config({**qwen, "use_sliding_window": True, "max_window_layers": 4})
    assert "max_window_layers" in str(e.value) and "some layers but not all" in str(e.value)
    with pytest.raises(BadInput):
        from_config({**qwen, "use_sliding_window": "yes"})


# Phi-3-mini-4k-instruct's published geometry (https://huggingface.co/microsoft/Phi-3-mini-4k-instruct/blob/main/
# config.json): a bare 2,047-token sliding_window, no use_sliding_window, no layer_types.
PHI3_MINI_4K = {"model_type": "phi3", "architectures": ["Phi3ForCausalLM"], "hidden_size": 3072, "intermediate_size": 8192,
                "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
                "max_position_embeddings": 4096, "sliding_window": 2047, "tie_word_embeddings": False,
                "torch_dtype": "bfloat16"}


def test_phi3s_bare_sliding_window_is_on_every_layer_and_a_null_one_is_none():
    arch = from_config(PHI3_MINI_4K)
    assert arch.kinds == {SLIDING: 32} and {layer.window for layer in arch.layers} == {2047}
    assert from_config(load_config_file(CONFIGS / "microsoft--phi-4")).kinds == {FULL: 40}  # sliding_window null
    assert from_config({**PHI3_MINI_4K, "sliding_window": 0}).kinds == {FULL: 32}  # vLLM reads 0 as no window


TINY = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 4288, "tie_word_embeddings": False}


def test_starcoder2_takes_its_bare_window_on_every_layer_with_biases():
    arch = from_config({**TINY, "model_type": "starcoder2", "sliding_window": 4096})
    assert arch.kinds == {SLIDING: 4} and arch.layers[0].window == 4096 and arch.attention_bias  # use_bias default
    assert not from_config({**TINY, "model_type": "starcoder2", "use_bias": False}).attention_bias


def test_cohere2_slides_three_layers_in_four_with_one_token_more_than_the_config_says():
    arch = from_config({**TINY, "model_type": "cohere2", "sliding_window": 4096})  # no layer_types: pattern 4
    assert [layer.kind for layer in arch.layers] == [SLIDING, SLIDING, SLIDING, FULL]
    assert arch.layers[0].window == 4097  # vLLM's CohereAttention: sliding_window + 1
    listed = from_config({**TINY, "model_type": "cohere2", "sliding_window": 64,
                          "layer_types": ["full_attention"] + ["sliding_attention"] * 3})
    assert [layer.kind for layer in listed.layers] == [FULL, SLIDING, SLIDING, SLIDING]


def test_exaone4_reads_its_integer_pattern_and_refuses_a_pattern_string_without_layer_types():
    arch = from_config({**TINY, "model_type": "exaone4", "sliding_window": 128, "sliding_window_pattern": 2})
    assert [layer.kind for layer in arch.layers] == [SLIDING, FULL, SLIDING, FULL]
    assert from_config({**TINY, "model_type": "exaone4", "sliding_window": None}).kinds == {FULL: 4}
    with pytest.raises(UnsupportedArchitecture, match="sliding_window_pattern"):
        from_config({**TINY, "model_type": "exaone4", "sliding_window": 128, "sliding_window_pattern": "LLLG"})


def test_smollm3s_nope_layers_cache_as_full_attention_and_slide_only_when_asked():
    assert from_config({**TINY, "model_type": "smollm3"}).kinds == {FULL: 4}
    asked = from_config({**TINY, "model_type": "smollm3", "use_sliding_window": True, "sliding_window": 256})
    assert [layer.kind for layer in asked.layers] == [FULL, FULL, FULL, SLIDING]  # the NoPE layer, every 4th


def test_granite_4_hybrid_reads_mamba2_mixers_and_attention_by_layer_types_with_auto_head_dim():
    cfg = {**TINY, "model_type": "granitemoehybrid", "mamba_n_heads": 8, "mamba_d_state": 16, "mamba_expand": 2,
           "layers_block_type": ["linear_attention"] * 3 + ["full_attention"], "num_local_experts": 4,
           "num_experts_per_tok": 2, "shared_intermediate_size": 64}
    arch = from_config(cfg)
    assert [layer.kind for layer in arch.layers] == [MAMBA, MAMBA, MAMBA, FULL]
    assert arch.layers[0].head_dim == 2 * 128 // 8 and arch.moe.shared_intermediate_size == 64  # 'auto' head dim
    with pytest.raises(UnsupportedArchitecture, match="mamba_d_head"):
        from_config({**cfg, "mamba_d_head": 48})


def test_falcon_h1_has_a_mamba2_mixer_beside_the_attention_of_every_layer_each_a_cache_layer_of_its_own():
    cfg = {**TINY, "model_type": "falcon_h1", "head_dim": 32, "mamba_d_ssm": 256, "mamba_n_heads": 8,
           "mamba_d_head": 32, "mamba_d_state": 16, "mamba_n_groups": 1, "mamba_d_conv": 4}
    arch = from_config(cfg)
    assert arch.num_layers == 4 and [layer.kind for layer in arch.layers] == [FULL] * 4
    assert arch.kinds == {FULL: 4, MAMBA: 4} and len(arch.cache_layers) == 8 and arch.has_state
    assert not arch.attention_free and arch.mixers[0].intermediate_size == 256
    # mamba_d_ssm null: mamba_expand x hidden (FalconH1Config), with the head dim derived from it ('auto')
    wide = from_config({**cfg, "mamba_d_ssm": None, "mamba_expand": 2, "mamba_d_head": "auto"})
    assert wide.mixers[0].intermediate_size == 2 * 128 and wide.mixers[0].head_dim == 2 * 128 // 8
    with pytest.raises(UnsupportedArchitecture, match="mamba_d_head"):
        from_config({**cfg, "mamba_d_head": 48})
    with pytest.raises(UnsupportedArchitecture, match="projectors_bias"):
        from_config({**cfg, "projectors_bias": True})
    # a pipeline stage keeps its layers' mixers with them, and the mixers' weights split with their layers
    from servesize.engine.memory import _stage_arch
    from servesize.engine.weights import _layers_with
    stage = _stage_arch(arch, 2, 4)
    assert stage.kinds == {FULL: 2, MAMBA: 2}
    assert _layers_with(arch, "linear_attention") == [0, 1, 2, 3]


@pytest.mark.parametrize("model_type,kind", [("deepseek_v4", "compressed attention")])
def test_a_hybrid_vllm_serves_and_servesize_cannot_read_is_refused_naming_the_layer_kind_it_lacks(model_type, kind):
    with pytest.raises(UnsupportedArchitecture) as e:
        from_config({**TINY, "model_type": model_type})
    assert kind in str(e.value) and "allowlist" not in str(e.value)


def test_layer_kinds_of_the_hybrid_designs_are_normalised():
    cat = load_catalogue()
    assert cat["qwen3.5-27b"].architecture().kinds == {GDN: 48, FULL: 16}
    assert cat["gemma-3-27b"].architecture().kinds == {SLIDING: 52, FULL: 10}
    assert cat["deepseek-v3"].architecture().kinds == {MLA: 61}


def test_each_layer_kind_is_its_own_type_carrying_only_what_its_cache_needs():
    cat = load_catalogue()
    gemma = cat["gemma-3-27b"].architecture().layers
    assert set(gemma) == {FullAttention(16, 128, 128), SlidingWindow(16, 128, 128, window=1024)}
    mla = cat["deepseek-v3"].architecture().layers[0]
    assert mla == Mla(kv_lora_rank=512, qk_rope_head_dim=64) and mla.latent_dim == 512 + 64
    qwen = cat["qwen3.5-27b"].architecture().layers
    gdn = next(layer for layer in qwen if layer.kind == GDN)
    assert gdn == GatedDeltaNet(num_key_heads=16, num_value_heads=48, key_head_dim=128, value_head_dim=128, conv_kernel=4)
    assert gdn.conv_dim == 2 * 16 * 128 + 48 * 128 and not hasattr(gdn, "num_kv_heads")
    # the same geometry under another kind is another layer
    assert FullAttention(16, 128, 128) != SlidingWindow(16, 128, 128, window=128 * 1024)


# --- fail closed ------------------------------------------------------------------------

LLAMA = {"model_type": "llama", "hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}
QWEN35 = {"model_type": "qwen3_5_text", "hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 4,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
          "full_attention_interval": 4, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
          "linear_key_head_dim": 8, "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4}


def test_an_unknown_model_type_is_refused_naming_the_field():
    with pytest.raises(UnsupportedArchitecture, match="model_type") as info:
        from_config({**LLAMA, "model_type": "rwkv7"})
    assert "rwkv7" in str(info.value)


def test_a_wrapper_text_type_or_a_renamed_design_reads_as_its_family():
    from servesize.model.families import MODEL_TYPES

    renamed = {t: f.name for t, f in MODEL_TYPES.items() if t != f.name}
    assert renamed == {"gemma3_text": "gemma3", "llama4_text": "llama4", "qwen3_5_text": "qwen3_5",
                       "qwen3_5_moe_text": "qwen3_5_moe", "kimi_k2": "deepseek_v3",
                       "qwen2_5_vl_text": "qwen2_5_vl"}
    assert from_config(QWEN35).model_type == "qwen3_5"


def test_a_config_without_num_hidden_layers_is_refused_naming_the_field():
    config = {k: v for k, v in LLAMA.items() if k != "num_hidden_layers"}
    with pytest.raises(UnsupportedArchitecture, match="num_hidden_layers"):
        from_config(config)


def test_layer_types_with_an_unknown_kind_are_refused():
    config = {**QWEN35, "full_attention_interval": None,
              "layer_types": ["linear_attention", "linear_attention", "mystery_attention", "full_attention"]}
    with pytest.raises(UnsupportedArchitecture, match="mystery_attention") as info:
        from_config(config)
    assert "layer_types" in str(info.value)


def test_layer_types_disagreeing_with_full_attention_interval_are_refused():
    config = {**QWEN35, "layer_types": ["full_attention", "linear_attention", "linear_attention", "full_attention"]}
    with pytest.raises(UnsupportedArchitecture, match="full_attention_interval"):
        from_config(config)


def test_a_malformed_json_file_is_one_line_of_bad_input(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",')
    with pytest.raises(BadInput, match="not valid JSON") as info:
        load_config_file(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_a_missing_file_is_bad_input_naming_the_path(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        load_config_file(tmp_path / "nope.json")


def test_a_folder_without_config_json_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="no config.json"):
        load_config_file(tmp_path)


def test_a_json_array_is_not_a_config(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps([1, 2]))
    with pytest.raises(BadInput, match="JSON object"):
        load_config_file(path)


def test_every_refusal_is_a_servesize_error():
    assert issubclass(UnsupportedArchitecture, ServesizeError) and issubclass(BadInput, ServesizeError)


MAMBA2 = {"model_type": "mamba2", "hidden_size": 2560, "num_hidden_layers": 64, "vocab_size": 50288,
          "num_heads": 80, "head_dim": 64, "state_size": 128, "n_groups": 1, "conv_kernel": 4,
          "torch_dtype": "bfloat16", "tie_word_embeddings": True}


def test_a_mamba2_config_reads_as_state_layers_with_their_state_shapes():
    from servesize.engine.kv_cache import kv_per_token, state_shape
    from servesize.model.architecture import MAMBA, from_config

    arch = from_config(MAMBA2, "mamba2-2.7b")
    assert arch.kinds == {MAMBA: 64}
    layer = arch.layers[0]
    shape = state_shape(layer, tp=1, conv_dtype_bytes=2, ssm_dtype_bytes=2)
    # conv: (kernel - 1) x (heads x head_dim + 2 x groups x state); ssm: heads x head_dim x state
    assert shape.conv_elements == (4 - 1) * (80 * 64 + 2 * 1 * 128)
    assert shape.ssm_elements == 80 * 64 * 128
    per = kv_per_token(arch)
    assert per.growing_bytes_per_token == 0
    assert per.state_bytes_per_sequence == 64 * (shape.conv_elements + shape.ssm_elements) * 2


def test_an_attention_free_model_is_sized_as_vllm_sizes_it_one_block_per_sequence(capsys, tmp_path):
    import json

    from servesize.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(MAMBA2))
    assert main(["memory", str(cfg), "--gpus", "1xH100", "--max-model-len", "4096", "--kv-cache-memory-bytes", "4GiB",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # one sequence's state in every layer: conv (4 - 1) x (80 x 64 + 2 x 128) x 2 B + SSM 80 x 64 x 128 x 2 B
    state = 3 * (80 * 64 + 2 * 1 * 128) * 2 + 80 * 64 * 128 * 2
    blocks = 4 * 2**30 // (64 * state)
    assert doc["num_blocks"] == blocks and doc["block_size"] == 4096  # a block is a whole sequence
    assert doc["max_concurrency"] == round(blocks / 1, 2)  # one state block per request, no prefix caching
    assert doc["kv_cache_tokens"] == blocks * 4096


def test_a_function_memoised_per_architecture_computes_once_per_model_and_arguments():
    from servesize.model.architecture import per_architecture
    from servesize.model.catalogue import load_catalogue

    calls = []

    @per_architecture
    def width(arch, tp, dtype="auto"):
        calls.append((arch.name, tp, dtype))
        return arch.hidden_size // tp

    catalogue = load_catalogue()
    a, b = catalogue["llama-3.1-8b"].architecture(), catalogue["qwen3-8b"].architecture()
    assert [width(a, 1), width(a, 1), width(a, 2), width(b, 1), width(a, 2, dtype="fp8"), width(a, 2, dtype="fp8")] \
        == [a.hidden_size, a.hidden_size, a.hidden_size // 2, b.hidden_size, a.hidden_size // 2, a.hidden_size // 2]
    assert len(calls) == 4  # (a, 1), (a, 2), (b, 1), (a, 2, fp8): each once
