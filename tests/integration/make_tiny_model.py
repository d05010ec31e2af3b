"""Write a tiny random-weight LlamaForCausalLM plus a locally trained word-level tokenizer.

Run it with the vLLM venv's interpreter (it needs torch, transformers and tokenizers):

    .venv-vllm/bin/python tests/integration/make_tiny_model.py OUT_DIR

Nothing is downloaded (it works with HF_HUB_OFFLINE=1).  The output directory can be served
by vLLM as-is (`--model OUT_DIR`).

Shape (chosen so KV bytes per token is a round number):
    2 layers x 2 KV heads x head_dim 32 x 2 (K and V) x 2 bytes (bf16) = 512 B/token
    (float32 KV would be 1,024 B/token).

Tokenizer: word level, whitespace pre-tokenizer, vocabulary = the generated pseudo-words
WORDS (plus punctuation and 4 specials).  Every word in WORDS is exactly one token, no BOS is
added, so a prompt of k words separated by single spaces is exactly k prompt tokens in vLLM.
Tests can rebuild the word list with `words()` without importing torch/transformers.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys

# The model's shape.  Tests read these (or the written config.json) to compute expected values.
NUM_LAYERS = 2
NUM_KV_HEADS = 2
NUM_HEADS = 4
HEAD_DIM = 32  # the smallest head size the vLLM CPU attention backend supports
HIDDEN = NUM_HEADS * HEAD_DIM  # 128
INTERMEDIATE = 256
MAX_POSITIONS = 32768
SEED = 1234

NUM_WORDS = 4000
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
PUNCT = [".", ",", ":", "?", "!"]

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} . {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def kv_bytes_per_token(dtype_bytes: int = 2) -> int:
    """KV bytes one token occupies across all layers: 2 (K,V) x layers x kv heads x head_dim x dtype."""
    return 2 * NUM_LAYERS * NUM_KV_HEADS * HEAD_DIM * dtype_bytes


def words(n: int = NUM_WORDS, seed: int = SEED) -> list[str]:
    """The vocabulary: n distinct lower-case pseudo-words (consonant-vowel syllables), deterministic."""
    rng = random.Random(seed)
    consonants = "bcdfghjklmnprstvwz"
    vowels = "aeiou"
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        w = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(2, 4)))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def _training_text(vocab: list[str], seed: int) -> list[str]:
    """Generated sentences that use every word (and every punctuation mark) at least twice."""
    rng = random.Random(seed + 1)
    lines = []
    for i in range(0, len(vocab), 10):
        chunk = vocab[i : i + 10]
        lines.append(" ".join(chunk) + " " + rng.choice(PUNCT))
    for _ in range(len(vocab) // 5):
        lines.append(" ".join(rng.choice(vocab) for _ in range(12)) + " " + rng.choice(PUNCT))
    lines.append(" ".join(vocab) + " " + " ".join(PUNCT))
    lines.append("user : system : assistant : " + " ".join(PUNCT))
    return lines


def harness_words() -> list[str]:
    """The English words servesize's measurement prompts are built from (WORDS in
    src/servesize/measure/prompts.py, read from the source so there is one list): they join the
    vocabulary so each is one token here, as with a real tokenizer, not a shared <unk>."""
    import ast
    import pathlib

    src = pathlib.Path(__file__).resolve().parents[2] / "src" / "servesize" / "measure" / "prompts.py"
    for node in ast.parse(src.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "WORDS" for t in node.targets):
            return ast.literal_eval(node.value.func.value).split()
    raise SystemExit(f"no WORDS list in {src}")


def build_tokenizer(seed: int = SEED):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    vocab = words(seed=seed)
    known = set(vocab)
    vocab = vocab + [w for w in harness_words() if w not in known]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins word tokens with spaces
    trainer = trainers.WordLevelTrainer(
        vocab_size=len(vocab) + len(PUNCT) + len(SPECIALS) + 16, min_frequency=1, special_tokens=SPECIALS
    )
    tok.train_from_iterator(_training_text(vocab, seed), trainer=trainer)
    missing = [w for w in vocab + PUNCT if tok.token_to_id(w) is None]
    if missing:
        raise SystemExit(f"tokenizer training dropped {len(missing)} words, e.g. {missing[:5]}")
    return tok


# One tiny random-weight model per architecture kind the integration suite starts (``--family``).
# Each entry: the transformers model_type and the fields that differ from COMMON. The shapes are
# small and chosen so the KV arithmetic is plain; vLLM's CPU build must accept each (its attention
# kernels take head sizes that are multiples of 32; the MLA reference kernel needs kv_lora_rank 512
# and a rope dim of 64).
COMMON = dict(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=NUM_LAYERS,
              num_attention_heads=NUM_HEADS, num_key_value_heads=NUM_KV_HEADS, head_dim=HEAD_DIM,
              tie_word_embeddings=False)
FAMILIES: dict[str, tuple[str, dict]] = {
    # GQA, every layer full attention: 2 layers x 2 KV heads x 32
    "llama": ("llama", {}),
    # wider (~14M parameters, run in float32): a prefill of a few hundred tokens takes the CPU engine a step far
    # longer than a client's sends are apart, so which requests share a step is decided by the scheduler alone
    # (scripts/engine_waves.py)
    "llama_wide": ("llama", dict(hidden_size=512, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8,
                                 num_key_value_heads=8, head_dim=64)),
    # an explicit head_dim (64) that is not hidden / heads (32)
    "qwen3": ("qwen3", dict(head_dim=64)),
    # 5 sliding (window 64) : 1 global, as Gemma 3 interleaves them
    "gemma3": ("gemma3_text", dict(num_hidden_layers=6, sliding_window=64, query_pre_attn_scalar=32,
                                   layer_types=["sliding_attention"] * 5 + ["full_attention"])),
    # Mistral v0.1 style: the window (256) on every layer
    "mistral_swa": ("mistral", dict(sliding_window=256)),
    # routed experts: 8 experts, top 2, explicit head_dim
    "qwen3_moe": ("qwen3_moe", dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64, head_dim=64,
                                    decoder_sparse_step=1, mlp_only_layers=[])),
    # full and sliding (window 64) layers, attention sinks, 4 experts top 2
    "gpt_oss": ("gpt_oss", dict(num_hidden_layers=2, num_local_experts=4, num_experts_per_tok=2, sliding_window=64,
                                head_dim=64, layer_types=["sliding_attention", "full_attention"])),
    # Gated DeltaNet hybrid: 3 linear-attention layers and 1 full, routed + shared expert
    "qwen3_next": ("qwen3_next", dict(num_hidden_layers=4, full_attention_interval=4, head_dim=64,
                                      linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
                                      linear_value_head_dim=32, linear_conv_kernel_dim=4, num_experts=4,
                                      num_experts_per_tok=2, moe_intermediate_size=64,
                                      shared_expert_intermediate_size=64, decoder_sparse_step=1,
                                      mlp_only_layers=[])),
    # attention-free: every layer a Mamba2 mixer
    "mamba2": ("mamba2", dict(num_heads=8, head_dim=32, state_size=16, n_groups=1, expand=2, conv_kernel=4,
                              chunk_size=64, num_attention_heads=None, num_key_value_heads=None, intermediate_size=None)),
    # multi-head latent attention (no q LoRA), routed + shared experts after one dense layer
    "deepseek_v2": ("deepseek_v2", dict(kv_lora_rank=512, q_lora_rank=None, qk_rope_head_dim=64, qk_nope_head_dim=32,
                                        v_head_dim=32, head_dim=None, num_key_value_heads=NUM_HEADS,
                                        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                                        n_shared_experts=1, first_k_dense_replace=1, topk_method="greedy",
                                        n_group=1, topk_group=1)),
    # Qwen2's own spelling of a window on every layer: use_sliding_window with max_window_layers 0 (the written
    # layer_types is dropped, as Qwen2.5's configs carry none: see DROPPED)
    "qwen2_window": ("qwen2", dict(use_sliding_window=True, sliding_window=512, max_window_layers=0)),
    # Phi-3-mini-4k's spelling: a bare sliding_window (2,047 there and here), no layer_types
    "phi3_window": ("phi3", dict(sliding_window=2047, head_dim=None)),
    # StarCoder2: the window (256) on every layer, read from a bare sliding_window; biases, LayerNorm, 2-matrix MLP
    "starcoder2": ("starcoder2", dict(sliding_window=256, head_dim=None)),
    # Cohere2: 3 sliding : 1 global, a parallel block with one LayerNorm. The window, 129, is one where vLLM's +1
    # shows at both settings: cdiv(129 + 2,048, 128) = 18 blocks at A (17 without it), cdiv(129 + 1,024, 32) = 37 at B
    "cohere2": ("cohere2", dict(num_hidden_layers=4, sliding_window=129, head_dim=None,
                                layer_types=["sliding_attention"] * 3 + ["full_attention"])),
    # EXAONE 4.0: 3 sliding (window 128) : 1 global by its integer sliding_window_pattern (layer_types dropped)
    "exaone4": ("exaone4", dict(num_hidden_layers=4, sliding_window=128, sliding_window_pattern=4)),
    # SmolLM3: NoPE on every 4th layer (no_rope_layer_interval 4), every layer full attention
    "smollm3": ("smollm3", dict(num_hidden_layers=4, no_rope_layer_interval=4)),
    # Granite 4.0 hybrid: 3 Mamba2 mixers (8 heads x 32, state 16) : 1 full attention, 4 experts top 2 + a shared MLP
    "granitemoehybrid": ("granitemoehybrid", dict(
        num_hidden_layers=4, layer_types=["linear_attention"] * 3 + ["full_attention"], mamba_n_heads=8,
        mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=64,
        num_local_experts=4, num_experts_per_tok=2, intermediate_size=64, shared_intermediate_size=64,
        position_embedding_type="rope", head_dim=None)),
    # Falcon-H1: a Mamba2 mixer (8 heads x 32, state 16) and attention side by side in every layer, a gated MLP
    "falcon_h1": ("falcon_h1", dict(
        mamba_d_ssm=256, mamba_n_heads=8, mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_d_conv=4,
        mamba_expand=2, mamba_chunk_size=64, mamba_rms_norm=False)),
}
# Fields transformers writes into config.json that a family's published configs lack: removed after saving, so
# servesize and vLLM read the spelling real checkpoints use (Qwen2.5's configs carry no layer_types).
DROPPED: dict[str, tuple[str, ...]] = {"qwen2_window": ("layer_types",), "exaone4": ("layer_types",)}


def family_config(family: str, vocab_size: int, max_positions: int, dtype: str, ids: dict):
    from transformers import AutoConfig

    model_type, extra = FAMILIES[family]
    fields = {**COMMON, **extra, **ids, "vocab_size": vocab_size, "max_position_embeddings": max_positions, "dtype": dtype}
    fields = {k: v for k, v in fields.items() if v is not None}
    return AutoConfig.for_model(model_type, **fields)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path, help="directory to write (created); with --all-families, the folder "
                    "that gets one sub-folder per family")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    ap.add_argument("--family", default="llama", choices=sorted(FAMILIES))
    ap.add_argument("--all-families", action="store_true",
                    help="write every family, OUT/<family>, in this one interpreter (one import of torch and "
                         "transformers, not one each); one JSON line each")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--max-positions", type=int, default=MAX_POSITIONS)
    args = ap.parse_args(argv)
    if args.all_families:
        for family in sorted(FAMILIES):
            print(json.dumps(write_model(args.out / family, family, args.dtype, args.seed, args.max_positions)))
    else:
        print(json.dumps(write_model(args.out, args.family, args.dtype, args.seed, args.max_positions)))
    return 0


def write_model(out: pathlib.Path, family: str, dtype: str, seed: int, max_positions: int) -> dict:
    """Write one tiny model and its tokenizer into `out`; its summary (path, shape, parameter count)."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    tok = build_tokenizer(seed)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=max_positions,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    vocab_size = tok.get_vocab_size()
    vocab_size_padded = -(-vocab_size // 64) * 64

    torch.manual_seed(seed)
    ids = dict(bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"),
               pad_token_id=tok.token_to_id("<pad>"))
    config = family_config(family, vocab_size_padded, max_positions, dtype, ids)
    model = AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype))
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    hf_tok.save_pretrained(out)

    written = json.loads((out / "config.json").read_text())
    if DROPPED.get(family):
        written = {k: v for k, v in written.items() if k not in DROPPED[family]}
        (out / "config.json").write_text(json.dumps(written, indent=2) + "\n")
    return {
        "path": str(out),
        "family": family,
        "model_type": written["model_type"],
        "vocab_size": written["vocab_size"],
        "tokenizer_vocab": vocab_size,
        "num_hidden_layers": written["num_hidden_layers"],
        "num_key_value_heads": written.get("num_key_value_heads"),
        "head_dim": written.get("head_dim"),
        "dtype": dtype,
        "params": sum(p.numel() for p in model.parameters()),
    }


if __name__ == "__main__":
    sys.exit(main())
