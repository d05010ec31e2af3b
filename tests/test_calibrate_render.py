"""servesize calibrate's text: one heading per log, a row per fact read, then the calibration."""

import pathlib

from servesize.commands.calibrate import CalibrateResult, _fact_value
from servesize.vllm_logs.calibration import calibrate
from servesize.vllm_logs.parse import parse_vllm_log

LOGS = pathlib.Path(__file__).parent / "data" / "vllm-logs"


def test_fact_values_print_counts_with_separators_and_dicts_as_pairs():
    assert _fact_value(198784) == "198,784"
    assert _fact_value(True) == "True"  # a flag, not the count 1
    assert _fact_value(24.27) == "24.27"
    assert _fact_value({"enabled": True, "gpu_memory_utilization": 0.92}) == "enabled=True, gpu_memory_utilization=0.92"


def test_two_logs_are_two_blocks_and_the_written_file_is_named_last():
    items = []
    for name in ("v1-031-one-line-llama8b-a100.log", "v0-llama31-8b-3090-restart.log"):
        facts = parse_vllm_log((LOGS / name).read_text(), name)
        items.append((facts, calibrate(facts, block_size=16)))
    text = CalibrateResult(tuple(items), "cal.json").render()
    first, second, written = text.split("\n\n")
    assert first.startswith("v1-031-one-line-llama8b-a100.log: era v1-new")
    assert second.startswith("v0-llama31-8b-3090-restart.log: era v0") and "start-up 1 of 2" in second.splitlines()[0]
    assert "    num_blocks             28,781  (int(n / 8192 blocks per request x 131,072) = 460,496" in first
    assert written == "calibration written to cal.json"
    explained = CalibrateResult(tuple(items[:1])).render(explain=True)
    assert len(explained.splitlines()) == len(CalibrateResult(tuple(items[:1])).render().splitlines()) + len(items[0][0].facts)
