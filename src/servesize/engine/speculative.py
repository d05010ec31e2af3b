"""Speculative decoding as vLLM runs it (--speculative-config), and what each method costs in memory.

vLLM's SpeculativeConfig (config/speculative.py) names a method and a draft:

- ``mtp`` (and the model-specific ``deepseek_mtp``, ``qwen3_next_mtp``, ``qwen3_5_mtp``, ...): the
  target checkpoint's own multi-token-prediction module(s). Their weights are loaded, their
  attention layer(s) join the target's KV-cache group, and every Mamba/GDN state holds the draft
  tokens (conv state ``conv_kernel - 1 + k`` rows; ``k`` more state blocks per request).
- ``eagle`` / ``eagle3``: a small draft head (``model``: its checkpoint). Its decoder layer(s) join
  the KV pool; it shares the target's token embedding (and, for EAGLE-1, its LM head); an EAGLE-3
  head has its own LM head over ``draft_vocab_size`` and a fusion layer over 3 hidden states.
- ``draft_model``: a whole smaller model, its own weights and its own attention layers in the pool.
- ``ngram`` / ``ngram_gpu`` / ``suffix``: drafts from the prompt itself, no weights and no KV; the
  draft tokens still widen the recurrent states of hybrid models.

``Speculation.from_config`` reads the JSON vLLM takes (already parsed), with the draft's
architecture resolved by the caller; anything else vLLM offers (medusa, mlp_speculator, dflash,
dspark, custom_class) is refused, not guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from servesize.datafiles import table
from servesize.engine.vocabulary import accepts, show_version
from servesize.errors import BadInput, UnsupportedArchitecture
from servesize.frozen import frozen
from servesize.model.architecture import Architecture
from servesize.model.layers import Layer

# vLLM's async scheduling stays on with these methods (config/vllm.py: EagleModelTypes, NgramGPUTypes,
# draft_model); with ngram/suffix (CPU-side drafting) it is switched off.
ASYNC_METHODS = ("mtp", "eagle", "eagle3", "draft_model", "ngram_gpu")
MODELLED = ("mtp", "eagle", "eagle3", "draft_model", "ngram", "ngram_gpu", "suffix")
NEEDS_DRAFT = ("eagle", "eagle3", "draft_model")
# Keys of vLLM's SpeculativeConfig that change nothing servesize computes (sampling, kernels, drafting policy).
IGNORED_KEYS = frozenset({
    "prompt_lookup_max", "prompt_lookup_min", "disable_padded_drafter_batch",
    "use_local_argmax_reduction", "rejection_sample_method", "draft_sample_method", "synthetic_acceptance_rates",
    "synthetic_acceptance_length", "enable_adaptive_verification", "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests", "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob",
    "revision", "code_revision", "attention_backend", "moe_backend", "enforce_eager", "parallel_drafting",
    "index_share_for_mtp_iteration", "use_heterogeneous_vocab", "disable_by_batch_size", "acceptance_method",
    "num_speculative_tokens_per_batch_size", "disable_log_stats", "speculative_token_tree",
})
KNOWN_KEYS = IGNORED_KEYS | {"method", "model", "num_speculative_tokens", "draft_tensor_parallel_size",
                             "tensor_parallel_size", "quantization", "kv_cache_dtype", "max_model_len",
                             "disable_eagle_block_drop"}
# Drafts that read the target's hidden states (SpeculativeConfig.use_eagle: EAGLE, EAGLE-3, MTP) make vLLM's prefix
# cache drop a hit's last block, which is computed again (v1/core/single_type_kv_cache_manager.py
# FullAttentionManager.find_longest_cache_hit: "if use_eagle ... pop()"; 'align' mode's last cached state moves a
# block back to match, Scheduler._mamba_block_aligned_split); "disable_eagle_block_drop": true keeps it (vLLM
# PR 53388)
BLOCK_DROP_METHODS = ("mtp", "eagle", "eagle3")


@lru_cache(maxsize=1)
def _mtp_drafts() -> dict[str, str]:
    return dict(table("vllm_mtp.toml")["model_type"])


def mtp_draft(target: Architecture, version: tuple[int, int, int]) -> str | None:
    """The draft model type this release serves ``target``'s own MTP module(s) as (data/vllm_mtp.toml), or None: no
    MTP module, or none vLLM can draft with (MiniMax-M2's are skipped at load)."""
    if not target.mtp_layers:
        return None
    draft = _mtp_drafts().get(target.model_type)
    return draft if draft is not None and accepts("speculative_method", draft, version) else None


def no_mtp_draft_why(target: Architecture, version: tuple[int, int, int]) -> str:
    """Why ``target`` cannot draft with its own MTP head on this release, in one clause."""
    if not target.mtp_layers:
        return f"{target.name} has no MTP head"
    draft = _mtp_drafts().get(target.model_type)
    if draft is None:
        return (f"{target.name} declares {target.mtp_layers} MTP module(s), but vLLM maps no {target.model_type} "
                "checkpoint onto an MTP draft (it skips those weights at load)")
    return f"{target.name}'s MTP draft ({draft}) is not in vLLM {show_version(version)}"


def method_of(config: Mapping[str, Any], target: Architecture) -> str:
    """vLLM's method, normalised: any '<family>_mtp' is 'mtp'; when absent, inferred as vLLM does
    (SpeculativeConfig.__post_init__: 'eagle3'/'eagle' in the draft's name, else a draft model; no
    draft named and a target with an MTP head: its MTP module)."""
    method = config.get("method")
    model = config.get("model")
    if method is None:
        if model is None:
            if target.mtp_layers:
                return "mtp"
            raise BadInput("--speculative-config names neither a method nor a draft model, and "
                           f"{target.name} has no MTP head to draft with", field="speculative_config")
        name = str(model).lower()
        return "eagle3" if "eagle3" in name else "eagle" if "eagle" in name else "draft_model"
    method = str(method)
    return "mtp" if method.endswith("_mtp") else method


@frozen
class Speculation:
    """One --speculative-config: the method, the draft tokens per step and the draft's architecture."""

    method: str
    num_speculative_tokens: int
    draft: Architecture | None = None
    draft_name: str | None = None
    draft_tensor_parallel_size: int | None = None
    ignored: tuple[str, ...] = ()  # keys accepted that change nothing servesize computes
    keeps_hit_block: bool = False  # "disable_eagle_block_drop": the prefix hit's last block is not dropped

    @property
    def drops_hit_block(self) -> bool:
        """Whether vLLM's prefix cache drops a hit's last block for these drafts (BLOCK_DROP_METHODS)."""
        return self.num_speculative_tokens > 0 and self.method in BLOCK_DROP_METHODS and not self.keeps_hit_block

    @property
    def async_ok(self) -> bool:
        return self.method in ASYNC_METHODS

    @classmethod
    def from_config(cls, config: Mapping[str, Any], target: Architecture, draft: Architecture | None = None,
                    version: tuple[int, int, int] | None = None) -> Speculation:
        """vLLM's SpeculativeConfig as servesize prices it. With ``version``, an MTP module the release cannot
        draft with (data/vllm_mtp.toml) is refused, with the reason (``no_mtp_draft_why``)."""
        unknown = sorted(set(config) - KNOWN_KEYS)
        if unknown:
            raise BadInput(f"--speculative-config: unknown key(s) {', '.join(unknown)} (vLLM's SpeculativeConfig fields: "
                           f"method, model, num_speculative_tokens, draft_tensor_parallel_size, ...)", field="speculative_config")
        method = method_of(config, target)
        if method not in MODELLED:
            raise UnsupportedArchitecture(target.model_type, f"speculative method {method!r} is not modelled "
                                          f"(servesize models {', '.join(MODELLED)})", ("speculative_config.method",))
        if method == "mtp" and not target.mtp_layers:
            raise BadInput(f"--speculative-config method mtp: {target.name}'s config declares no MTP module", field="speculative_config")
        if method == "mtp" and version is not None and mtp_draft(target, version) is None:
            raise BadInput(f"--speculative-config method mtp: {no_mtp_draft_why(target, version)}", field="speculative_config")
        k = _draft_tokens(config, method, target)
        if method in NEEDS_DRAFT and draft is None:
            raise BadInput(f"--speculative-config method {method} needs the draft's config: give \"model\" as a "
                           "catalogue name, a config.json path or a Hugging Face id", field="speculative_config")
        for key in ("quantization", "kv_cache_dtype", "max_model_len"):
            if config.get(key) is not None:
                raise UnsupportedArchitecture(target.model_type, f"a draft with its own {key} is not modelled",
                                              (f"speculative_config.{key}",))
        tp = config.get("draft_tensor_parallel_size") or config.get("tensor_parallel_size")
        ignored = tuple(sorted(set(config) & IGNORED_KEYS))
        keep = config.get("disable_eagle_block_drop", False)
        if not isinstance(keep, bool):
            raise BadInput(f"--speculative-config disable_eagle_block_drop must be true or false, got {keep!r}",
                           field="speculative_config")
        return cls(method, k, draft if method in NEEDS_DRAFT else None, config.get("model"),
                   int(tp) if tp else None, ignored, keep)

    def draft_attention_layers(self) -> tuple[Layer, ...]:
        """The draft's own attention layers, which vLLM gives KV-cache specs beside the target's."""
        if self.draft is None:
            return ()
        return tuple(layer for layer in self.draft.layers if layer.is_attention)

    def describe(self) -> str:
        draft = f" with {self.draft_name}" if self.draft_name else ""
        return f"{self.method}{draft}, {self.num_speculative_tokens} draft token(s) per step"


MAX_DRAFT_TOKENS = 64  # the most num_speculative_tokens servesize takes (no published deployment drafts more)


def _draft_tokens(config: Mapping[str, Any], method: str, target: Architecture) -> int:
    k = config.get("num_speculative_tokens")
    if k is None and method == "mtp" and target.mtp_layers:
        return target.mtp_layers  # vLLM: n_predict of the MTP module when not given
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_DRAFT_TOKENS:
        raise BadInput(f"--speculative-config num_speculative_tokens must be a whole number from 1 to {MAX_DRAFT_TOKENS}, got {k!r}",
        field="speculative_config")
    return k
