"""What vLLM does that a plain KV formula misses, as worked examples: the CPU build's defaults,
windows on every layer, in-flight batches, attention-free models, the start-up check and its
refusal, --max-model-len auto, vLLM's number spelling, expert / pipeline parallel placement, MLA's
replicated projections, LoRA slots, speculative drafts and vLLM's quantisation vocabulary.

Rules are vLLM's as read in its release sources (the 0.32 CPU build also runs in tests/integration)."""

import json

import pytest

from cli_runner import run_json
from servesize.engine.deployment import Deployment
from servesize.engine.memory import memory_report, pipeline_stages
from servesize.engine.weights import Placement, mla_replicated_params, weights
from servesize.errors import BadInput, DoesNotFit, WouldNotStart
from servesize.model.architecture import from_config
from servesize.model.catalogue import resolve_model
from servesize.model.hardware import parse_gpus
from servesize.units import GiB, MiB, cdiv

# Mistral-7B-v0.1's published geometry (mistralai/Mistral-7B-v0.1 config.json): the 4,096-token window on every layer.
MISTRAL_V01 = {"model_type": "mistral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 32000, "intermediate_size": 14336, "sliding_window": 4096,
               "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "tie_word_embeddings": False}
# state-spaces/mamba2-2.7b's geometry (as tests/test_architecture.py's MAMBA2): 64 Mamba2 layers, no attention.
MAMBA2_27B = {"model_type": "mamba2", "hidden_size": 2560, "num_hidden_layers": 64, "vocab_size": 50288,
              "num_heads": 80, "head_dim": 64, "state_size": 128, "n_groups": 1, "expand": 2, "conv_kernel": 4,
              "torch_dtype": "bfloat16", "tie_word_embeddings": True}
TINY_LLAMA = {"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 4288, "intermediate_size": 256,
              "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def report(model, gpus="1xH100", **dep):
    arch = model if not isinstance(model, str) else resolve_model(model).architecture
    return memory_report(arch, parse_gpus(gpus), Deployment(**dep))


# -- the CPU build ------------------------------------------------------------------------------

def test_the_cpu_server_defaults_to_a_2048_token_batch_and_128_sequences_per_rank():
    dep = Deployment(device="cpu", vllm_version="0.32.0").resolved(from_config(TINY_LLAMA), parse_gpus("1xH100"))
    assert (dep.max_num_batched_tokens, dep.max_num_seqs) == (2048, 128)
    tp2 = Deployment(device="cpu", tensor_parallel_size=2, vllm_version="0.32.0").resolved(from_config(TINY_LLAMA), None)
    assert (tp2.max_num_batched_tokens, tp2.max_num_seqs) == (2 * 2048, 2 * 128)


def test_mla_on_the_cpu_build_takes_block_16_and_no_chunked_prefill_or_prefix_caching():
    r = report("deepseek-v2-lite" if False else "deepseek-v3", "8xH200", device="cpu", tensor_parallel_size=8,
               max_model_len=4096, kv_cache_memory_bytes=GiB, vllm_version="0.32.0", block_size=128)
    assert r.pool.block_size == 16
    assert (r.deployment.enable_prefix_caching, r.deployment.enable_chunked_prefill) == (False, False)
    assert r.deployment.max_num_batched_tokens == max(4096, 2048)  # the whole prompt in one batch
    assert any("requires block size 16" in n for n in r.pool.notes)


def test_the_cpu_build_keeps_recurrent_states_in_float32():
    r = report("qwen3.6-27b", "1xH200", device="cpu", max_model_len=4096, kv_cache_memory_bytes=8 * GiB,
               vllm_version="0.32.0")
    gpu = report("qwen3.6-27b", "1xH200", max_model_len=4096, kv_cache_memory_bytes=8 * GiB, vllm_version="0.32.0",
                 mamba_ssm_cache_dtype="bfloat16")
    cpu_bf16 = report("qwen3.6-27b", "1xH200", device="cpu", max_model_len=4096, kv_cache_memory_bytes=8 * GiB,
                      vllm_version="0.32.0", mamba_ssm_cache_dtype="bfloat16")
    # conv 3 x 10240 x 2 B + SSM 48 x 128 x 128 x 4 B in float32 (CPU); bf16 only when asked for, and the backend is GDN
    state_fp32 = 3 * 10240 * 2 + 48 * 128 * 128 * 4
    state_bf16 = 3 * 10240 * 2 + 48 * 128 * 128 * 2
    attn = 4 * 256 * 2 * 2
    assert r.pool.block_size == 128 * cdiv(state_fp32, 128 * attn)
    assert cpu_bf16.pool.block_size == 128 * cdiv(state_bf16, 128 * attn)
    assert gpu.pool.block_size == 16 * cdiv(state_bf16, 16 * attn)


def test_on_a_cpu_without_avx512_bf16_the_cpu_build_keeps_the_state_type_asked_for():
    # platforms/cpu.py resets the SSM state to float32 only when torch finds AVX-512 BF16 (an AVX2 EPYC keeps bf16)
    arch = from_config(MAMBA2_27B, "mamba2-2.7b")
    def state(**dep):
        return report(arch, "1xH200", max_model_len=4096, kv_cache_memory_bytes=GiB, vllm_version="0.32.0",
                      **dep).pool.state_bytes_per_sequence
    d_inner, heads = 2 * 2560, 2 * 2560 // 64
    conv_bf16 = (4 - 1) * (d_inner + 2 * 1 * 128) * 2
    ssm = heads * 64 * 128  # elements per layer
    assert state(device="cpu", cpu_avx512_bf16=False) == 64 * (conv_bf16 + ssm * 2) == state()  # as on CUDA
    assert state(device="cpu", cpu_avx512_bf16=True) == 64 * (conv_bf16 + ssm * 4)  # reset to float32
    assert state(device="cpu", cpu_avx512_bf16=False, mamba_ssm_cache_dtype="float32") == 64 * (conv_bf16 + ssm * 4)


def test_the_cpu_flag_is_read_from_the_first_flags_line_of_proc_cpuinfo(tmp_path):
    from servesize.model.hardware import cpu_flags_have_avx512_bf16, host_has_avx512_bf16

    epyc_avx2 = "processor\t: 0\nflags\t\t: fpu sse avx avx2 fma\n"
    zen4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512bw avx512_bf16 avx512_vnni\n"
    assert (cpu_flags_have_avx512_bf16(epyc_avx2), cpu_flags_have_avx512_bf16(zen4)) == (False, True)
    assert not cpu_flags_have_avx512_bf16("flags : avx512_bf16x\n")  # a whole word, not a prefix
    info = tmp_path / "cpuinfo"
    info.write_text(zen4)
    assert host_has_avx512_bf16.__wrapped__(str(info)) is True
    assert host_has_avx512_bf16.__wrapped__(str(tmp_path / "absent")) is False


def test_a_scenario_for_the_cpu_build_says_which_cpu_or_reads_this_machines():
    from servesize.model.hardware import host_has_avx512_bf16
    from servesize.resolve import deployment_of
    from servesize.scenario import Scenario

    assert deployment_of(Scenario(model="llama-3.1-8b", gpus="1xH100", device="cpu", cpu_avx512_bf16="no")).cpu_avx512_bf16 is False
    assert deployment_of(Scenario(model="llama-3.1-8b", gpus="1xH100", device="cpu", cpu_avx512_bf16="yes")).cpu_avx512_bf16 is True
    assert deployment_of(Scenario(model="llama-3.1-8b", gpus="1xH100", device="cpu")).cpu_avx512_bf16 is host_has_avx512_bf16()


def test_mamba2_layers_hold_a_prefill_checkpoint_block_in_align_mode_from_0_32():
    from servesize.engine.pool import LayerSpec, _per_request_blocks
    from servesize.model.layers import MAMBA

    spec = LayerSpec(MAMBA, state_bytes=1)
    def blocks(version):
        dep = Deployment(vllm_version=version, mamba_cache_mode="align", max_model_len=4096, max_num_batched_tokens=2048)
        return _per_request_blocks(spec, 4096, dep)
    assert (blocks("0.31.0"), blocks("0.32.0")) == (2, 3)


# -- windows ------------------------------------------------------------------------------------

def test_a_window_on_every_layer_charges_each_request_only_its_window():
    arch = from_config(MISTRAL_V01)
    r = report(arch, "1xH100", max_model_len=32768, vllm_version="0.25.0", kv_cache_memory_bytes=8 * GiB)
    page = 16 * 8 * 128 * 2 * 2  # one layer, one block of 16 tokens: K and V of 8 heads x 128, bf16
    blocks = 8 * GiB // (32 * page)
    per_request = cdiv(min(4096 - 1 + 8192, 32768), 16) + 1  # the window plus the batch in flight, +1 for alignment
    assert r.pool.num_blocks == blocks and r.pool.groups[0].blocks_per_request == per_request
    assert r.pool.log_lines[-1].endswith(f"{blocks / per_request:.2f}x")


def test_qwen2s_and_phi3s_own_window_spellings_are_charged_as_windows_and_start_where_full_attention_would_not():
    # the tiny models of tests/integration (make_tiny_model.py qwen2_window, phi3_window): 2 layers x 2 KV heads x 32
    qwen2 = from_config({**TINY_LLAMA, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 512,
                         "max_window_layers": 0})
    phi3 = from_config({**TINY_LLAMA, "model_type": "phi3", "sliding_window": 2047})
    kv = 4 * MiB
    for arch, window in ((qwen2, 512), (phi3, 2047)):
        r = report(arch, max_model_len=16384, kv_cache_memory_bytes=kv, vllm_version="0.32.0", device="cpu")
        assert r.pool.groups[0].blocks_per_request == cdiv(window - 1 + 2048, 128) + 1  # the window, not 16,384
    with pytest.raises(WouldNotStart):  # 16,384 tokens of full attention need 8 MiB
        report(from_config(TINY_LLAMA), max_model_len=16384, kv_cache_memory_bytes=kv, vllm_version="0.32.0",
               device="cpu")


def test_from_0_26_windows_reserve_for_the_two_batches_async_scheduling_keeps_in_flight():
    arch = from_config(MISTRAL_V01)
    old = report(arch, max_model_len=32768, vllm_version="0.25.0", kv_cache_memory_bytes=8 * GiB)
    new = report(arch, max_model_len=32768, vllm_version="0.26.0", kv_cache_memory_bytes=8 * GiB)
    cpu = report(arch, max_model_len=32768, vllm_version="0.26.0", kv_cache_memory_bytes=8 * GiB, device="cpu")
    assert old.pool.groups[0].blocks_per_request == cdiv(4095 + 8192, 16) + 1
    assert new.pool.groups[0].blocks_per_request == cdiv(4095 + 2 * 8192, 16) + 1
    assert cpu.pool.groups[0].blocks_per_request == cdiv(4095 + 2048, 128) + 1  # no async scheduling on CPU


def test_without_the_hybrid_manager_windows_cost_as_much_as_full_attention():
    arch = from_config(MISTRAL_V01)
    r = report(arch, max_model_len=32768, kv_cache_memory_bytes=8 * GiB, disable_hybrid_kv_cache_manager=True)
    assert r.pool.groups[0].blocks_per_request == cdiv(32768, 16)


# -- the start-up check -------------------------------------------------------------------------

def test_vllm_would_refuse_a_length_one_request_cannot_hold_and_the_fix_is_the_longest_that_starts():
    arch = from_config(TINY_LLAMA)
    kv = 4 * MiB  # 2 layers x 512 B/token: 4,096 tokens of KV, less the null block (0.29+)
    with pytest.raises(WouldNotStart) as err:
        report(arch, max_model_len=8192, kv_cache_memory_bytes=kv, vllm_version="0.32.0")
    largest = err.value.largest_max_model_len
    page_all_layers = 16 * 512
    assert largest == (kv - page_all_layers) // page_all_layers * 16  # whole blocks of one request
    assert f"{largest:,}" in str(err.value) and err.value.exit_code == 3
    report(arch, max_model_len=largest, kv_cache_memory_bytes=kv, vllm_version="0.32.0")  # starts
    with pytest.raises(WouldNotStart):
        report(arch, max_model_len=largest + 1, kv_cache_memory_bytes=kv, vllm_version="0.32.0")


def test_before_0_29_the_check_counts_the_null_block_as_usable():
    arch = from_config(TINY_LLAMA)  # 4,096 tokens x 512 B = exactly 2 MiB for one request
    report(arch, max_model_len=4096, kv_cache_memory_bytes=2 * MiB, vllm_version="0.28.0")
    with pytest.raises(WouldNotStart):
        report(arch, max_model_len=4096, kv_cache_memory_bytes=2 * MiB, vllm_version="0.29.0")


def test_from_0_22_a_block_override_is_what_the_check_plans_against():
    arch = from_config(TINY_LLAMA)
    with pytest.raises(WouldNotStart):  # 100 blocks of 16 tokens cannot hold one 4,096-token request
        report(arch, max_model_len=4096, num_gpu_blocks_override=100, vllm_version="0.22.0")
    assert report(arch, max_model_len=4096, num_gpu_blocks_override=100, vllm_version="0.19.0").pool.num_blocks == 100


def test_would_not_start_is_a_does_not_fit_with_its_own_exit_code():
    assert issubclass(WouldNotStart, DoesNotFit) and WouldNotStart.exit_code == 3 and DoesNotFit.exit_code == 2


def test_max_model_len_auto_is_the_longest_length_whose_one_request_fits():
    arch = from_config(TINY_LLAMA)
    r = report(arch, max_model_len=-1, kv_cache_memory_bytes=4 * MiB, vllm_version="0.32.0")
    blocks = 4 * MiB // (16 * 512) - 1  # less the null block (0.29+)
    assert r.pool.max_model_len == blocks * 16 and any("auto-fit" in n for n in r.notes)
    with pytest.raises(BadInput, match="0.14"):
        report(arch, max_model_len=-1, kv_cache_memory_bytes=4 * MiB, vllm_version="0.13.0")


# -- placement of the weights -------------------------------------------------------------------

def test_mla_keeps_q_a_and_kv_a_projections_whole_on_every_rank():
    arch = resolve_model("deepseek-v3").architecture
    kept = mla_replicated_params(arch)
    assert kept == 61 * (7168 * (1536 + 512 + 64) + 1536 + 512)
    sharded = weights(arch, "native", 8)
    placed = weights(arch, "native", 8, placement=Placement(tp=8, replicated=(("attention", kept),)))
    assert placed.per_gpu_bytes - sharded.per_gpu_bytes == pytest.approx(kept * 7 / 8, rel=0.01)  # fp8: 1 B each


def test_expert_parallel_with_dp_attention_splits_whole_experts_over_every_rank():
    arch = resolve_model("deepseek-v3").architecture
    tp = weights(arch, "native", 8)
    dp_ep = weights(arch, "native", 1, placement=Placement(tp=1, ep=8))
    experts = next(g.bytes for g in tp.groups if g.group == "experts")
    rest = sum(g.bytes for g in tp.groups if g.group != "experts")
    assert dp_ep.per_gpu_bytes == pytest.approx(rest + experts * cdiv(256, 8) / 256, rel=1e-6)
    r = report("deepseek-v3", "8xH200", data_parallel_size=8, enable_expert_parallel=True, max_model_len=32768)
    assert r.weights.per_gpu_bytes > r.model_bytes_per_gpu - 1 and r.replicas == 8


def test_pipeline_stages_split_layers_as_vllm_does():
    assert pipeline_stages(32, 2) == [(0, 16), (16, 32)]
    assert pipeline_stages(61, 4) == [(0, 15), (15, 30), (30, 46), (46, 61)]  # 15 + 15 + 16 + 15: before the last
    r = report("llama-3.1-8b", "2xH100", pipeline_parallel_size=2, max_model_len=8192)
    one = report("llama-3.1-8b", "1xH100", max_model_len=8192)
    assert r.weights.per_gpu_bytes < 0.6 * one.weights.per_gpu_bytes
    assert r.pool.num_blocks > 1.8 * one.pool.num_blocks  # half the layers per stage, and less weight


def test_lora_slots_are_counted_with_the_weights():
    arch = resolve_model("llama-3.1-8b").architecture
    base = report(arch, max_model_len=8192)
    lora = report(arch, max_model_len=8192, enable_lora=True, max_loras=4, max_lora_rank=16)
    h, q, kv, inter, V, R = 4096, 4096, 1024, 14336, 128256, 16
    per_layer = 3 * R * h + R * (q + 2 * kv) + R * q + h * R + 2 * R * h + R * 2 * inter + R * inter + h * R
    expected = 4 * (32 * per_layer + 2 * (V * R + h * R)) * 2
    assert lora.extra_weight_bytes == expected
    assert lora.budget.available_bytes == base.budget.available_bytes - expected


# -- speculative decoding -----------------------------------------------------------------------

def test_an_mtp_speculative_config_is_the_same_engine_as_num_speculative_tokens():
    cfg = json.dumps({"method": "qwen3_5_mtp", "num_speculative_tokens": 2})
    from servesize.api import memory
    from servesize.scenario import Scenario

    a = memory(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", speculative_config=cfg,
                        max_model_len=262144, vllm_version="0.19.0"))
    b = memory(Scenario(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", num_speculative_tokens=2,
                        max_model_len=262144, vllm_version="0.19.0"))
    assert a.pool.log_lines == b.pool.log_lines and a.pool.block_size == 800


def test_ngram_drafts_cost_no_weights_but_widen_recurrent_states():
    from servesize.api import memory
    from servesize.scenario import Scenario

    sc = dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", max_model_len=65536, vllm_version="0.25.0")
    plain = memory(Scenario(**sc))
    ngram = memory(Scenario(**sc, speculative_config='{"method": "ngram", "num_speculative_tokens": 3, '
                                                     '"prompt_lookup_max": 4}'))
    assert ngram.weights.per_gpu_bytes == plain.weights.per_gpu_bytes and ngram.extra_weight_bytes == 0
    assert ngram.pool.block_size > plain.pool.block_size  # conv state holds 3 more rows (784 -> 800)
    assert all(g.blocks_per_request == 1 + 3 for g in ngram.pool.groups if g.kind == "gated_deltanet")


def test_an_eagle3_head_adds_its_weights_and_its_layer_to_the_pool(tmp_path):
    from servesize.api import memory
    from servesize.scenario import Scenario

    # an EAGLE-3 head of Llama-3.1-8B's geometry: one decoder layer, its own 32,000-token LM head
    head = {"model_type": "llama", "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096,
            "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
            "draft_vocab_size": 32000, "intermediate_size": 14336, "max_position_embeddings": 131072,
            "torch_dtype": "bfloat16", "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(head))
    sc = dict(model="llama-3.1-8b", gpus="1xH100", max_model_len=8192)
    plain = memory(Scenario(**sc))
    eagle = memory(Scenario(**sc, speculative_config=json.dumps({"method": "eagle3", "model": str(tmp_path),
                                                                   "num_speculative_tokens": 3})))
    h = 4096
    layer = 4 * h * h // 4 * 2 + 2 * h * 1024 + 3 * h * 14336 + 2 * h  # q, o; k, v; MLP; two norms
    head_params = 32000 * h + 3 * h * h + h * (4096 + 2 * 1024) + h + layer + h  # LM head, fc, wide q/k/v, norms
    assert eagle.extra_weight_bytes == pytest.approx(head_params * 2, rel=0.001)
    assert eagle.pool.kv_bytes_per_token == plain.pool.kv_bytes_per_token * 33 // 32  # one more attention layer


def test_a_speculative_config_vllm_would_reject_is_one_line():
    from servesize.scenario import Scenario

    with pytest.raises(BadInput, match="unknown key"):
        from servesize.api import memory

        memory(Scenario(model="llama-3.1-8b", gpus="1xH100", speculative_config='{"method": "ngram", "k": 3}'))
    with pytest.raises(BadInput, match="not one vLLM 0.8.5 accepts"):
        memory(Scenario(model="llama-3.1-8b", gpus="1xH100", vllm_version="0.8.5",
                        speculative_config='{"method": "eagle3", "model": "x/y", "num_speculative_tokens": 2}'))


# -- quantisation as vLLM names it ----------------------------------------------------------------

def test_vllm_fp8_on_a_16_bit_checkpoint_is_online_per_tensor_and_on_an_fp8_checkpoint_the_checkpoints_own():
    bf16 = resolve_model("llama-3.1-8b").architecture
    online = report(bf16, quantization="fp8", max_model_len=8192).weights
    assert online.precision == "fp8_per_tensor"
    linear = sum(g.quantised_params for g in online.groups)
    assert linear and all(g.bits == 8 for g in online.groups if g.quantised_params)
    fp8_ckpt = resolve_model("Qwen/Qwen3-30B-A3B-FP8").architecture
    assert report(fp8_ckpt, quantization="fp8", max_model_len=8192).weights.precision.startswith("native")


def test_a_method_that_needs_its_own_checkpoint_is_refused_on_a_16_bit_one_and_a_mismatch_too():
    bf16 = resolve_model("llama-3.1-8b").architecture
    with pytest.raises(BadInput, match="16-bit checkpoint"):
        report(bf16, quantization="awq_marlin", max_model_len=8192)
    nvfp4 = resolve_model("nvidia/Qwen3.6-27B-NVFP4").architecture if False else None
    fp8_ckpt = resolve_model("Qwen/Qwen3-30B-A3B-FP8").architecture
    with pytest.raises(BadInput, match="does not match"):
        report(fp8_ckpt, quantization="modelopt_fp4", max_model_len=8192)
    assert nvfp4 is None


def test_experts_int8_converts_only_the_experts():
    moe = resolve_model("qwen3-30b-a3b").architecture
    w = report(moe, quantization="experts_int8", max_model_len=8192).weights
    assert {g.group for g in w.groups if g.quantised_params} == {"experts"}


def test_a_quantisation_the_release_does_not_know_is_one_line():
    with pytest.raises(BadInput, match="not a method vLLM 0.8.5 accepts"):
        report("llama-3.1-8b", quantization="modelopt_fp4", vllm_version="0.8.5", max_model_len=8192)


@pytest.mark.parametrize("dtype,per_token", [
    ("nvfp4", 32 * 8 * 2 * (128 // 2 + 128 // 16)),          # fp4 data + an fp8 scale per 16, K and V
    ("int8_per_token_head", 32 * 8 * (128 + 128 + 8)),      # int8 K and V + an fp32 scale each
    ("int4_per_token_head", 32 * 8 * (64 + 64 + 8)),
    ("fp8", 32 * 8 * 2 * 128),
])
def test_quantised_kv_caches_pack_their_pages_as_vllms_backends_do(dtype, per_token):
    r = report("llama-3.1-8b", "1xH100", kv_cache_dtype=dtype, max_model_len=8192, vllm_version="0.33.0")
    assert r.pool.kv_bytes_per_token == per_token


# -- vision towers -------------------------------------------------------------------------------

# Qwen/Qwen2.5-VL-7B-Instruct's published config.json (its text and vision geometry; the vision_config
# fields as the public copies of that file carry them); its model card counts 8.29B parameters.
QWEN2_5_VL_7B = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl", "hidden_size": 3584,
                 "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
                 "vocab_size": 152064, "max_position_embeddings": 128000, "torch_dtype": "bfloat16",
                 "tie_word_embeddings": False,
                 "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                                   "num_heads": 16, "in_chans": 3, "out_hidden_size": 3584, "patch_size": 14,
                                   "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                                   "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2,
                                   "temporal_patch_size": 2}}


def test_qwen2_5_vls_vision_tower_is_counted_and_the_total_is_the_published_8_29b():
    from servesize.model.ledger import parameter_ledger

    ledger = parameter_ledger(from_config(QWEN2_5_VL_7B, "qwen2.5-vl-7b"))
    hv, iv = 1280, 3420
    blocks = 32 * (4 * hv * hv + 3 * hv * iv + 3 * hv + hv + 2 * iv + hv + 2 * hv)
    merger = (4 * hv) ** 2 + 4 * hv * 3584 + hv + 4 * hv + 3584
    assert ledger.groups["vision"] == 3 * 2 * 14 * 14 * hv + blocks + merger
    assert ledger.total / 1e9 == pytest.approx(8.29, abs=0.005)


def test_language_model_only_leaves_the_vision_tower_unloaded():
    arch = from_config(QWEN2_5_VL_7B, "qwen2.5-vl-7b")
    full = report(arch, "1xH100", max_model_len=32768)
    text = report(arch, "1xH100", max_model_len=32768, language_model_only=True)
    vision = next(g.bytes for g in full.weights.groups if g.group == "vision")
    assert full.weights.per_gpu_bytes - text.weights.per_gpu_bytes == vision


def _plan(capsys, *argv):
    return run_json(capsys, "plan", "llama-3.1-8b", "--gpus", "1xA10G", "--max-model-len", "16k", "--no-sensitivity",
                    "--fills", "400", "--json", *argv)


def test_a_gpu_without_a_published_flops_figure_plans_what_it_can_and_names_what_the_rest_needs(capsys):
    d = _plan(capsys)  # NVIDIA publishes no A10G tensor figure: cache and decode are computed, the rest asks for it
    assert set(d["ceilings_need"]) == {"latency", "saturation"}
    assert all("--gpu-flops" in why for why in d["ceilings_need"].values())
    assert d["binding"] in ("cache", "decode") and d["prefill"] is None
    given = _plan(capsys, "--gpu-flops", "125")
    assert given["ceilings_need"] == {} and given["prefill"] is not None
    assert given["ceilings"]["cache"] == d["ceilings"]["cache"] and given["ceilings"]["latency"] > 0


def test_on_a_cpu_with_amx_tiles_mla_keeps_the_block_asked_for(capsys):
    """vLLM 0.32's CPU platform serves MLA with AMX_MLA where torch reports AMX tiles (block as asked,
    default 128), else with the reference CPU_MLA kernel (block 16 whatever was asked)."""
    from servesize.model.hardware import cpu_flags_have
    from servesize.resolve import deployment_of
    from servesize.scenario import Scenario

    def block(*flags):
        return run_json(capsys, "memory", "deepseek-v3", "--gpus", "8xH200", "--device", "cpu", "--max-model-len", "8192",
                        *flags, "--json")["block_size"]

    assert block("--cpu-amx", "yes") == 128 and block("--cpu-amx", "yes", "--block-size", "64") == 64
    assert block("--cpu-amx", "no") == 16 == block("--cpu-amx", "no", "--block-size", "64")
    assert block("--cpu-amx", "yes", "--vllm-version", "0.31.0") == 16  # AMX MLA read in 0.32 only
    assert block("--cpu-avx512-bf16", "no") == 16  # no CPU has AMX tiles without AVX-512 BF16
    assert not deployment_of(Scenario(model="deepseek-v3", gpus="1xH100", device="cpu", cpu_avx512_bf16="no")).cpu_amx
    assert cpu_flags_have("flags : avx512_bf16 amx_bf16 amx_tile\n", "amx_tile")
    assert not cpu_flags_have("flags : avx512_bf16 amx_bf16\n", "amx_tile")


def test_expert_parallelism_on_a_model_without_experts_is_refused_as_vllm_refuses_it():
    """vLLM's ModelConfig._verify_with_expert_parallelism refuses --enable-expert-parallel for a dense model (0.32:
    'Number of experts in the model must be greater than 0 when expert parallelism is enabled.'); servesize used to
    size it with a note, and its recipe kept the flag (issue 31: Qwen3-32B, phi-4, ... refused by the engine config)."""
    with pytest.raises(BadInput, match="Number of experts") as refused:
        report("qwen3-32b", "2xH100", tensor_parallel_size=2, enable_expert_parallel=True)
    assert refused.value.field == "enable_expert_parallel"
    moe = report("qwen3-30b-a3b", "2xH100", tensor_parallel_size=2, enable_expert_parallel=True)
    assert moe.pool.num_blocks > 0


def test_drafts_that_read_the_targets_hidden_states_drop_a_prefix_hits_last_block_unless_told_not_to():
    """vLLM's prefix cache drops a hit's last block with MTP / EAGLE drafts (SpeculativeConfig.use_eagle); ngram
    drafts keep it, and so does "disable_eagle_block_drop": true."""
    from servesize.api import memory
    from servesize.scenario import Scenario

    sc = dict(model="qwen3.6-27b", gpus="1xH200", quantization="fp8", max_model_len=65536, vllm_version="0.25.0")

    def drops(**extra):
        return memory(Scenario(**sc, **extra)).deployment.drops_hit_block

    assert drops(num_speculative_tokens=2)   # the model's own MTP head
    assert drops(speculative_config='{"method": "mtp", "num_speculative_tokens": 2}')
    assert not drops(speculative_config='{"method": "mtp", "num_speculative_tokens": 2, "disable_eagle_block_drop": true}')
    assert not drops(speculative_config='{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}')
    assert not drops()
    with pytest.raises(BadInput, match="disable_eagle_block_drop must be true or false"):
        drops(speculative_config='{"method": "mtp", "num_speculative_tokens": 2, "disable_eagle_block_drop": "yes"}')
