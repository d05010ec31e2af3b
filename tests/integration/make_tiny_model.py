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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path, help="directory to write (created)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "float16"])
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--max-positions", type=int, default=MAX_POSITIONS)
    args = ap.parse_args(argv)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = build_tokenizer(args.seed)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=args.max_positions,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    vocab_size = tok.get_vocab_size()
    vocab_size_padded = -(-vocab_size // 64) * 64

    torch.manual_seed(args.seed)
    config = LlamaConfig(
        vocab_size=vocab_size_padded,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=args.max_positions,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        pad_token_id=tok.token_to_id("<pad>"),
        tie_word_embeddings=False,
        dtype=args.dtype,
    )
    model = LlamaForCausalLM(config).to(getattr(torch, args.dtype))
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    hf_tok.save_pretrained(args.out)

    written = json.loads((args.out / "config.json").read_text())
    print(
        json.dumps(
            {
                "path": str(args.out),
                "vocab_size": written["vocab_size"],
                "tokenizer_vocab": vocab_size,
                "num_hidden_layers": written["num_hidden_layers"],
                "num_key_value_heads": written["num_key_value_heads"],
                "head_dim": written.get("head_dim"),
                "dtype": args.dtype,
                "params": sum(p.numel() for p in model.parameters()),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
