"""``servesize gpus``: the GPU catalogue, every row with its source."""

from __future__ import annotations

import argparse

from servesize.frozen import frozen
from servesize.model.hardware import Gpu, find_gpu, load_gpus
from servesize.units import GiB

EPILOG = """\
examples:
  servesize gpus                 every GPU: nvidia-smi MiB, bandwidth, dense TFLOP/s
  servesize gpus H100            one GPU, with every figure's source
  servesize gpus --explain       sources and confidence notes for every row
  servesize gpus --json          one JSON document (rows include their sources)

Memory is nvidia-smi's memory.total in MiB (2**20 B), less than the marketed "80 GB".
Bandwidth is GB/s (10**9 B/s). TFLOP/s are dense (no 2:4 sparsity), 10**12 FLOP/s.
"""

UNITS = {
    "memory_mib": "memory.total as nvidia-smi prints it, MiB = 2**20 B (see memory_basis)",
    "memory_bytes": "memory_mib × 2**20, bytes",
    "cuda_total_bytes": "CUDA/torch-visible total where documented (see cuda_total_note), bytes",
    "bandwidth_gbps": "peak memory bandwidth, GB/s = 10**9 B/s",
    "bf16_dense_tflops": "dense BF16 tensor rate, 10**12 FLOP/s, no sparsity (0: not published)",
    "fp8_dense_tflops": "dense FP8 tensor rate, 10**12 FLOP/s, no sparsity (0: none)",
    "fp4_dense_tflops": "dense FP4 tensor rate, 10**12 FLOP/s, no sparsity (0: none)",
    "tdp_w": "board power, W: a cited nvidia-smi power cap, else the vendor's published TDP (see tdp_source)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("gpu", nargs="?", metavar="GPU", help="show only this GPU (a key, name or alias, e.g. H100, 4090)")


@frozen
class GpusResult:
    gpus: tuple[Gpu, ...]
    one: bool = False  # a single GPU was asked for: show its details without --explain
    exit_code: int = 0

    def to_dict(self) -> dict:
        rows = []
        for gpu in self.gpus:
            row = gpu.to_dict()
            if row.get("memory_override_bytes") is None:
                row.pop("memory_override_bytes", None)
            rows.append(row)
        return {"units": UNITS, "gpus": rows}

    def render(self, explain: bool = False) -> str:
        header = ("key", "name", "smi MiB", "GiB", "BW GB/s", "BF16", "FP8", "FP4", "FP8?", "FP4?", "TDP W")
        table = [header, *(_row(gpu) for gpu in self.gpus)]
        widths = [max(len(r[i]) for r in table) for i in range(len(header))]
        left = {0, 1}
        lines = []
        for n, row in enumerate(table):
            cells = [c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
            lines.append("  ".join(cells).rstrip())
            if n and (explain or self.one):
                lines.extend("    " + d for d in _details(self.gpus[n - 1]))
        lines += [
            "",
            "smi MiB: memory.total as nvidia-smi prints it (MiB = 2**20 B); GiB = 2**30 B.",
            "  * not from nvidia-smi: rocm-smi, or the marketed GB read as 10**9 B where no smi value was found.",
            "BW: peak memory bandwidth, GB/s = 10**9 B/s. BF16/FP8/FP4: dense TFLOP/s (no sparsity); - none or not published.",
            "TDP W: board power (an nvidia-smi power cap where one was found, else the published TDP).",
        ]
        if any(g.confidence for g in self.gpus):
            which = "" if explain or self.one else "; --explain says which"
            lines.append(f"? some figures of this row are unverified [U] or derived [D]{which}")
        if not explain and not self.one:
            lines.append("Sources: servesize gpus --explain, or servesize gpus GPU.")
        return "\n".join(lines)


def _row(gpu: Gpu) -> tuple[str, ...]:
    """One GPU's row of the table: memory as nvidia-smi reports it (* where not), bandwidth, dense FLOP/s, TDP."""
    mark = "" if gpu.memory_basis == "nvidia-smi" else "*"
    return (
        gpu.key + ("?" if gpu.confidence else ""),
        gpu.name,
        f"{gpu.memory_mib:,}{mark}",
        f"{gpu.memory_bytes / GiB:.2f}",
        _num(gpu.bandwidth_gbps),
        _num(gpu.bf16_dense_tflops),
        _num(gpu.fp8_dense_tflops),
        _num(gpu.fp4_dense_tflops),
        "yes" if gpu.fp8 else "no",
        "yes" if gpu.fp4 else "no",
        _num(gpu.tdp_w or 0),
    )


def _num(value: float) -> str:
    return f"{value:,g}" if value else "-"


def _details(gpu: Gpu) -> list[str]:
    out = []
    if gpu.aliases:
        out.append(f"aliases: {', '.join(gpu.aliases)}")
    out.append(f"memory: {gpu.memory_mib:,} MiB = {gpu.memory_bytes:,} B ({gpu.memory_basis})"
               + (f"; {gpu.memory_note}" if gpu.memory_note else ""))
    if gpu.cuda_total_bytes is not None:
        out.append(f"CUDA-visible total: {gpu.cuda_total_bytes / GiB:.2f} GiB = {gpu.cuda_total_bytes:,} B; {gpu.cuda_total_note}")
    if gpu.bandwidth_note:
        out.append(f"bandwidth: {_num(gpu.bandwidth_gbps)} GB/s is {gpu.bandwidth_note}")
    out.append(f"compute capability: {gpu.compute_capability or 'n/a'}; interconnect: {gpu.interconnect or 'n/a'}")
    out.append(f"source: {gpu.source}")
    if gpu.tdp_source:
        out.append(f"TDP {gpu.tdp_w} W read from {gpu.tdp_source}")
    if gpu.confidence:
        out.append(f"confidence: {gpu.confidence}")
    return out


def run(args) -> GpusResult:
    name = getattr(args, "gpu", None)
    if name:
        return GpusResult(gpus=(find_gpu(name),), one=True)
    return GpusResult(gpus=tuple(load_gpus().values()))
