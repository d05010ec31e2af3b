"""The time of one engine step, and of a request's fixed cost: the one place servesize turns work into seconds.

Every consumer prices time here: the plan's decode and prefill rooflines (planning/decode.py, planning/prefill.py
hand over the bytes a step reads and the FLOPs it computes), the load model, power, teams and fleet through them,
and the engine simulator (simulate/engine.py), whose steps are ``StepModel.step_s`` and ``StepModel.decode_s``.

    overhead(tp, L, M)  = decode.step_overhead_s + step.overhead_per_layer_s x L
                          + (step.overhead_per_tp_doubling_s + step.overhead_per_layer_tp_doubling_s x L) x log2(tp)
                          + step.moe_layer_fixed_s x M
                          (the scheduler's pass and sampling; each of the L layers' kernels; TP adds two
                          all-reduces per layer; each of the M MoE layers' fused-experts kernel has a fixed part
                          that no expert's bytes pay for, measured alone; the two per-layer TP and MoE terms are 0
                          as fitted)
    decode step         = max(weights / effective bandwidth, GEMM FLOPs / effective FLOP/s)
                          + max(KV and state bytes / effective bandwidth, attention FLOPs / effective FLOP/s)
                          + overhead(tp)
                          (``decode.roofline = sequential``: the GEMMs' roofline, then the attention's, as vLLM runs
                          them one kernel after the other and as the mixed step below prices the decoders; ``max``
                          takes max(all bytes, all FLOPs), the KV read overlapped with the GEMMs: the rule before)
                          (routed experts are read at their MoE kernel's measured rate where it is measured: FP4
                          on a GPU without FP4 tensor cores, gpus.toml fp4_moe_tbps, the SMs dequantise them,
                          step.fp4_moe_kernel_rate; bf16, bf16_moe_tbps, step.bf16_moe_kernel_rate)
    prefill chunk       = max(FLOPs / achieved FLOP/s, weights read / effective bandwidth) + overhead(tp)
                          (a MoE model's routed experts' FLOPs at step.moe_prefill_efficiency of that rate where
                          ``step.moe_prefill_scope = experts``; with ``all`` its every FLOP is)
                          (the weight-read floor: a short chunk still streams every weight once;
                          ``prefill.weight_floor``)
    mixed step          = one weight read: the chunks' and the decoders' GEMMs priced as one prefill pass over
                          their tokens (with its floor), the decoders' KV reads on top, one overhead
                          (``step.mixed = one_weight_read``; ``sum`` prices the parts apart, the old rule)
    stall of a prefill  = what the decoders sharing its steps wait for it: each chunk's step lasts longer than a
                          decode step by the chunk's compute, less the weight read the decode step makes anyway
                          (``one_weight_read``), or by the whole compute (``sum``)
    request fixed cost  = step.request_fixed_s (the API server's tokenising, queueing and first-chunk hand-off:
                          what a one-token prompt's TTFT still costs)

The efficiencies are scaled by the deployment's kernels (``KernelEfficiency``: the weight format, the GPU's vendor,
the routed experts), and the fitted bandwidth efficiency by the GPU's memory-bound kernels' measured rate against
the fit's GPUs' (``fitted_bandwidth_share``, step.gpu_memory_kernels).
The terms are named assumptions (data/assumptions.toml ``step.*``, ``decode.*``, ``prefill.*``), each with its
source; scripts/step_accuracy.py --fit fits them on the fit part of the measured runs in
tests/fixtures/measured, and docs/accuracy.md reports them on the runs held out.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from servesize.errors import BadInput
from servesize.frozen import frozen

if TYPE_CHECKING:  # numpy loads where a function needs it (the CLI starts without it)
    import numpy as np
    from numpy.typing import ArrayLike

MIXED_RULES = ("one_weight_read", "sum")
# a decode step: the GEMMs' roofline then the KV read, the whole step's roofline, or its reads alone (the seed's)
DECODE_ROOFLINES = ("sequential", "max", "memory")
# a GPU's memory-bound kernels: at its measured GEMM read share against the fit's GPUs', or all alike (the rule before)
GPU_MEMORY_KERNEL_RULES = ("measured", "catalogue")
# FP8 prefill: at the GPU's measured FP8 GEMM share against its bf16 one, or at step.prefill_efficiency_fp8 everywhere
GPU_FP8_PREFILL_KERNEL_RULES = ("measured", "fitted")
# what step.moe_prefill_efficiency slows: a MoE prefill's every FLOP, or only its routed experts' GEMMs
MOE_PREFILL_SCOPES = ("all", "experts")
# the GEMMs' kernel families (planning.inputs.weight_format_of); each but bf16 has its bandwidth factor
# step.kernel_efficiency_<format> (data/assumptions.toml), relative to bf16's decode.bandwidth_efficiency
WEIGHT_FORMATS = ("bf16", "fp8_tensor", "fp8_block", "int8", "int4", "fp4")


@frozen
class KernelEfficiency:
    """How far a deployment's kernels are from the bf16 NVIDIA ones the base efficiencies describe: factors on the
    decode bandwidth (by weight format and vendor), on the routed experts' read (MoE), and on prefill's MFU."""

    bandwidth: float = 1.0
    experts: float = 1.0
    prefill: float = 1.0
    expert_prefill: float = 1.0  # on prefill's rate for the routed experts' GEMMs alone (step.moe_prefill_scope)

    @classmethod
    def of(cls, weight_format: str, vendor: str, moe: bool, a: Any, peak_dtype: str = "bf16",
           fp8_prefill_share: float = 0.0) -> KernelEfficiency:
        """From the named assumptions (``a(name)`` reads one); ``peak_dtype``: the dtype whose dense peak prefill's
        MFU is a share of (fp8 where the weights and the GPU both have it, and then the MFU is scaled by
        ``fp8_prefill_share``, the GPU's FP8 GEMMs' measured share of their peak over its bf16 GEMMs' of theirs,
        under step.gpu_fp8_prefill_kernels = measured; by step.prefill_efficiency_fp8 where none is measured)."""
        if weight_format not in WEIGHT_FORMATS:
            raise BadInput(f"unknown weight format {weight_format!r} (one of {', '.join(WEIGHT_FORMATS)})")
        fmt = 1.0 if weight_format == "bf16" else float(a(f"step.kernel_efficiency_{weight_format}"))
        amd = float(a("step.vendor_efficiency_amd")) if vendor.upper() == "AMD" else 1.0
        fp8 = fp8_prefill_factor(str(a("step.gpu_fp8_prefill_kernels")), fp8_prefill_share,
                                 float(a("step.prefill_efficiency_fp8"))) if peak_dtype == "fp8" else 1.0
        moe_prefill = float(a("step.moe_prefill_efficiency")) if moe else 1.0
        scope = str(a("step.moe_prefill_scope"))
        if scope not in MOE_PREFILL_SCOPES:
            raise BadInput(f"step.moe_prefill_scope is 'all' or 'experts', got {scope!r}")
        on_all = scope == "all"
        return cls(bandwidth=fmt * amd, experts=float(a("step.moe_expert_efficiency")) if moe else 1.0,
                   prefill=amd * fp8 * (moe_prefill if on_all else 1.0),
                   expert_prefill=1.0 if on_all else moe_prefill)


@frozen
class StepTerms:
    """The fixed costs of a step and of a request (seconds), and how a mixed step is priced."""

    overhead_s: float = 0.0
    overhead_per_layer_s: float = 0.0
    overhead_per_tp_doubling_s: float = 0.0
    request_fixed_s: float = 0.0
    moe_layer_fixed_s: float = 0.0
    overhead_per_layer_tp_doubling_s: float = 0.0
    mixed: str = "sum"
    prefill_weight_floor: bool = False

    def __post_init__(self) -> None:
        for name in ("overhead_s", "overhead_per_layer_s", "overhead_per_tp_doubling_s", "request_fixed_s",
                     "moe_layer_fixed_s", "overhead_per_layer_tp_doubling_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value < 1):
                raise BadInput(f"the step model's {name} must be in [0, 1) s, got {value!r}")
        if self.mixed not in MIXED_RULES:
            raise BadInput(f"a mixed step is priced 'one_weight_read' or 'sum', got {self.mixed!r}")

    def overhead(self, tp: int, layers: int = 0, moe_layers: int = 0) -> float:
        """Seconds every step costs beyond its roofline, for a model of ``layers`` layers, ``moe_layers`` of them
        with routed experts, at tensor-parallel width ``tp``."""
        if tp < 1 or layers < 0 or moe_layers < 0 or (layers and moe_layers > layers):
            raise BadInput(f"tensor-parallel size must be >= 1 and 0 <= MoE layers <= layers, got {tp!r}, "
                           f"{moe_layers!r} and {layers!r}")
        return (self.overhead_s + self.overhead_per_layer_s * layers
                + (self.overhead_per_tp_doubling_s + self.overhead_per_layer_tp_doubling_s * layers) * math.log2(tp)
                + self.moe_layer_fixed_s * moe_layers)


def fitted_bandwidth_share(rule: str, memory_kernels: float) -> float:
    """What the fitted decode.bandwidth_efficiency is multiplied by on this GPU (step.gpu_memory_kernels): its
    memory-bound kernels' measured rate against the fit's GPUs' (``memory_kernels``, model.hardware
    memory_kernel_factor) under 'measured', 1 under 'catalogue'. Only the fitted default is scaled: an efficiency
    given for the deployment (--bandwidth-efficiency, a calibration, the plan's bracket) is that GPU's own."""
    if rule not in GPU_MEMORY_KERNEL_RULES:
        raise BadInput(f"step.gpu_memory_kernels is 'measured' or 'catalogue', got {rule!r}")
    if not (math.isfinite(memory_kernels) and memory_kernels > 0):
        raise BadInput(f"a GPU's memory kernel factor must be > 0, got {memory_kernels!r}")
    return memory_kernels if rule == "measured" else 1.0


def fp8_prefill_factor(rule: str, measured_share: float, fitted: float) -> float:
    """What prefill's MFU is multiplied by where it runs at the FP8 peak (step.gpu_fp8_prefill_kernels): the GPU's
    measured FP8 GEMM share against its bf16 GEMMs' (``measured_share``, gpus.toml fp8_prefill_share or
    fp8_block_prefill_share) under 'measured' where there is one; ``fitted`` (step.prefill_efficiency_fp8) otherwise
    and under 'fitted' (the rule before)."""
    if rule not in GPU_FP8_PREFILL_KERNEL_RULES:
        raise BadInput(f"step.gpu_fp8_prefill_kernels is 'measured' or 'fitted', got {rule!r}")
    if not (math.isfinite(measured_share) and measured_share >= 0):
        raise BadInput(f"a GPU's FP8 prefill share must be >= 0, got {measured_share!r}")
    return measured_share if rule == "measured" and measured_share > 0 else fitted


# the rules that read routed experts at their MoE kernel's measured rate (planning.inputs._expert_kernel): each rule's
# values, and whether its kernel is memory-bound (an efficiency given for the deployment, --bandwidth-efficiency, a
# calibration or the plan's bracket, scales it as it scales the stream: bf16) or bound by the SMs that dequantise the
# experts (FP4 on a GPU without FP4 tensor cores: read at its own rate whatever the stream's)
EXPERT_KERNEL_RULES = {"step.fp4_moe_kernel_rate": (("measured", "memory"), False),
                       "step.bf16_moe_kernel_rate": (("measured", "fitted"), True)}


def expert_kernel_taken(rule: str, value: Any, kernel_bytes_per_s: float) -> bool:
    """Whether a MoE's routed experts are read at their kernel's measured rate: the deployment has one (``rule``, the
    assumption that governs it, Fixed.expert_kernel_rule, and the rate) and that assumption's ``value`` is
    'measured'. Otherwise step.moe_expert_efficiency prices their read. The decode setup and the plan's table of the
    terms that priced it both ask here."""
    if not rule or kernel_bytes_per_s <= 0:
        return False
    if rule not in EXPERT_KERNEL_RULES:
        raise BadInput(f"no rule reads routed experts at a measured kernel rate under the name {rule!r}")
    values = EXPERT_KERNEL_RULES[rule][0]
    if value not in values:
        raise BadInput(f"{rule} is {' or '.join(repr(v) for v in values)}, got {value!r}")
    return bool(value == "measured")


def dequant_share(stream_bytes_per_s: float, kernel_bytes_per_s: float) -> float:
    """The share of the decode stream's rate at which routed experts are read where their MoE kernel's rate is
    measured (FP4 experts the GPU's SMs dequantise, no FP4 tensor cores; bf16 experts): that measured rate
    (``kernel_bytes_per_s``, gpus.toml fp4_moe_tbps, fp4_moe_marlin_tbps or bf16_moe_tbps, under the GPU's memory
    bandwidth: gpus.toml and Gpu.with_figures keep it so) over the stream's (the HBM at
    decode.bandwidth_efficiency); 1 with no measured rate (0). A kernel measured faster than that fitted efficiency
    reads at its own rate (share above 1: Marlin on an H100, 2.70 TB/s against 3.35 x 0.75), so the share is at most
    1 / decode.bandwidth_efficiency."""
    if kernel_bytes_per_s <= 0 or stream_bytes_per_s <= 0:
        return 1.0
    return kernel_bytes_per_s / stream_bytes_per_s


def gemms_then_attention_s(weights_s: ArrayLike, gemm_s: ArrayLike, kv_s: ArrayLike, attention_s: ArrayLike) -> Any:
    """The sequential rule's seconds (vectorised): the GEMMs' roofline (their weights' read against their compute),
    then the attention's (the KV and state read against its compute). A decode step and a mixed step's decoders are
    both priced here."""
    import numpy as np
    return np.maximum(weights_s, gemm_s) + np.maximum(kv_s, attention_s)


def roofline_s(step_bytes: ArrayLike, step_flops: ArrayLike | None, bandwidth_bytes_per_s: float, flops_per_s: float,
               overhead_s: float, gemms: tuple[ArrayLike, ArrayLike] | None = None) -> np.ndarray:
    """The longer of the memory time and (``flops_per_s`` > 0 and FLOPs given) the compute time, plus the step's
    fixed cost; vectorised over arrays of bytes and FLOPs. With ``gemms`` = (their weights' bytes, their FLOPs),
    the sequential rule: the GEMMs' own roofline, then the attention's (the rest of the bytes, the KV and state
    reads, against the rest of the FLOPs)."""
    import numpy as np
    memory_s = np.asarray(step_bytes, dtype=float) / bandwidth_bytes_per_s
    if flops_per_s <= 0 or step_flops is None:
        return memory_s + overhead_s
    compute_s = np.asarray(step_flops, dtype=float) / flops_per_s
    if gemms is not None:
        weights_s = np.asarray(gemms[0], dtype=float) / bandwidth_bytes_per_s
        gemm_s = np.asarray(gemms[1], dtype=float) / flops_per_s
        sequential_s: np.ndarray = gemms_then_attention_s(weights_s, gemm_s, memory_s - weights_s, compute_s - gemm_s)
        return sequential_s + overhead_s
    longer_s: np.ndarray = np.maximum(memory_s, compute_s)
    return longer_s + overhead_s


def leg_s(work: float, rate: float) -> float:
    """Seconds of one leg of a step: its bytes (or FLOPs) over the rate the group reaches (0 without a rate)."""
    return float(work) / rate if rate > 0 else 0.0


class DecodeWork(Protocol):
    """What a decode step reads and computes (planning.decode.DecodeSetup)."""

    @property
    def tp(self) -> int: ...
    @property
    def spec_speedup(self) -> float: ...
    @property
    def topk_tokens(self) -> int: ...
    @property
    def step_overhead_s(self) -> float: ...
    @property
    def bandwidth_efficiency(self) -> float: ...
    @property
    def effective_bandwidth_bytes_per_s(self) -> float: ...
    @property
    def effective_flops_per_s(self) -> float: ...
    @property
    def prices_compute(self) -> bool: ...
    @property
    def sequential(self) -> bool: ...
    def weight_bytes(self, n: Any) -> Any: ...
    def gemm_flops(self, n: Any) -> Any: ...
    def step_bytes(self, contexts: np.ndarray) -> np.ndarray: ...
    def step_flops(self, n: int, context_sum: Any, window_sum: Any = 0.0) -> Any: ...


class PrefillWork(Protocol):
    """What a prefill pass computes (planning.prefill.PrefillSetup)."""

    @property
    def gemm_params(self) -> float: ...
    @property
    def mfu(self) -> float: ...
    @property
    def achieved_flops_per_s(self) -> float: ...
    def flops(self, tokens: Any, prior: Any = 0.0) -> Any: ...
    def priced_flops(self, tokens: Any, prior: Any = 0.0) -> Any: ...


def decode_seconds(setup: DecodeWork, step_bytes: ArrayLike, step_flops: ArrayLike | None = None,
                   n: int = 0) -> np.ndarray:
    """A decode step of ``n`` decoders: the roofline of its bytes and FLOPs plus the setup's per-step overhead
    (vectorised); under the sequential rule the weights' read (``setup.weight_bytes(n)``) against the FLOPs, the
    rest of the bytes after them."""
    rate = setup.effective_flops_per_s if setup.prices_compute else 0.0
    gemms = None
    if setup.sequential and rate > 0 and step_flops is not None:
        if n < 1:
            raise ValueError("the sequential roofline prices a step of n >= 1 decoders: pass n")
        gemms = (setup.weight_bytes(n), setup.gemm_flops(n))
    return roofline_s(step_bytes, step_flops, setup.effective_bandwidth_bytes_per_s, rate, setup.step_overhead_s,
                      gemms)


def prefill_seconds(setup: PrefillWork, tokens: ArrayLike, prior: ArrayLike = 0.0) -> Any:
    """The compute time of one prefill pass over ``tokens`` new tokens on ``prior`` cached ones (vectorised; no
    overhead, no floor: the planner's closed forms price those on top, the simulator through ``StepModel``)."""
    return setup.priced_flops(tokens, prior) / setup.achieved_flops_per_s


class StepModel:
    """Seconds of the engine simulator's steps, from the planner's own setups and the step terms."""

    def __init__(self, prefill: PrefillWork, decode: DecodeWork, terms: StepTerms | None = None):
        """``decode.step_overhead_s`` is the deployment's overhead (StepTerms.overhead at its TP and layers)."""
        self.prefill, self.decode = prefill, decode
        self.terms = StepTerms(overhead_s=float(decode.step_overhead_s)) if terms is None else terms

    @property
    def tokens_per_decode_step(self) -> float:
        """Tokens a decoding sequence gains per step: 1, or MTP's expected accepted tokens + 1."""
        return float(self.decode.spec_speedup)

    @property
    def request_fixed_s(self) -> float:
        return self.terms.request_fixed_s

    @property
    def overhead_s(self) -> float:
        return float(self.decode.step_overhead_s)

    def summary(self) -> str:
        """The terms this model prices with, as one line (``bench`` and ``simulate --engine`` print it)."""
        spec = self.tokens_per_decode_step
        return (f"overhead {self.overhead_s * 1e3:.2f} ms a step, request fixed cost {self.request_fixed_s * 1e3:.1f} ms, "
                f"mixed step {self.terms.mixed}, bandwidth efficiency {self.decode.bandwidth_efficiency:.3g}, "
                f"prefill MFU {self.prefill.mfu:.3g}" + (f", MTP {spec:.2f} tokens a step" if spec > 1 else ""))

    def prefill_s(self, tokens: float, prior: float) -> float:
        """A prefill-only step over one chunk (its compute, or under the weight floor the weights' read)."""
        return self.step_s([(tokens, prior)], None)

    def stall_s(self, tokens: ArrayLike, prior: ArrayLike, chunk_tokens: int) -> Any:
        """Seconds the decoders that share a prefill's steps wait for it (vectorised over ``tokens`` new tokens on
        ``prior`` cached ones), its chunks at most ``chunk_tokens`` each (--max-num-batched-tokens).

        Under ``one_weight_read`` a chunk's step reads the weights once for the chunk and the decoders, so each
        chunk adds its compute less that one weight read (the decode step reads them anyway; never below 0);
        under ``sum`` it adds its whole compute. Priced over the whole prefill at once: ceil(tokens / chunk)
        weight reads off its compute (a short last chunk saves as much read as a full one)."""
        import numpy as np
        if chunk_tokens < 1:
            raise BadInput(f"a prefill chunk must hold >= 1 token, got {chunk_tokens!r}")
        tokens = np.asarray(tokens, dtype=float)
        compute = np.asarray(prefill_seconds(self.prefill, tokens, prior), dtype=float)
        if self.terms.mixed == "sum":
            return compute
        read_s = leg_s(float(self.decode.weight_bytes(chunk_tokens)), self.decode.effective_bandwidth_bytes_per_s)
        return np.maximum(compute - np.ceil(tokens / chunk_tokens) * read_s, 0.0)

    def _decode_flops(self, contexts: np.ndarray) -> Any:
        """FLOPs of a decode step over each row of ``contexts`` (None where compute is not priced)."""
        import numpy as np
        d = self.decode
        if not d.prices_compute:
            return None
        topk = np.minimum(contexts, d.topk_tokens).sum(axis=-1) if d.topk_tokens else 0.0
        return d.step_flops(contexts.shape[-1], contexts.sum(axis=-1), topk)

    def decode_s(self, contexts: np.ndarray) -> np.ndarray:
        """One decode-only step of len(contexts[-1]) decoders for each row of ``contexts`` (rows: successive steps)."""
        import numpy as np
        return np.asarray(decode_seconds(self.decode, self.decode.step_bytes(contexts), self._decode_flops(contexts),
                                         int(contexts.shape[-1])),
                          dtype=np.float64)

    def step_s(self, chunks: list[tuple[float, float]], contexts: np.ndarray | None) -> float:
        """One scheduler step: prefill ``chunks`` ((new tokens, cached before them), ...) beside decoders at
        ``contexts`` (None or empty: none)."""
        import numpy as np
        n = 0 if contexts is None else int(np.asarray(contexts).size)
        if not chunks:
            return float(self.decode_s(np.asarray(contexts, dtype=np.float64)[None, :])[0]) if n else 0.0
        compute = sum(float(prefill_seconds(self.prefill, t, p)) for t, p in chunks)
        if self.terms.mixed == "sum":  # the parts priced apart: the chunks' compute, then a whole decode step
            decode = float(self.decode_s(np.asarray(contexts, dtype=np.float64)[None, :])[0]) if n else 0.0
            return compute + decode
        return self._one_weight_read(chunks, compute, np.asarray(contexts, dtype=np.float64) if n else None)

    def _one_weight_read(self, chunks: list[tuple[float, float]], compute: float, contexts: np.ndarray | None) -> float:
        """The chunks and the decoders in one pass: one weight read, the decoders' GEMMs on the same tensor cores,
        their KV read on top."""
        d = self.decode
        tokens = sum(float(t) for t, _ in chunks)
        kv_s = attention_s = 0.0
        if contexts is not None:
            n = contexts.size
            kv_bytes = float(d.step_bytes(contexts[None, :])[0]) - float(d.weight_bytes(n))
            kv_s = leg_s(kv_bytes, d.effective_bandwidth_bytes_per_s)
            flops = self._decode_flops(contexts)
            if flops is not None:  # the decoders' GEMMs beside the chunks'; under decode.roofline = sequential their
                gemm = float(d.gemm_flops(n)) if d.sequential else float(flops)  # attention against its KV read, else
                compute += leg_s(gemm, d.effective_flops_per_s)                  # with the GEMMs
                attention_s = leg_s(float(flops) - gemm, d.effective_flops_per_s)
            tokens += n
        weights_s = leg_s(float(d.weight_bytes(tokens)), d.effective_bandwidth_bytes_per_s) \
            if self.terms.prefill_weight_floor or contexts is not None else 0.0
        return float(gemms_then_attention_s(weights_s, compute, kv_s, attention_s)) + self.overhead_s


class ConstantSteps:
    """Step times as constants (worked examples): ``prefill_per_token_s`` per new token, ``decode_step_s`` +
    ``decode_per_seq_s`` per decoder per step; a mixed step costs its parts."""

    request_fixed_s = 0.0

    def __init__(self, prefill_per_token_s: float, decode_step_s: float, decode_per_seq_s: float = 0.0,
                 tokens_per_step: float = 1.0):
        self.a, self.b, self.c, self.k = prefill_per_token_s, decode_step_s, decode_per_seq_s, tokens_per_step

    @property
    def tokens_per_decode_step(self) -> float:
        return self.k

    def prefill_s(self, tokens: float, prior: float) -> float:
        return self.a * float(tokens)

    def decode_s(self, contexts: np.ndarray) -> np.ndarray:
        import numpy as np
        n = contexts.shape[-1]
        return np.full(contexts.shape[:-1], self.b + self.c * n, dtype=np.float64)

    def step_s(self, chunks: list[tuple[float, float]], contexts: np.ndarray | None) -> float:
        import numpy as np
        n = 0 if contexts is None else int(np.asarray(contexts).size)
        return sum(self.prefill_s(t, p) for t, p in chunks) + (self.b + self.c * n if n else 0.0)
