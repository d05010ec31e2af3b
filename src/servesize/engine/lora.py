"""LoRA adapter slots: the A and B matrices vLLM allocates for --enable-lora, with the weights.

vLLM (lora/layers/*.py, create_lora_weights; 0.32 sources) wraps every supported linear module and
the embedding / LM head, and gives each ``max_loras`` zero-filled slots of rank ``max_lora_rank``
in the LoRA dtype (the model's by default), per TP rank:

- column-parallel (qkv_proj with 3 slices, gate_up_proj with 2): A = rank x input (whole), B = its
  output slice / tp x rank;
- row-parallel (o_proj, down_proj): A = rank x input / tp, B = output (whole) x rank;
- with --fully-sharded-loras the whole-sized sides are split over TP too (A's rank rows for
  column-parallel, B's output for row-parallel);
- the embedding: A = vocab x rank, B = hidden x rank; the LM head: A = rank x hidden, B = vocab x
  rank (neither sharded).

They are allocated while the model loads, so vLLM counts them in "Model loading took"; the
calculator seed names LoRA as the thing it leaves out.
"""

from __future__ import annotations

from servesize.derivation import Derivation
from servesize.errors import UnsupportedArchitecture
from servesize.model.architecture import Architecture, KvHeadAttention


def lora_slot_bytes(arch: Architecture, tp: int, max_loras: int, max_rank: int, dtype_bytes: int,
                    fully_sharded: bool, d: Derivation) -> int:
    """Bytes of LoRA slots on one TP rank."""
    if arch.moe is not None or any(not isinstance(layer, KvHeadAttention) for layer in arch.layers):
        raise UnsupportedArchitecture(arch.model_type, "LoRA slots are modelled for dense GQA transformers only "
                                      "(MoE experts, MLA and recurrent layers wrap other modules)", ("enable_lora",))
    h, V = arch.hidden_size, arch.vocab_size
    q = arch.num_attention_heads * arch.head_dim
    kv = arch.num_kv_heads * arch.head_dim
    inter = arch.intermediate_size
    split = tp if fully_sharded else 1
    per_layer = d.step(
        "lora_params_per_layer_per_slot",
        "3 * cdiv(rank, split) * hidden + rank * cdiv(q + 2 * kv, tp)"  # qkv_proj (column, 3 slices)
        " + rank * cdiv(q, tp) + cdiv(hidden, split) * rank"  # o_proj (row)
        " + 2 * cdiv(rank, split) * hidden + rank * cdiv(2 * inter, tp)"  # gate_up_proj (column, 2 slices)
        " + rank * cdiv(inter, tp) + cdiv(hidden, split) * rank",  # down_proj (row)
        unit="params", rank=max_rank, split=split, hidden=h, q=q, kv=kv, tp=tp, inter=inter,
        note="A and B of qkv_proj, o_proj, gate_up_proj, down_proj on one TP rank")
    edges = d.step("lora_params_embedding_lm_head_per_slot", "2 * (vocab * rank + hidden * rank)", unit="params",
                   vocab=V, rank=max_rank, hidden=h, note="embedding A/B and LM-head A/B, whole on every rank")
    return int(d.step("lora_bytes_per_gpu", "max_loras * (layers * per_layer + edges) * dtype_bytes", unit="B",
                      max_loras=max_loras, layers=arch.num_layers, per_layer=per_layer, edges=edges,
                      dtype_bytes=dtype_bytes, note="--enable-lora: vLLM allocates every slot at load time"))

