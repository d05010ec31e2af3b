"""What can these GPUs serve: every catalogue model x precision x placement that fits.

For each model and precision, tensor-parallel sizes 1, 2, 4, ... up to the GPU count are tried
(those vLLM accepts for the model's heads); each leaves ``count // tp`` replicas. The concurrency
at the target context is what the engine itself would compute: ``num_blocks / blocks per
request at that length`` under the ``engine`` budget, or the calculator seed's
``floor((usable x tp - weights) / KV per sequence)`` under ``--budget simple``.

The placement shown for a model is the smallest TP whose replica holds at least
``min_concurrency`` sequences (named assumption below); ``--all-placements`` lists every one.
"""

from __future__ import annotations

from dataclasses import field

from servesize.engine.budget import EngineAssumptions, budget_utilization
from servesize.engine.deployment import Deployment, check_parallelism
from servesize.engine.kv_cache import kv_per_token
from servesize.engine.memory import DEFAULT_ENGINE_ASSUMPTIONS, memory_report
from servesize.engine.weights import normalise_precision, weights
from servesize.errors import ServesizeError, WouldNotStart
from servesize.frozen import frozen
from servesize.jsonable import Record
from servesize.model.architecture import Architecture
from servesize.model.hardware import GpuGroup

# A placement holding fewer sequences than this at the target context is not shown as the
# model's placement when a wider one does better. The calculator seed's 4 x H100 table implies a
# threshold between 6 and 19: it places qwen2.5-32b at TP2 (41 per replica) although TP1 holds 5,
# and qwen3-30b-a3b at TP1 with 19. We take 8: one replica should at least batch a handful of users.
DEFAULT_MIN_CONCURRENCY = 8
DEFAULT_PRECISIONS = ("bf16", "fp8", "int4")


@frozen
class Placement:
    model: str
    display: str
    params: int
    active_params: int  # as publishers count them: the input embedding left out
    precision: str
    tp: int
    replicas: int
    weights_bytes: int
    weights_bytes_per_gpu: int
    concurrent_per_replica: int
    concurrent_total: int
    kv_bytes_per_sequence: int
    simple_concurrent_per_replica: int
    reserve_bytes_per_gpu: int
    chosen: bool = False

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@frozen
class FitResult:
    gpus: GpuGroup
    context: int
    budget: str
    vllm_version: str
    placements: tuple[Placement, ...]
    refused: tuple[tuple[str, str], ...]
    all_placements: bool
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict:
        return {
            "gpus": {"count": self.gpus.count, "gpu": self.gpus.gpu.key, "memory_mib": self.gpus.gpu.memory_mib},
            "context": self.context, "budget": self.budget, "vllm_version": self.vllm_version,
            "placements": [p.to_dict() for p in self.placements if p.chosen or self.all_placements],
            "refused": [{"model": m, "reason": r} for m, r in self.refused],
        }



def _tp_sizes(count: int) -> list[int]:
    sizes, tp = [], 1
    while tp <= count:
        sizes.append(tp)
        tp *= 2
    return sizes


def simple_concurrency(arch: Architecture, gpus: GpuGroup, tp: int, weights_total: int, context: int,
                       util: float, kv_cache_dtype: str) -> int:
    """The calculator seed's formula: floor((nvidia-smi x util x tp - weights) / KV per sequence)."""
    kv = kv_per_token(arch, kv_cache_dtype, 1).bytes_per_sequence(context)  # whole model, as the seed does
    pool = gpus.gpu.memory_bytes * util * tp - weights_total
    return max(0, int(pool // kv)) if pool > 0 else 0


@frozen
class _Settings:
    """What every placement of one fit is evaluated at."""

    context: int
    budget: str
    kv_cache_dtype: str
    gpu_memory_utilization: float | None
    vllm_version: str
    assumptions: EngineAssumptions


def _placement(key: str, display: str, arch: Architecture, gpus: GpuGroup, precision: str, tp: int,
               s: _Settings) -> Placement | str:
    """One model at one precision on ``tp`` GPUs per replica, or why it does not fit."""
    dep = Deployment(tensor_parallel_size=tp, data_parallel_size=gpus.count // tp, quantization=precision,
                     kv_cache_dtype=s.kv_cache_dtype, gpu_memory_utilization=s.gpu_memory_utilization,
                     max_model_len=s.context, vllm_version=s.vllm_version)
    try:
        w = weights(arch, precision, tp)
        util = dep.resolved(arch, gpus).gpu_memory_utilization or 0.0  # resolved: never None
        simple = simple_concurrency(arch, gpus, tp, w.total_bytes, s.context, util, s.kv_cache_dtype)
        kv_seq = kv_per_token(arch, s.kv_cache_dtype, tp).bytes_per_sequence(s.context)
        if s.budget == "simple":
            conc, reserve = simple, 0
            available = (gpus.gpu.memory_bytes * util * tp - w.total_bytes) / tp
        else:
            rep = memory_report(arch, gpus, dep, budget="engine", assumptions=s.assumptions, name=key)
            conc, reserve = int(rep.pool.max_concurrency), rep.budget.reserve_bytes
            available = rep.budget.available_bytes
    except WouldNotStart as exc:
        if exc.available_bytes is None:  # the weights themselves leave no room
            return f"TP{tp}: {exc}"
        conc, available = 0, exc.available_bytes  # the start-up check: one sequence does not fit
    except ServesizeError as exc:
        return f"TP{tp}: {exc}"
    if conc < 1:
        return (f"TP{tp}: {w.per_gpu_bytes / 2**30:.2f} GiB of weights per GPU fit, but one {s.context:,}-token "
                f"sequence needs {kv_seq / 2**30:.2f} GiB of KV per GPU and {max(0.0, available) / 2**30:.2f} GiB "
                "is available")
    replicas = gpus.count // tp
    return Placement(key, display, w.ledger.total, published_active(w.ledger, key),
                     precision if precision != "native" else w.precision,
                     tp, replicas, w.total_bytes, w.per_gpu_bytes, conc, conc * replicas, kv_seq, simple, reserve)


def published_active(ledger, key: str) -> int:
    """Active parameters as the model's publisher counts them: the catalogue says whether its source
    counts the input embedding (Qwen does, OpenAI does not); otherwise it is left out."""
    from servesize.model.catalogue import find_entry

    entry = find_entry(key)
    if entry is not None and entry.published_active_counts_embedding:
        return ledger.active
    return ledger.active_as_published


def _chosen(options: list[Placement], min_concurrency: int) -> Placement:
    """The smallest TP holding at least ``min_concurrency`` per replica, else the one holding most."""
    enough = next((o for o in options if o.concurrent_per_replica >= min_concurrency), None)
    return enough if enough is not None else max(options, key=lambda o: o.concurrent_per_replica)


def fit(models: list[tuple[str, str, Architecture]], gpus: GpuGroup, *, context: int = 8192,
        precisions: tuple[str, ...] | None = ("bf16",), budget: str = "engine", kv_cache_dtype: str = "auto",
        gpu_memory_utilization: float | None = None, vllm_version: str | None = None,
        min_concurrency: int = DEFAULT_MIN_CONCURRENCY, all_placements: bool = False,
        assumptions: EngineAssumptions = DEFAULT_ENGINE_ASSUMPTIONS) -> FitResult:
    from servesize.engine.versions import DEFAULT_VLLM_VERSION

    version = vllm_version or DEFAULT_VLLM_VERSION
    gpu_memory_utilization = budget_utilization(budget, gpu_memory_utilization)
    settings = _Settings(context, budget, kv_cache_dtype, gpu_memory_utilization, version, assumptions)
    out: list[Placement] = []
    refused: list[tuple[str, str]] = []
    for key, display, arch in models:
        # None: a checkpoint that is quantised already is served as it is; any other at bf16, fp8, int4.
        chosen_precisions = precisions if precisions is not None else (
            ("native",) if arch.quantization is not None else DEFAULT_PRECISIONS)
        for precision in (normalise_precision(p) for p in chosen_precisions):
            options: list[Placement] = []
            reasons: list[str] = []  # one per placement tried: weights per GPU at that TP, or KV needed vs available
            for tp in _tp_sizes(gpus.count):
                try:
                    check_parallelism(arch, tp)
                except ServesizeError as exc:
                    reasons.append(f"TP{tp}: {str(exc).split(';')[0]}")
                    continue
                found = _placement(key, display, arch, gpus, precision, tp, settings)
                if isinstance(found, str):
                    reasons.append(found.split(";")[0])
                else:
                    options.append(found)
            if not options:
                refused.append((f"{key} {precision}", "; ".join(reasons) or "does not fit"))
                continue
            chosen = _chosen(options, min_concurrency)
            out += [Placement(**{**o.to_dict(), "chosen": o is chosen}) for o in options]
    return FitResult(gpus, context, budget, version, tuple(out), tuple(refused), all_placements)


# -- the split of N GPUs for one deployment (plan and memory with --gpus NxGPU and no TP/DP) --------

@frozen
class Split(Record):
    """How N GPUs are split into replicas: TP x PP GPUs each, DP of them, and why."""

    tp: int
    dp: int
    pp: int
    gpus: int            # the GPUs named
    chosen: bool         # servesize chose TP and/or DP (False: every one was given)
    reason: str
    tried: tuple[str, ...] = ()  # per TP tried: what one replica holds, or why it does not fit

    @property
    def gpus_used(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def gpus_idle(self) -> int:
        return self.gpus - self.gpus_used

    JSON_EXTRA = ("gpus_used", "gpus_idle")

    def text(self) -> str:
        return (f"placement: {self.gpus_used} of {self.gpus} GPUs as TP {self.tp} x DP {self.dp}"
                + (f" x PP {self.pp}" if self.pp > 1 else "") + f": {self.reason}")


MAX_SPLIT_TP = 1024  # the most TP tried when the model names no attention heads (the -tp bound)


def _split_sizes(arch: Architecture, gpus: int) -> list[int]:
    """The TP sizes tried for ``gpus`` GPUs: those up to the GPUs that divide the attention heads (vLLM refuses the
    rest; check_parallelism says why for the powers of two, as fit tries them)."""
    heads = arch.num_attention_heads or 0
    top = min(gpus, heads or MAX_SPLIT_TP)
    divisors = {d for d in range(1, top + 1) if not heads or heads % d == 0}
    return sorted(divisors | {t for t in _tp_sizes(min(gpus, MAX_SPLIT_TP))})


def _replica_holds(arch: Architecture, gpu, dep: Deployment, tp: int, pp: int, assumptions: EngineAssumptions,
                   budget: str) -> tuple[int, int] | str:
    """(sequences of --max-model-len one TP x PP replica holds, that length), or why it does not fit."""
    try:
        rep = memory_report(arch, GpuGroup(tp * pp, gpu), _with_split(dep, tp, 1, pp), budget=budget,
                            assumptions=assumptions)
    except ServesizeError as exc:
        return str(exc).split(";")[0]
    return int(rep.pool.max_concurrency), rep.pool.max_model_len


def _with_split(dep: Deployment, tp: int, dp: int, pp: int) -> Deployment:
    from dataclasses import replace

    return replace(dep, tensor_parallel_size=tp, data_parallel_size=dp, pipeline_parallel_size=pp)


def _search_tp(arch: Architecture, gpu, dep: Deployment, room: int, pp: int, min_concurrency: int,
               assumptions: EngineAssumptions, budget: str) -> tuple[int, str, tuple[str, ...]]:
    """fit's rule over the TP sizes ``room`` GPUs allow: the smallest TP whose replica holds at least
    ``min_concurrency`` sequences, else the one holding most; TPs that divide ``room`` (no GPU idle) first."""
    held: dict[int, int] = {}
    tried: list[str] = []
    length = "max-model-len"
    allowed: list[int] = []
    for tp in _split_sizes(arch, room):
        try:
            check_parallelism(arch, tp, pp)
        except ServesizeError as exc:
            tried.append(f"TP {tp}: {str(exc).split(';')[0]}")
            continue
        allowed.append(tp)
        found = _replica_holds(arch, gpu, dep, tp, pp, assumptions, budget)
        if isinstance(found, str) or found[0] < 1:
            tried.append(f"TP {tp}: {found if isinstance(found, str) else 'not one sequence fits'}")
            continue
        held[tp], length = found[0], f"{found[1]:,}-token"
        tried.append(f"TP {tp}: {found[0]:,} sequences per replica")
    if not held:  # the widest TP the heads allow says best why it does not fit
        tp = max(allowed, default=1)
        return tp, f"no TP fits; planned at the widest the heads allow ({tp}) to say why", tuple(tried)
    whole = {tp: n for tp, n in held.items() if room % tp == 0}
    pool = whole or held
    enough = [tp for tp in sorted(pool) if pool[tp] >= min_concurrency]
    if enough:
        tp = enough[0]
        why = (f"the smallest TP whose replica holds >= {min_concurrency} {length} sequences ({pool[tp]:,}), "
               "so the most replicas")
    else:
        tp = max(pool, key=lambda t: (pool[t], -t))
        why = f"no TP holds {min_concurrency} {length} sequences per replica; TP {tp} holds the most ({pool[tp]:,})"
    return tp, why, tuple(tried)


def choose_split(arch: Architecture, gpus: GpuGroup, dep: Deployment, *, tp_given: bool, dp_given: bool,
                 min_concurrency: int = DEFAULT_MIN_CONCURRENCY, assumptions: EngineAssumptions = DEFAULT_ENGINE_ASSUMPTIONS,
                 budget: str = "engine", max_dp: int = 4096) -> Split:
    """The split of ``gpus`` for ``dep``: TP and DP as given; a TP not given found by fit's rule (the smallest TP
    whose replica holds DEFAULT_MIN_CONCURRENCY sequences at --max-model-len); a DP not given as many replicas as
    the GPUs hold. A split that leaves GPUs idle says so."""
    tp, dp, pp, n = dep.tensor_parallel_size, dep.data_parallel_size, dep.pipeline_parallel_size, gpus.count
    tried: tuple[str, ...] = ()
    if tp_given:
        why = f"TP {tp} as given"
    else:
        room = max(1, n // (pp * (dp if dp_given else 1)))
        tp, why, tried = _search_tp(arch, gpus.gpu, dep, room, pp, min_concurrency, assumptions, budget)
        why = f"TP {tp}: {why} (fit's rule, engine.placement.DEFAULT_MIN_CONCURRENCY)"
    if dp_given:
        why += f"; DP {dp} as given"
    else:
        dp = max(1, min(max_dp, n // (tp * pp)))
        why += (f"; DP {dp}: as many replicas as {n} GPUs hold" if dp < max_dp
                else f"; DP {dp}: the most replicas -dp takes")
    used = tp * dp * pp
    if used < n:
        why += f"; {n - used} of {n} GPUs idle (TP x DP x PP = {used}): " + (
            "the TP and DP given use no more" if tp_given and dp_given
            else f"one deployment takes at most {max_dp} replicas" if dp == max_dp and not dp_given
            else f"TP {tp} chosen for the DP {dp} given" if dp_given
            else f"TP {tp} x PP {pp} does not divide {n}" if tp_given
            else f"no TP that divides {n} fits")
    return Split(tp, dp, pp, n, not (tp_given and dp_given), why, tried)
