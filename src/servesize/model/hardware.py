"""The GPU catalogue (``data/gpus.toml``) and GPU specs such as ``'4xH100'``.

A ``Gpu`` is one device type as the world documents it: memory as ``nvidia-smi`` reports it
(MiB), peak memory bandwidth (GB/s = 10**9 B/s), dense tensor FLOP/s per dtype (never the 2:4
sparse figure), and whether FP8/FP4 tensor paths exist. Every row carries its source; rows
whose figures are unverified say which in ``confidence``.

    find_gpu("h100").memory_mib          -> 81559
    parse_gpus("4xH100")                 -> GpuGroup(count=4, gpu=<H100-SXM>)
    find_gpu("H200").dense_flops_per_s("fp8") -> 1.979e15
"""

from __future__ import annotations

import re
from dataclasses import asdict, fields, replace
from functools import lru_cache

from servesize.datafiles import table
from servesize.errors import BadInput
from servesize.frozen import frozen
from servesize.units import GB, MiB, parse_bytes

# dtype spellings -> the catalogue column that holds their dense rate. FP16 runs at the BF16 rate
# on every part catalogued (with FP32 accumulation on GeForce cards, as PyTorch's GEMMs use).
_DTYPE_COLUMN = {
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "bf16", "float16": "bf16", "half": "bf16",
    "fp8": "fp8", "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
    "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "fp4",
}

# Words a user may put in front of a GPU name that do not change which GPU it is.
_PREFIXES = ("nvidia", "amd", "intel", "geforce", "instinct")


@frozen
class Gpu:
    """One device type. Memory in MiB as nvidia-smi prints it; bandwidth in GB/s; FLOP/s dense."""

    key: str
    name: str
    vendor: str
    memory_mib: int
    bandwidth_gbps: float
    source: str
    aliases: tuple[str, ...] = ()
    bf16_dense_tflops: float = 0.0  # 0: not published
    fp8_dense_tflops: float = 0.0  # 0: none
    fp4_dense_tflops: float = 0.0  # 0: none
    fp8: bool = False
    fp4: bool = False
    compute_capability: str = ""
    interconnect: str = ""
    host_link: str = ""  # the link to host RAM, by name ("PCIe Gen5 x16"); empty: not catalogued
    host_link_gbps: float = 0.0  # GB/s one way, the signalling rate (gpus.toml [[host_link]]); 0: not catalogued
    host_link_source: str = ""  # where the GPU's link and the link's rate were read
    tdp_w: int | None = None
    # where FP4 weights have no tensor cores: the measured rate (TB/s, one GPU, TP 1) at which vLLM's MXFP4 MoE kernel
    # reads routed experts, bound by the SMs that dequantise them, not by memory; 0: not measured
    fp4_moe_tbps: float = 0.0
    fp4_moe_source: str = ""
    fp4_moe_marlin_tbps: float = 0.0  # the same for vLLM's Marlin MoE kernel (--moe-backend marlin); 0: not measured
    fp4_moe_marlin_source: str = ""
    # the measured rate (TB/s, one GPU, TP 1) at which vLLM's bf16 fused-MoE kernel reads routed experts where every
    # expert is touched, measured alone; 0: not measured (the step model then reads them at step.moe_expert_efficiency)
    bf16_moe_tbps: float = 0.0
    bf16_moe_source: str = ""
    # the share of the HBM's peak bandwidth that vLLM's bf16 GEMMs reach at decode sizes (1-8 tokens, weights of
    # 4,096-16,384 a side), bytes over time summed over the measured shapes; 0: not measured (memory_kernel_factor)
    gemm_read_share: float = 0.0
    gemm_read_source: str = ""
    gemm_read_share_from: str = ""  # a GPU of the same chip whose measured share this one takes (its SXM part, say)
    # how much of its dense FP8 peak vLLM's FP8 GEMMs reach at prefill sizes (1,024-8,192 tokens, weights of
    # 4,096-16,384 a side) against how much of the bf16 peak its bf16 GEMMs reach: per-tensor scales, and block
    # scales (128 x 128, DeepSeek's and Qwen3's FP8 checkpoints); summed times over the same calls; 0: not measured
    # (step.gpu_fp8_prefill_kernels)
    fp8_prefill_share: float = 0.0
    fp8_block_prefill_share: float = 0.0
    fp8_prefill_source: str = ""
    fp8_prefill_share_from: str = ""  # a GPU of the same chip whose measured FP8 shares this one takes (H100 PCIe, NVL)
    tdp_source: str = ""  # where the TDP figure was read (a URL, or the nvidia-smi line searched for)
    memory_basis: str = "nvidia-smi"  # or "rocm-smi", "datasheet" (marketed GB as 10**9 B), "override"
    memory_note: str = ""
    cuda_total_bytes: int | None = None  # CUDA/torch-visible total where a log or tool documents it
    cuda_total_note: str = ""
    bandwidth_note: str = ""
    confidence: str = ""  # which figures gpu-specs.md tags [U] or [D]; empty when all are [V]
    memory_override_bytes: int | None = None  # set by with_memory()
    dense_tflops_override: float | None = None  # set by with_figures(): the dense rate at any compute dtype
    figures_note: str = ""  # which figures the user supplied

    @property
    def memory_bytes(self) -> int:
        """Total device memory in bytes: nvidia-smi's memory.total × 2**20, or the override."""
        if self.memory_override_bytes is not None:
            return self.memory_override_bytes
        return self.memory_mib * MiB

    @property
    def host_link_bytes_per_s(self) -> float:
        """Host-to-device signalling rate, B/s one way; 0.0 when the catalogue has no link for this GPU."""
        return self.host_link_gbps * GB

    @property
    def bandwidth_bytes_per_s(self) -> int:
        return int(round(self.bandwidth_gbps * GB))

    def dense_flops_per_s(self, dtype: str) -> float:
        """Dense tensor FLOP/s for ``'bf16'``, ``'fp16'``, ``'fp8'`` or ``'fp4'``; BadInput if the GPU lacks it."""
        column = _DTYPE_COLUMN.get(str(dtype).strip().lower())
        if column is None:
            raise BadInput(f"unknown compute dtype {dtype!r}: use bf16, fp16, fp8 or fp4")
        if column == "fp8" and not self.fp8:
            raise BadInput(f"{self.key} has no FP8 tensor cores; use bf16 (or fp16) compute on it")
        if column == "fp4" and not self.fp4:
            raise BadInput(f"{self.key} has no FP4 tensor cores; use fp8 or bf16 compute on it")
        if self.dense_tflops_override is not None:
            return self.dense_tflops_override * 1e12
        tflops = getattr(self, f"{column}_dense_tflops")
        if not tflops:
            raise BadInput(f"no published dense {column.upper()} figure for {self.key}; servesize will not guess one "
                           "(give yours with --gpu-flops TFLOPS)", field="gpu_flops")
        return tflops * 1e12

    def with_figures(self, *, bandwidth_gbps: float | None = None, dense_tflops: float | None = None,
                     tdp_w: float | None = None) -> Gpu:
        """A copy with the figures the user supplies (--gpu-bandwidth, --gpu-flops, --gpu-tdp) in place of,
        or where the catalogue lacks, its own."""
        changes: dict = {}
        said = []
        if bandwidth_gbps is not None:
            if bandwidth_gbps <= 0:
                raise BadInput(f"--gpu-bandwidth must be > 0 GB/s, got {bandwidth_gbps!r}", field="gpu_bandwidth")
            changes["bandwidth_gbps"] = float(bandwidth_gbps)
            said.append(f"bandwidth {bandwidth_gbps:g} GB/s")
            if self.bandwidth_gbps > 0:  # a measured FP4 MoE kernel is SM-bound: a slower memory slows it in
                slower = min(1.0, float(bandwidth_gbps) / self.bandwidth_gbps)  # proportion, a faster one does not
                changes["fp4_moe_tbps"] = self.fp4_moe_tbps * slower        # speed it (it stays under the HBM)
                changes["fp4_moe_marlin_tbps"] = self.fp4_moe_marlin_tbps * slower
                changes["bf16_moe_tbps"] = self.bf16_moe_tbps * slower  # memory-bound: a slower HBM slows it too
        if dense_tflops is not None:
            if dense_tflops <= 0:
                raise BadInput(f"--gpu-flops must be > 0 TFLOP/s, got {dense_tflops!r}", field="gpu_flops")
            changes["dense_tflops_override"] = float(dense_tflops)
            said.append(f"dense {dense_tflops:g} TFLOP/s")
        if tdp_w is not None:
            if tdp_w <= 0:
                raise BadInput(f"--gpu-tdp must be > 0 W, got {tdp_w!r}", field="gpu_tdp")
            changes["tdp_w"] = int(round(tdp_w))
            said.append(f"TDP {tdp_w:g} W")
        note = "user-supplied: " + ", ".join(said)
        return replace(self, figures_note=f"{self.figures_note}; {note}" if self.figures_note else note, **changes)

    def with_memory(self, memory_bytes: int | str) -> Gpu:
        """A copy whose total memory is ``memory_bytes`` (an int or ``'80GiB'``, ``'81559MiB'``)."""
        n_bytes = parse_bytes(memory_bytes)
        if n_bytes <= 0:
            raise BadInput(f"GPU memory must be positive, got {memory_bytes!r}")
        return replace(
            self,
            memory_override_bytes=n_bytes,
            memory_basis="override",
            memory_note=f"set by the user; the catalogue says {self.memory_mib} MiB ({self.memory_basis})",
            cuda_total_bytes=None,
            cuda_total_note="",
        )

    def to_dict(self) -> dict:
        out = asdict(self)
        out["aliases"] = list(self.aliases)
        out["memory_bytes"] = self.memory_bytes
        out["memory_gib"] = round(self.memory_bytes / 2**30, 3)
        out["bandwidth_bytes_per_s"] = self.bandwidth_bytes_per_s
        return out

    def __str__(self) -> str:
        return self.key


@frozen
class GpuGroup:
    """``count`` GPUs of one type, as in ``4xH100``."""

    count: int
    gpu: Gpu

    @property
    def memory_bytes(self) -> int:
        return self.count * self.gpu.memory_bytes

    def __str__(self) -> str:
        return f"{self.count}x{self.gpu.key}"

    def to_dict(self) -> dict:
        return {"count": self.count, "gpu": self.gpu.key, "spec": str(self)}


# ---------------------------------------------------------------- loading

_FIELDS = {f.name: f for f in fields(Gpu)}
_REQUIRED = ("key", "name", "vendor", "memory_mib", "bandwidth_gbps", "source")
_FROM_TOML_ONLY = {"cuda_total_gib"}  # converted to cuda_total_bytes on load


_SEPARATORS = re.compile(r"[\s\-_]+")


def _normalise(name: str) -> str:
    return _SEPARATORS.sub("", str(name)).lower()


def _without_prefixes(norm: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in _PREFIXES:
            if norm.startswith(prefix) and len(norm) > len(prefix):
                norm = norm[len(prefix):]
                changed = True
    return norm


def _host_link(values: dict, links: dict[str, dict], label: str) -> None:
    """Resolve a row's host_link key to the link's name and one-way rate, its sources joined."""
    key = values.get("host_link")
    if key is None:
        return
    link = links.get(key)
    if link is None or not str(values.get("host_link_source", "")).strip():
        raise ValueError(f"gpus.toml row {label}: host_link {key!r} must name a [[host_link]] row and carry host_link_source")
    values.update(host_link=link["name"], host_link_gbps=float(link["gbps_per_direction"]),
                  host_link_source=f"{values['host_link_source']}; {link['name']}: {link['source']}")


def _links(rows: list[dict], table_name: str = "host_link") -> dict[str, dict]:
    links = {}
    for row in rows:
        if set(row) != {"key", "name", "gbps_per_direction", "source"} or not row["gbps_per_direction"] > 0 \
                or not str(row["source"]).strip():
            raise ValueError(f"gpus.toml {table_name} {row.get('key')!r}: needs key, name, gbps_per_direction > 0 and "
                             "source")
        if row["key"] in links:
            raise ValueError(f"gpus.toml {table_name}: duplicate key {row['key']!r}")
        links[row["key"]] = row
    return links


def _row_to_gpu(row: dict, links: dict[str, dict] | None = None) -> Gpu:
    label = row.get("key", "<no key>")
    unknown = set(row) - (set(_FIELDS) - {"memory_override_bytes", "host_link_gbps"} | _FROM_TOML_ONLY)
    if unknown:
        raise ValueError(f"gpus.toml row {label}: unknown field(s) {sorted(unknown)}")
    missing = [k for k in _REQUIRED if not row.get(k)]
    if missing:
        raise ValueError(f"gpus.toml row {label}: missing {missing}")
    values = dict(row)
    if "cuda_total_gib" in values:
        if "cuda_total_bytes" in values:
            raise ValueError(f"gpus.toml row {label}: give cuda_total_gib or cuda_total_bytes, not both")
        values["cuda_total_bytes"] = int(round(values.pop("cuda_total_gib") * 2**30))
    values["aliases"] = tuple(values.get("aliases", ()))
    _host_link(values, links or {}, label)
    gpu = Gpu(**values)
    _check_figures(gpu, label)
    return gpu


def _check_moe_rates(gpu: Gpu, label: str) -> None:
    """A measured FP4 MoE kernel rate (the default kernel's, Marlin's) is of a GPU without FP4 tensor cores, positive,
    with its source, and under the GPU's memory bandwidth (a kernel reads no faster than the HBM); a measured bf16
    MoE kernel rate is positive, with its source, and under the bandwidth too."""
    if gpu.bf16_moe_tbps and (gpu.bf16_moe_tbps < 0 or not gpu.bf16_moe_source.strip()
                              or gpu.bf16_moe_tbps * 1000 > gpu.bandwidth_gbps):
        raise ValueError(f"gpus.toml row {label}: a bf16 MoE kernel rate is positive, with its source, and under the "
                         "GPU's memory bandwidth")
    for rate, source, which in ((gpu.fp4_moe_tbps, gpu.fp4_moe_source, "an FP4 MoE kernel rate"),
                                (gpu.fp4_moe_marlin_tbps, gpu.fp4_moe_marlin_source, "a Marlin FP4 MoE kernel rate")):
        if rate and (gpu.fp4 or rate < 0 or not source.strip()):
            raise ValueError(f"gpus.toml row {label}: {which} is measured for a GPU without FP4 tensor cores, "
                             "positive, with its source")
        if rate * 1000 > gpu.bandwidth_gbps:
            raise ValueError(f"gpus.toml row {label}: {which} above the GPU's memory bandwidth")


def _check_figures(gpu: Gpu, label: str) -> None:
    """A catalogue row's figures agree with each other (ValueError naming the row where they do not)."""
    if gpu.fp8_dense_tflops and not gpu.fp8 or gpu.fp4_dense_tflops and not gpu.fp4:
        raise ValueError(f"gpus.toml row {label}: a dense FP8/FP4 rate on a GPU marked without FP8/FP4")
    if gpu.cuda_total_bytes is not None and gpu.cuda_total_bytes > gpu.memory_bytes:
        raise ValueError(f"gpus.toml row {label}: CUDA-visible total exceeds the smi total")
    if gpu.memory_mib <= 0 or gpu.bandwidth_gbps <= 0:
        raise ValueError(f"gpus.toml row {label}: memory and bandwidth must be positive")
    _check_moe_rates(gpu, label)
    if gpu.gemm_read_share and not (0 < gpu.gemm_read_share <= 1 and gpu.gemm_read_source.strip()):
        raise ValueError(f"gpus.toml row {label}: a GEMM read share is in (0, 1] and carries its gemm_read_source")
    for share in (gpu.fp8_prefill_share, gpu.fp8_block_prefill_share):
        if share and not (gpu.fp8 and 0 < share <= 1.5 and gpu.fp8_prefill_source.strip()):
            raise ValueError(f"gpus.toml row {label}: an FP8 prefill share is of a GPU with FP8 tensor cores, in "
                             "(0, 1.5], and carries its fp8_prefill_source")
    if gpu.tdp_w is not None and (gpu.tdp_w <= 0 or not gpu.tdp_source.strip()):
        raise ValueError(f"gpus.toml row {label}: a TDP must be positive and carry its tdp_source")


@lru_cache(maxsize=1)
def load_host_links() -> dict[str, dict]:
    """The host links (GPU <-> host RAM), key -> {key, name, gbps_per_direction, source}."""
    return _links(table("gpus.toml").get("host_link", []))


@lru_cache(maxsize=1)
def load_kv_links() -> dict[str, dict]:
    """The links a disaggregated deployment's KV blocks cross between instances, key -> {key, name,
    gbps_per_direction (per GPU, one way), source}: the [[kv_link]] rows, and the host links (a PCIe path between
    two GPUs of one host crosses each GPU's own x16 link)."""
    links = _links(table("gpus.toml").get("kv_link", []), "kv_link")
    clash = links.keys() & load_host_links().keys()
    if clash:
        raise ValueError(f"gpus.toml: kv_link key(s) {sorted(clash)} also name a host_link")
    return {**links, **load_host_links()}


# the GPUs that hold the fit's runs (scripts/step_accuracy.py: all but a few of them are on these two), whose
# kernels the fitted decode.bandwidth_efficiency already prices: the one fitted figure cannot tell them apart
MEMORY_KERNEL_REFERENCE = ("H100-SXM", "H200-SXM")


def memory_kernel_factor(gpu: Gpu) -> float:
    """How fast a GPU's memory-bound kernels read, relative to the GPUs the step model was fitted on: its measured
    GEMM read share (gpus.toml gemm_read_share) over the mean of MEMORY_KERNEL_REFERENCE's; 1 for those GPUs
    themselves (the fit's efficiency is theirs) and for a GPU with no measured share (step.gpu_memory_kernels)."""
    share = float(getattr(gpu, "gemm_read_share", 0.0))
    if share <= 0 or gpu.key in MEMORY_KERNEL_REFERENCE:
        return 1.0
    ref = [load_gpus()[k].gemm_read_share for k in MEMORY_KERNEL_REFERENCE]
    if min(ref) <= 0:
        raise ValueError(f"gpus.toml: the reference GPUs {', '.join(MEMORY_KERNEL_REFERENCE)} need a gemm_read_share")
    return share / (sum(ref) / len(ref))


def load_gpus() -> dict[str, Gpu]:
    """The catalogue, key -> Gpu, in file order."""
    return _catalogue()[0]


@lru_cache(maxsize=1)
def _catalogue() -> tuple[dict[str, Gpu], dict[str, str]]:
    """The catalogue and its index of names (built once: it is also the check that no alias names two GPUs)."""
    gpus: dict[str, Gpu] = {}
    data = table("gpus.toml")
    links = load_host_links()
    for row in data.get("gpu", []):
        gpu = _row_to_gpu(row, links)
        if gpu.key in gpus:
            raise ValueError(f"gpus.toml: duplicate key {gpu.key}")
        gpus[gpu.key] = gpu
    for key, gpu in list(gpus.items()):  # the same chip's kernels: its measured sibling's GEMM read share
        if gpu.gemm_read_share_from:
            other = gpus.get(gpu.gemm_read_share_from)
            if other is None or not other.gemm_read_share or gpu.gemm_read_share:
                raise ValueError(f"gpus.toml row {key}: gemm_read_share_from names a measured GPU, and the row "
                                 "gives no share of its own")
            gpus[key] = replace(gpu, gemm_read_share=other.gemm_read_share,
                                gemm_read_source=f"the same chip's, measured on the {other.key}: {other.gemm_read_source}")
    for key, gpu in list(gpus.items()):  # the same chip's FP8 GEMMs: its measured sibling's shares
        sibling = gpu.fp8_prefill_share_from or gpu.gemm_read_share_from
        other = gpus.get(sibling) if sibling else None
        if gpu.fp8_prefill_share_from and (other is None or not other.fp8_prefill_share or gpu.fp8_prefill_share):
            raise ValueError(f"gpus.toml row {key}: fp8_prefill_share_from names a measured GPU, and the row gives no "
                             "share of its own")
        if other is not None and other.fp8_prefill_share and gpu.fp8 and not gpu.fp8_prefill_share:
            gpus[key] = replace(gpu, fp8_prefill_share=other.fp8_prefill_share,
                                fp8_block_prefill_share=other.fp8_block_prefill_share,
                                fp8_prefill_source=f"the same chip's, measured on the {other.key}: {other.fp8_prefill_source}")
    return gpus, _index(gpus)  # _index fails on an alias claimed by two GPUs


def _names(gpu: Gpu) -> tuple[str, ...]:
    return (gpu.key, gpu.name, *gpu.aliases)


def _index(gpus: dict[str, Gpu]) -> dict[str, str]:
    """normalised name -> key; an alias claimed by two GPUs is a data error."""
    index: dict[str, str] = {}
    for gpu in gpus.values():
        for name in _names(gpu):
            plain = _normalise(name)
            for norm in {plain, _without_prefixes(plain)}:
                other = index.setdefault(norm, gpu.key)
                if other != gpu.key:
                    raise ValueError(f"gpus.toml: {name!r} names both {other} and {gpu.key}")
    return index


def _lookup() -> dict[str, str]:
    return _catalogue()[1]


def find_gpu(name: str) -> Gpu:
    """The GPU called ``name`` (key, name or alias; case, spaces, dashes, underscores ignored)."""
    gpus, index = load_gpus(), _lookup()
    norm = _normalise(name)
    for candidate in (norm, _without_prefixes(norm)):
        if candidate in index:
            return gpus[index[candidate]]
    raise BadInput(_unknown_message(name, index))


def _unknown_message(name: str, index: dict[str, str]) -> str:
    import difflib

    norm = _without_prefixes(_normalise(name))
    close: list[str] = []
    for match in difflib.get_close_matches(norm, list(index), n=12, cutoff=0.5):
        if index[match] not in close:
            close.append(index[match])
    # A name that contains a known key ('H100 SXM 80GB HBM3 custom') is a likely intent too.
    for norm_name, key in index.items():
        if len(norm_name) >= 3 and norm_name in norm and key not in close:
            close.append(key)
    hint = f"; did you mean {', '.join(close[:4])}?" if close else ""
    return f"unknown GPU {name!r}{hint} (`servesize gpus` lists them all)"


_SPEC = re.compile(r"^\s*([+-]?[0-9]+(?:\.[0-9]*)?)\s*[x×*]\s*(\S.*?)\s*$", re.IGNORECASE)


def parse_gpus(spec: str, memory: int | str | None = None) -> GpuGroup:
    """``'4xH100'``, ``'4 x H100'``, ``'8xh100-sxm'``, ``'H200'`` (one GPU); ``memory`` overrides each GPU's total."""
    text = str(spec).strip()
    if not text:
        raise BadInput("no GPUs given: write e.g. --gpus 4xH100 or --gpus H200", field="gpus")
    match = _SPEC.match(text)
    if match:
        count_text, name = match.groups()
        try:
            count = int(count_text)
        except ValueError:
            raise BadInput(f"GPU count in {spec!r} must be a whole number, e.g. 4xH100") from None
        if count < 1:
            raise BadInput(f"GPU count in {spec!r} must be at least 1, e.g. 4xH100")
    else:
        count, name = 1, text
    gpu = find_gpu(name)
    if memory is not None:
        gpu = gpu.with_memory(memory)
    return GpuGroup(count=count, gpu=gpu)


# /proc/cpuinfo lists every core's flags; the first core's line is all the check needs.
_CPUINFO = "/proc/cpuinfo"
_CPUINFO_MAX_BYTES = 1 << 20


@lru_cache(maxsize=1)
def host_has_avx512_bf16(cpuinfo: str = _CPUINFO) -> bool:
    """Whether this machine's CPU has AVX-512 BF16, as vLLM's CPU build asks torch
    (``torch.cpu._is_avx512_bf16_supported``, from cpuinfo's CPUID reading; Linux lists the same
    bit as the ``avx512_bf16`` flag). False where the file cannot be read (not Linux, not x86)."""
    return cpu_flags_have_avx512_bf16(_read_cpuinfo(cpuinfo))


@lru_cache(maxsize=1)
def host_has_amx_tile(cpuinfo: str = _CPUINFO) -> bool:
    """Whether this machine's CPU has AMX tiles, as vLLM's CPU build asks torch
    (``torch.cpu._is_amx_tile_supported``; Linux lists the bit as the ``amx_tile`` flag once the
    kernel allows the tile state). False where the file cannot be read."""
    return cpu_flags_have(_read_cpuinfo(cpuinfo), "amx_tile")


def _read_cpuinfo(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read(_CPUINFO_MAX_BYTES)
    except OSError:
        return ""


def cpu_flags_have_avx512_bf16(cpuinfo_text: str) -> bool:
    """The first ``flags`` line of a /proc/cpuinfo text names ``avx512_bf16``."""
    return cpu_flags_have(cpuinfo_text, "avx512_bf16")


def cpu_flags_have(cpuinfo_text: str, flag: str) -> bool:
    """The first ``flags`` line of a /proc/cpuinfo text names ``flag`` (a whole word)."""
    for line in cpuinfo_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return flag in value.split()
    return False
