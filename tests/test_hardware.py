"""The GPU catalogue: every row sourced, names resolve, counts parse, and it agrees with gpu-specs.md."""

import json
import pathlib
import re
import subprocess
import sys

import pytest

from servesize.errors import BadInput
from servesize.model import hardware
from servesize.model.hardware import Gpu, find_gpu, load_gpus, parse_gpus

MIB = 2**20
GIB = 2**30


# ---------------------------------------------------------------- the catalogue itself

def test_every_row_has_a_source_and_positive_memory_and_bandwidth():
    gpus = load_gpus()
    assert len(gpus) >= 27
    for gpu in gpus.values():
        assert gpu.source.strip(), gpu.key
        assert gpu.memory_mib > 0 and gpu.memory_bytes == gpu.memory_mib * MIB, gpu.key
        assert gpu.bandwidth_gbps > 0 and gpu.bandwidth_bytes_per_s == gpu.bandwidth_gbps * 10**9, gpu.key


def test_every_row_not_read_from_an_smi_tool_says_where_its_memory_came_from():
    for gpu in load_gpus().values():
        assert gpu.memory_basis in {"nvidia-smi", "rocm-smi", "datasheet"}, gpu.key
        if gpu.memory_basis == "datasheet":
            assert gpu.memory_note and gpu.confidence, gpu.key


def test_a_cuda_visible_total_is_never_above_the_smi_total():
    for gpu in load_gpus().values():
        if gpu.cuda_total_bytes is not None:
            assert 0 < gpu.cuda_total_bytes < gpu.memory_bytes, gpu.key
            assert gpu.cuda_total_note, gpu.key


@pytest.mark.parametrize(("name", "expected_bytes"), [
    ("H100", round(79.25 * GIB)),            # vLLM 'Free memory on device (78.84/79.25 GiB)'
    ("A100-40GB", 42298834944),              # deviceQuery, exact bytes
    ("B200", round(178.35 * GIB)),           # cudaGetDeviceProperties 'Total Global Memory: 178.35 GB' (GiB)
    ("L40S", round(44.53 * GIB)),
    ("4090", round(23.58 * GIB)),
])
def test_documented_cuda_visible_totals_are_kept_as_logged(name, expected_bytes):
    assert find_gpu(name).cuda_total_bytes == expected_bytes


def test_a10_does_not_take_the_23_58_gib_log_value_that_exceeds_its_nvidia_smi_total():
    a10 = find_gpu("A10")
    assert round(23.58 * GIB) > 23028 * MIB
    assert a10.cuda_total_bytes is None


def test_no_dense_rate_is_given_for_a_precision_the_gpu_lacks():
    for gpu in load_gpus().values():
        assert gpu.fp8 or not gpu.fp8_dense_tflops, gpu.key
        assert gpu.fp4 or not gpu.fp4_dense_tflops, gpu.key


def test_an_alias_that_names_two_gpus_is_a_data_error():
    a = Gpu(key="A", name="A", vendor="X", memory_mib=1, bandwidth_gbps=1, source="s", aliases=("shared-name",))
    b = Gpu(key="B", name="B", vendor="X", memory_mib=1, bandwidth_gbps=1, source="s", aliases=("Shared Name",))
    with pytest.raises(ValueError, match="names both"):
        hardware._index({"A": a, "B": b})


# ---------------------------------------------------------------- names

def test_plain_h100_is_the_sxm5_80gb_at_81559_mib():
    h100 = find_gpu("H100")
    assert h100.key == "H100-SXM"
    assert h100.memory_mib == 81559
    assert h100.memory_bytes == 81559 * 2**20


def test_plain_h200_is_the_sxm_at_143771_mib():
    h200 = find_gpu("H200")
    assert h200.key == "H200-SXM"
    assert h200.memory_mib == 143771


@pytest.mark.parametrize(("name", "key"), [
    ("H100", "H100-SXM"), ("h100", "H100-SXM"), ("H100-80G", "H100-SXM"), ("H100SXM", "H100-SXM"),
    ("h100_sxm", "H100-SXM"), ("H100 SXM5 80GB", "H100-SXM"), ("NVIDIA H100 80GB HBM3", "H100-SXM"),
    ("H100 PCIe", "H100-PCIE"), ("NVIDIA H100 NVL", "H100-NVL"),
    ("H200", "H200-SXM"), ("NVIDIA H200", "H200-SXM"),
    ("A100", "A100-SXM"), ("A100-80GB", "A100-SXM"), ("A100-40GB", "A100-40GB-SXM"),
    ("NVIDIA A100-PCIE-40GB", "A100-40GB-PCIE"),
    ("4090", "RTX-4090"), ("RTX4090", "RTX-4090"), ("rtx 4090", "RTX-4090"), ("NVIDIA GeForce RTX 4090", "RTX-4090"),
    ("3090", "RTX-3090"), ("5090", "RTX-5090"),
    ("B200", "B200"), ("b300", "B300"), ("GB200", "GB200"), ("GB300", "GB300"),
    ("MI300X", "MI300X"), ("AMD Instinct MI300X", "MI300X"),
    ("L40S", "L40S"), ("L4", "L4"), ("A10", "A10"), ("A10G", "A10G"),
    ("H20", "H20"), ("H20-3e", "H20-3E"), ("gaudi 3", "GAUDI3"),
    ("RTX 6000 Ada", "RTX-6000-ADA"), ("RTX PRO 6000", "RTX-PRO-6000"),
])
def test_names_aliases_and_smi_names_resolve(name, key):
    assert find_gpu(name).key == key


def test_mi300x_memory_is_what_rocm_smi_reports():
    assert find_gpu("MI300X").memory_bytes == 206141652992 == 196592 * MIB


def test_an_unknown_gpu_is_bad_input_that_suggests_close_matches():
    with pytest.raises(BadInput) as err:
        find_gpu("H1000")
    message = str(err.value)
    assert "H100-SXM" in message
    assert "servesize gpus" in message
    assert "\n" not in message


def test_an_unknown_gpu_with_no_close_match_still_points_at_the_list():
    with pytest.raises(BadInput, match="servesize gpus"):
        find_gpu("qqqqqqqq")


# ---------------------------------------------------------------- specs

@pytest.mark.parametrize(("spec", "count", "key"), [
    ("4xH100", 4, "H100-SXM"),
    ("4 x H100", 4, "H100-SXM"),
    ("H200", 1, "H200-SXM"),
    ("8xh100-sxm", 8, "H100-SXM"),
    ("2xMI300X", 2, "MI300X"),
    ("1 × L4", 1, "L4"),
    ("4X4090", 4, "RTX-4090"),
    ("MI300X", 1, "MI300X"),
])
def test_gpu_specs_parse_into_a_count_and_a_gpu(spec, count, key):
    group = parse_gpus(spec)
    assert (group.count, group.gpu.key) == (count, key)
    assert group.memory_bytes == count * group.gpu.memory_bytes


@pytest.mark.parametrize("spec", ["0xH100", "0 x H200", "-2xH100", "1.5xH100", "", "  "])
def test_a_bad_count_is_bad_input(spec):
    with pytest.raises(BadInput):
        parse_gpus(spec)


def test_an_unknown_gpu_in_a_spec_is_bad_input():
    with pytest.raises(BadInput, match="unknown GPU"):
        parse_gpus("4xH1000")


def test_a_memory_override_replaces_the_total_and_leaves_the_catalogue_alone():
    group = parse_gpus("1xH100", memory="80GiB")
    assert group.gpu.memory_bytes == 80 * 2**30
    assert group.gpu.memory_basis == "override"
    assert group.gpu.cuda_total_bytes is None
    assert find_gpu("H100").memory_bytes == 81559 * 2**20
    assert find_gpu("H100").with_memory(81559 * 2**20 - 1).memory_bytes == 81559 * 2**20 - 1


def test_a_zero_memory_override_is_bad_input():
    with pytest.raises(BadInput):
        find_gpu("H100").with_memory("0GiB")


# ---------------------------------------------------------------- rates

def test_dense_rates_per_dtype():
    h100 = find_gpu("H100")
    assert h100.dense_flops_per_s("bf16") == 989 * 10**12
    assert h100.dense_flops_per_s("fp16") == 989 * 10**12
    assert h100.dense_flops_per_s("fp8") == 1979 * 10**12
    assert find_gpu("B200").dense_flops_per_s("fp4") == 9000 * 10**12
    assert h100.bandwidth_bytes_per_s == 3350 * 10**9


@pytest.mark.parametrize(("name", "dtype"), [
    ("A100", "fp8"),      # Ampere has no FP8 tensor cores
    ("H100", "fp4"),      # Hopper has no FP4
    ("H100", "int8"),     # not a catalogued dtype
    ("A10G", "bf16"),     # NVIDIA publishes no figure: refuse rather than guess
])
def test_an_unsupported_or_unpublished_rate_is_bad_input(name, dtype):
    with pytest.raises(BadInput):
        find_gpu(name).dense_flops_per_s(dtype)


def test_consumer_cards_use_the_fp32_accumulate_bf16_rate():
    assert find_gpu("5090").bf16_dense_tflops == 419 / 2
    assert find_gpu("4090").bf16_dense_tflops == 165.2


# ---------------------------------------------------------------- against tests/fixtures/gpu-specs.md

GPU_SPECS = pathlib.Path(__file__).parent / "fixtures" / "gpu-specs.md"  # every figure tagged with its source


def _spec_table():
    text = GPU_SPECS.read_text(encoding="utf-8")
    body = text.split("## Table", 1)[1]
    rows = []
    for line in body.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == "GPU" or set(cells[0]) <= {"-"}:
            continue
        rows.append(cells)
    return rows


def _label(cell):
    """'B200 (HGX, 1000 W)' -> 'B200'; 'GB300 (per GPU) *(extra)*' -> 'GB300'."""
    return re.sub(r"\*?\([^)]*\)\*?", "", cell).strip()


def _mib(cell):
    match = re.search(r"([0-9][0-9,]*)\s*MiB", cell) or re.match(r"\s*([0-9][0-9,]*)\b", cell)
    return int(match.group(1).replace(",", "")) if match else None


def _numbers(cell):
    untagged = re.sub(r"\[[^\]]*\]", "", cell)
    return {float(n.replace(",", "")) for n in re.findall(r"[0-9][0-9,]*(?:\.[0-9]+)?", untagged)}


def _clean(cell):
    return re.sub(r"\[[^\]]*\]", "", cell).strip()


def test_every_row_of_the_gpu_specs_table_is_in_the_catalogue_with_its_smi_mib():
    rows = _spec_table()
    assert len(rows) >= 27
    found = set()
    for cells in rows:
        gpu = find_gpu(_label(cells[0]))
        found.add(gpu.key)
        mib = _mib(cells[1])
        if mib is not None:
            assert gpu.memory_mib == mib, (cells[0], gpu.memory_mib, mib)
        else:
            assert gpu.memory_basis == "datasheet", cells[0]
    assert found == set(load_gpus()), "one catalogue row per table row, no more"


def test_catalogue_figures_are_ones_the_table_cites():
    for cells in _spec_table():
        gpu = find_gpu(_label(cells[0]))
        _, _, bw, bf16, fp8, fp4, _, has_fp8, has_fp4, cc = cells[:10]
        assert gpu.bandwidth_gbps in _numbers(bw), (gpu.key, bw)
        for value, cell in ((gpu.bf16_dense_tflops, bf16), (gpu.fp8_dense_tflops, fp8), (gpu.fp4_dense_tflops, fp4)):
            if value:
                assert value in _numbers(cell), (gpu.key, value, cell)
            else:
                assert cell in {"–", "-"} or "not published" in cell, (gpu.key, cell)
        assert gpu.fp8 == has_fp8.startswith("yes"), gpu.key
        assert gpu.fp4 == has_fp4.startswith("yes"), gpu.key
        assert gpu.compute_capability == _clean(cc), (gpu.key, cc)


def test_rows_the_table_tags_unverified_carry_a_confidence_note():
    for cells in _spec_table():
        if any("[U" in c or "; U]" in c or "[D" in c for c in cells):
            gpu = find_gpu(_label(cells[0]))
            assert gpu.confidence, gpu.key


# ---------------------------------------------------------------- the command

def test_gpus_json_is_one_valid_document_with_sources(capsys):
    from servesize.cli import main

    assert main(["gpus", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    rows = document["gpus"]
    assert len(rows) == len(load_gpus())
    assert all(row["source"] for row in rows)
    h100 = next(row for row in rows if row["key"] == "H100-SXM")
    assert h100["memory_mib"] == 81559 and h100["memory_bytes"] == 81559 * 2**20


def test_gpus_table_and_explain(capsys):
    from servesize.cli import main

    assert main(["gpus"]) == 0
    table = capsys.readouterr().out
    assert "H100-SXM" in table and "81,559" in table and "source:" not in table
    assert main(["gpus", "--explain"]) == 0
    assert capsys.readouterr().out.count("source:") == len(load_gpus())


def test_gpus_filter_shows_one_gpu_with_its_source(capsys):
    from servesize.cli import main

    assert main(["gpus", "h200"]) == 0
    out = capsys.readouterr().out
    assert "143,771" in out and "sgl-project/sglang#3196" in out and "H100-SXM" not in out


def test_gpus_with_an_unknown_name_exits_2(capsys):
    from servesize.cli import main

    assert main(["gpus", "NoSuchGpu"]) == 2
    assert "unknown GPU" in capsys.readouterr().err


def test_importing_hardware_stays_light():
    code = "import sys, servesize.model.hardware; assert 'numpy' not in sys.modules and 'tomllib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_gpus_host_link_is_read_from_the_link_table_with_both_sources():
    from servesize.model.hardware import load_host_links

    gen5, gen4 = load_host_links()["pcie5-x16"], load_host_links()["pcie4-x16"]
    assert gen5["gbps_per_direction"] == 32 * 16 / 8 and gen4["gbps_per_direction"] == 16 * 16 / 8  # GT/s x lanes / 8
    h100, a10 = load_gpus()["H100-SXM"], load_gpus()["A10"]
    assert h100.host_link == "PCIe Gen5 x16" and h100.host_link_bytes_per_s == 64 * 10**9
    assert a10.host_link == "PCIe Gen4 x16" and a10.host_link_bytes_per_s == 32 * 10**9
    assert "hpctech" in h100.host_link_source and "PCI-SIG" in h100.host_link_source
    assert load_gpus()["B200"].host_link_bytes_per_s == 0.0   # not catalogued: the planner assumes and says so


@pytest.mark.parametrize("row", [{"host_link": "pcie9-x16", "host_link_source": "x"}, {"host_link": "pcie5-x16"},
                                 {"host_link_gbps": 64}])
def test_a_host_link_that_names_no_link_or_no_source_is_refused(row):


    base = {"key": "X1", "name": "X1", "vendor": "NVIDIA", "memory_mib": 1024, "bandwidth_gbps": 100, "source": "s"}
    with pytest.raises(ValueError):
        hardware._row_to_gpu({**base, **row}, hardware.load_host_links())


@pytest.mark.parametrize("row", [{"fp4_moe_tbps": 2.0}, {"fp4_moe_tbps": 2.0, "fp4_moe_source": " "},
                                 {"fp4_moe_tbps": 2.0, "fp4_moe_source": "tables", "fp4": True},
                                 {"fp4_moe_tbps": -1.0, "fp4_moe_source": "tables"},
                                 {"fp4_moe_tbps": 3.5, "fp4_moe_source": "tables"},
                                 {"fp4_moe_marlin_tbps": 2.0},
                                 {"fp4_moe_marlin_tbps": 2.0, "fp4_moe_marlin_source": "tables", "fp4": True},
                                 {"fp4_moe_marlin_tbps": 3.5, "fp4_moe_marlin_source": "tables"}])
def test_a_measured_fp4_moe_rate_needs_its_source_a_positive_value_and_a_gpu_without_fp4_tensor_cores(row):
    """... and no kernel reads faster than the GPU's memory (3.5 TB/s on a 3 TB/s GPU is a wrong row)."""
    base = {"key": "X1", "name": "X1", "vendor": "NVIDIA", "memory_mib": 1024, "bandwidth_gbps": 3000, "source": "s"}
    with pytest.raises(ValueError, match="FP4 MoE kernel rate"):
        hardware._row_to_gpu({**base, **row})
    assert hardware._row_to_gpu({**base, "fp4_moe_tbps": 2.0, "fp4_moe_source": "tables"}).fp4_moe_tbps == 2.0
    assert hardware._row_to_gpu({**base, "fp4_moe_marlin_tbps": 2.5,
                                 "fp4_moe_marlin_source": "tables"}).fp4_moe_marlin_tbps == 2.5


@pytest.mark.parametrize("row", [{"bf16_moe_tbps": 2.0}, {"bf16_moe_tbps": 2.0, "bf16_moe_source": " "},
                                 {"bf16_moe_tbps": -1.0, "bf16_moe_source": "tables"},
                                 {"bf16_moe_tbps": 3.5, "bf16_moe_source": "tables"}])
def test_a_measured_bf16_moe_rate_needs_its_source_a_positive_value_and_stays_under_the_gpus_memory(row):
    base = {"key": "X1", "name": "X1", "vendor": "NVIDIA", "memory_mib": 1024, "bandwidth_gbps": 3000, "source": "s"}
    with pytest.raises(ValueError, match="bf16 MoE kernel rate"):
        hardware._row_to_gpu({**base, **row})
    gpu = hardware._row_to_gpu({**base, "bf16_moe_tbps": 2.7, "bf16_moe_source": "tables"})
    assert gpu.bf16_moe_tbps == 2.7
    assert gpu.with_figures(bandwidth_gbps=1500).bf16_moe_tbps == pytest.approx(1.35)  # a slower HBM slows it
    assert gpu.with_figures(bandwidth_gbps=6000).bf16_moe_tbps == 2.7                   # a faster one does not


@pytest.mark.parametrize("row", [{"fp8_prefill_share": 0.8}, {"fp8_prefill_share": 0.8, "fp8_prefill_source": " "},
                                 {"fp8_prefill_share": 0.8, "fp8_prefill_source": "tables", "fp8": False},
                                 {"fp8_block_prefill_share": -0.1, "fp8_prefill_source": "tables"},
                                 {"fp8_block_prefill_share": 2.0, "fp8_prefill_source": "tables"}])
def test_a_measured_fp8_prefill_share_needs_its_source_a_plausible_value_and_fp8_tensor_cores(row):
    base = {"key": "X1", "name": "X1", "vendor": "NVIDIA", "memory_mib": 1024, "bandwidth_gbps": 3000, "source": "s",
            "fp8": True}
    with pytest.raises(ValueError, match="FP8 prefill share"):
        hardware._row_to_gpu({**base, **row})
    gpu = hardware._row_to_gpu({**base, "fp8_prefill_share": 0.8, "fp8_block_prefill_share": 0.7,
                                "fp8_prefill_source": "tables"})
    assert (gpu.fp8_prefill_share, gpu.fp8_block_prefill_share) == (0.8, 0.7)


def test_the_kv_links_are_the_catalogued_gpu_to_gpu_links_and_the_host_links_each_with_its_source():
    from servesize.model.hardware import load_host_links, load_kv_links

    links = load_kv_links()
    # per GPU, one way: NVLink 4's 900 GB/s both ways, one 400 Gb/s NIC per GPU
    assert links["nvlink4"]["gbps_per_direction"] == 900 / 2 and links["ib-ndr"]["gbps_per_direction"] == 400 / 8
    assert links["pcie5-x16"] is load_host_links()["pcie5-x16"]  # a PCIe path between GPUs: the host link's row
    assert all(str(row["source"]).strip() for row in links.values())


@pytest.mark.parametrize("rows", [[{"key": "a", "name": "A", "gbps_per_direction": 1, "source": "s"}] * 2,
                                  [{"key": "a", "name": "A", "gbps_per_direction": 0, "source": "s"}],
                                  [{"key": "a", "name": "A", "gbps_per_direction": 1}]])
def test_a_kv_link_row_without_a_rate_or_source_or_twice_is_refused(rows):
    with pytest.raises(ValueError, match="kv_link"):
        hardware._links(rows, "kv_link")


def test_a_user_given_bandwidth_slows_a_measured_fp4_moe_kernel_in_proportion_and_a_faster_one_does_not_speed_it():
    """The FP4 MoE kernels' measured rates are SM-bound on the GPU they were measured on: --gpu-bandwidth below the
    catalogue's slows them as it slows the memory (they stay under it), above it leaves them as measured."""
    h100 = hardware.find_gpu("H100-SXM")
    slower = h100.with_figures(bandwidth_gbps=1000)
    assert slower.fp4_moe_tbps == pytest.approx(h100.fp4_moe_tbps * 1000 / 3350)
    assert slower.fp4_moe_marlin_tbps == pytest.approx(h100.fp4_moe_marlin_tbps * 1000 / 3350)
    assert slower.fp4_moe_marlin_tbps * 1000 < slower.bandwidth_gbps
    faster = h100.with_figures(bandwidth_gbps=6000)
    assert (faster.fp4_moe_tbps, faster.fp4_moe_marlin_tbps) == (h100.fp4_moe_tbps, h100.fp4_moe_marlin_tbps)
