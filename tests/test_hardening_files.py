"""Issue 16, files: output paths checked before work starts, typed file readers, sizes that follow from a file.

Each test is one example of the issue: before the fix it ended in a traceback ("servesize: bug:"), a
matplotlib error, an exit 0 on a write that failed, an overwritten input, or gigabytes allocated.
"""

from __future__ import annotations

import json
import os
import pathlib

import pytest

import servesize.limits as limits
from cli_runner import run
from servesize.cli import main
from servesize.errors import BadInput
from servesize.measure.record import RunRecord, read_record
from servesize.workload.presets import preset

ROOT = pathlib.Path(__file__).resolve().parent
LOGS = ROOT / "data" / "vllm-logs"
V0_LOG = LOGS / "v0-llama31-8b-3090-restart.log"
PLAN = ["plan", "llama-3.1-8b", "--gpus", "1xH100", "--fills", "50"]


def refused(capsys, *argv, fragments=(), code=2) -> str:
    rc, _, err = run(capsys, *argv)
    err = err.strip()
    lines = err.split("\n")
    assert rc == code, err
    assert "Traceback" not in err and "servesize: bug:" not in err, err
    assert all(line.startswith("servesize") for line in lines), err
    for fragment in fragments:
        assert fragment in lines[-1], (fragment, err)
    return lines[-1]


# -- output paths ---------------------------------------------------------------------------------------

def test_a_plot_with_an_unknown_extension_is_refused_naming_the_ones_accepted(tmp_path, capsys):
    line = refused(capsys, *PLAN, "--plot", tmp_path / "out.txt", fragments=("--plot", ".png, .svg, .pdf"))
    assert not (tmp_path / "out.txt").exists() and "matplotlib" not in line


def test_a_plot_naming_a_folder_is_refused_and_writes_no_dot_png(tmp_path, capsys):
    folder = tmp_path / "dir"
    folder.mkdir()
    refused(capsys, *PLAN, "--plot", f"{folder}/", fragments=("is a directory",))
    assert list(folder.iterdir()) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_plot_to_dev_full_fails_in_one_line_before_the_plan_runs(capsys):
    refused(capsys, *PLAN, "--plot", "/dev/full", fragments=("not a regular file",))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")
def test_a_measure_record_on_dev_full_is_refused_in_one_line(capsys):
    refused(capsys, "measure", "pool", "--url", "http://127.0.0.1:9", "--record", "/dev/full", "--quiet",
            fragments=("--record /dev/full", "not a regular file"))


SERVER = ["measure", "server", "--url", "http://127.0.0.1:9", "--predict", "llama-3.1-8b --gpus 1xH100", "--quiet"]


def test_measure_server_record_dir_naming_a_file_is_refused_before_any_work_and_the_file_is_kept(tmp_path, capsys):
    log = tmp_path / "pool.jsonl"
    log.write_text("not a folder\n")
    refused(capsys, *SERVER, "--record-dir", log, fragments=("--record-dir", "is not a directory"))
    assert log.read_text() == "not a folder\n"


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="no /dev/null on this system")
def test_measure_server_record_dir_on_a_device_is_refused_in_one_line(capsys):
    refused(capsys, *SERVER, "--record-dir", "/dev/null", fragments=("--record-dir /dev/null", "not a directory"))


def test_measure_server_record_dir_below_a_file_is_refused_and_nothing_is_created(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    refused(capsys, *SERVER, "--record-dir", blocker / "runs" / "a", fragments=("--record-dir", "cannot be created"))
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any folder")
def test_measure_server_record_dir_in_a_read_only_folder_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        refused(capsys, *SERVER, "--record-dir", locked / "run", fragments=("--record-dir", "permission denied"))
    finally:
        locked.chmod(0o700)
    assert not (locked / "run").exists()


def test_the_directory_check_passes_a_new_nested_folder_and_an_existing_one(tmp_path):
    assert limits.check_output_dir(tmp_path / "a" / "b", "--record-dir") == str(tmp_path / "a" / "b")
    assert limits.check_output_dir(tmp_path, "--record-dir") == str(tmp_path)
    assert not (tmp_path / "a").exists()  # checked, not created


def test_a_full_disk_while_recording_ends_in_one_line_and_keeps_the_lines_written(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    rec = RunRecord.create(path, "pool", {"url": "http://x"})
    rec.append("probe", n=1)

    def full(*_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rec._fh, "write", full)
    with pytest.raises(BadInput, match="No space left on device.*--resume"):
        rec.append("probe", n=2)
    rec.close()  # the refused line is not retried into an error on close
    contents = read_record(path)
    assert contents.header["kind"] == "pool" and [e["type"] for e in contents.events] == ["probe"]


def test_a_full_disk_while_writing_a_plot_removes_the_partial_file(tmp_path, monkeypatch):
    out = tmp_path / "x.png"

    class Full:
        def __init__(self, *_a, **_k):
            pass

        def __enter__(self):
            out.write_bytes(b"part")
            return self

        def __exit__(self, *_):
            return False

        def write(self, _data):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr("builtins.open", Full)
    with pytest.raises(BadInput, match="--plot .*No space left"):
        limits.write_output(out, b"\x89PNG", "--plot")
    assert not out.exists()


def test_calibrate_refuses_to_write_its_calibration_over_the_log_it_reads(tmp_path, capsys, monkeypatch):
    log = tmp_path / "x.log"
    log.write_text(V0_LOG.read_text())
    before = log.read_bytes()
    refused(capsys, "calibrate", "--vllm-log", log, "--out", log, fragments=("is the input file itself",))
    monkeypatch.chdir(tmp_path)   # restored after the test: a test never leaves the working directory moved
    refused(capsys, "calibrate", "--vllm-log", "x.log", "--out", f"../{tmp_path.name}/x.log",
            fragments=("is the input file itself",))
    assert log.read_bytes() == before


def test_workload_fit_out_takes_its_format_from_json_or_toml(tmp_path, capsys):
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps({"usage": {"prompt_tokens": 1000 + 37 * i}}) + "\n" for i in range(40)))
    refused(capsys, "workload", "fit", log, "--out", tmp_path / "w.yaml", fragments=(".json, .toml",))
    assert main(["workload", "fit", str(log), "--out", str(tmp_path / "w.toml")]) == 0


# -- typed readers ----------------------------------------------------------------------------------------

def test_a_calibration_file_with_a_number_where_the_list_goes_is_refused_naming_the_field(tmp_path, capsys):
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"calibrations": 5}))
    refused(capsys, *PLAN, "--calibration", path, fragments=("cal.json", "calibrations must be a list"))
    path.write_text(json.dumps({"calibrations": [{"source": "a", "era": "v0"}, 7]}))
    refused(capsys, *PLAN, "--calibration", path, fragments=("calibrations[1]",))


@pytest.mark.parametrize("field", [("user", "median_tokens"), ("user", "sigma"), ("subagent", "prefix_tokens"),
                                   ("think_time_s",), ("max_model_len",)])
def test_a_workload_number_past_a_floats_range_is_refused_naming_file_and_field(field, tmp_path, capsys):
    data = preset("coding-agent").workload().to_dict()
    table = data
    for key in field[:-1]:
        table = table[key]
    table[field[-1]] = 10**400
    path = tmp_path / "wl.json"
    path.write_text(json.dumps(data))
    line = refused(capsys, *PLAN, "--workload", path, fragments=("wl.json", ".".join(field), "out of range"))
    assert len(line) < 300


@pytest.mark.parametrize("key", ["\n", "a.b", "x" * 5000, ""])
def test_a_field_named_by_a_key_that_is_no_plain_name_keeps_the_refusal_one_line(key, tmp_path, capsys):
    # found by the wrong-shape generator: a key "\n" holding 10**15 + 1 printed the refusal on two lines
    data = preset("coding-agent").workload().to_dict()
    data["notes_by_key"] = {key: limits.MAX_FILE_NUMBER + 1}
    path = tmp_path / "wl.json"
    path.write_text(json.dumps(data))
    line = refused(capsys, *PLAN, "--workload", path, fragments=("wl.json", f"notes_by_key[{key!r}"[:40], "out of range"))
    assert len(line) < 300


def test_calibrate_refuses_a_log_whose_figures_leave_the_kv_cache_negative(tmp_path, capsys):
    log = tmp_path / "edited.log"
    log.write_text(V0_LOG.read_text().replace("peak_torch_memory=17.06GiB", "peak_torch_memory=30.00GiB"))
    refused(capsys, "calibrate", "--vllm-log", log, fragments=("leave the KV cache -9.13 GiB",))
    log.write_text(V0_LOG.read_text().replace("kv_cache_size=3.81GiB", "kv_cache_size=93.81GiB"))
    refused(capsys, "calibrate", "--vllm-log", log, fragments=("more than the GPU's 23.58 GiB",))
    assert main(["calibrate", "--vllm-log", str(V0_LOG)]) == 0  # the real log still calibrates


# -- sizes that follow from a file ------------------------------------------------------------------------

def _sessions_log(path: pathlib.Path) -> pathlib.Path:
    path.write_text("".join(json.dumps({"session_id": f"s{s}", "timestamp": 1000 + 10 * s + i,
                                        "usage": {"prompt_tokens": 1000 * (i + 1), "completion_tokens": 50}}) + "\n"
                            for s in range(3) for i in range(4)))
    return path


def test_a_trace_line_of_a_trillion_tokens_is_refused_naming_the_field(tmp_path, capsys):
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"input_length": 10**12, "hash_ids": [1, 2, 3], "timestamp": 0}) + "\n")
    refused(capsys, "simulate", path, "--pool-tokens", "1M", "--quiet", fragments=("big.jsonl", "input_length", "MAX_REQUEST_TOKENS"))


def test_prompt_tokens_of_two_to_the_seventy_is_refused_naming_the_field(tmp_path, capsys):
    path = tmp_path / "p70.jsonl"
    path.write_text(json.dumps({"usage": {"prompt_tokens": 2**70, "completion_tokens": 5}}) + "\n")
    refused(capsys, "simulate", path, "--pool-tokens", "1M", "--quiet", fragments=("usage.prompt_tokens", str(2**70)))


def test_the_declared_maximum_of_users_is_refused_before_its_blocks_are_allocated(tmp_path, capsys):
    # 100,000 users x 4 sessions at 4-token blocks: 998M blocks, past the cap (at the log's 16-token blocks, 250M fit)
    expected_blocks = 100_000 * 4 * sum(1000 * (i + 1) // 4 for i in range(4))
    refused(capsys, "simulate", _sessions_log(tmp_path / "s.jsonl"), "--pool-tokens", "100k", "--users", "100000",
            "--block-size", "4", "--quiet", fragments=(f"{expected_blocks:,} blocks", "MAX_REPLAY_BLOCKS"))


def test_a_replay_whose_outputs_would_take_billions_of_block_steps_is_refused_before_it_runs(tmp_path, capsys):
    """Found by the huge-sizes fuzz target at 10,000 cases (it ran past the 300 s hang cap): four OpenAI lines, three
    of them 100,000 output tokens, replayed for 100,000 users. Its prompts send 200,000 blocks, well inside
    MAX_REPLAY_BLOCKS, but each request allocates 6,250 output blocks: 600,000 requests step through 3.75 billion."""
    lines = [{"session_id": "s0", "timestamp": 1000, "usage": {"prompt_tokens": 1, "completion_tokens": 100_000}},
             {"session_id": "s1", "timestamp": 1001, "usage": {"prompt_tokens": 17, "completion_tokens": 100_000}},
             {"session_id": "s0", "timestamp": 1002, "usage": {"prompt_tokens": 10**400, "completion_tokens": 512}},
             {"session_id": "s1", "timestamp": 1003, "usage": {"prompt_tokens": 1, "completion_tokens": 100_000}}]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    line = refused(capsys, "simulate", trace, "--pool-tokens", "1M", "--users", "100000", "--sessions-per-user", "4",
                   "--quiet", "--no-bounds", fragments=("allocates", "MAX_REPLAY_BLOCKS", "--no-output-blocks"))
    work = int(line.split("allocates ")[1].split(" blocks")[0].replace(",", ""))
    assert work > limits.MAX_REPLAY_BLOCKS and work > 100 * 200_000  # the outputs, not the prompts, pass the cap
    # without the outputs the same replay runs (its prompts are far inside the cap)
    assert main(["simulate", str(trace), "--pool-tokens", "1M", "--users", "1000", "--quiet", "--no-bounds",
                 "--no-output-blocks"]) == 0


def test_a_replay_within_the_cap_that_the_machine_cannot_hold_ends_in_one_line(tmp_path, capsys):
    """Within MAX_REPLAY_BLOCKS (250M blocks at 16 tokens) a replay may still want GiBs; under an address-space
    limit of 1 GiB more than the process holds, it is one line and exit 2, not the bug line (MemoryError)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as fh:
        held = int(fh.read().split()[0]) * resource.getpagesize()
    log = _sessions_log(tmp_path / "s.jsonl")
    resource.setrlimit(resource.RLIMIT_AS, (held + (1 << 30) if hard == resource.RLIM_INFINITY else min(hard, held + (1 << 30)), hard))
    try:
        code = main(["simulate", str(log), "--pool-tokens", "1M", "--users", "100000", "--quiet", "--no-bounds"])
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "bug" not in err, err
    assert err.startswith("servesize: out of memory:") and "fewer users" in err, err


def test_users_times_sessions_past_the_cap_is_refused_before_any_draw(tmp_path, capsys):
    refused(capsys, "simulate", _sessions_log(tmp_path / "s.jsonl"), "--pool-tokens", "100k", "--users", "100000",
            "--sessions-per-user", "10000", "--quiet", fragments=("MAX_REPLAY_SESSIONS",))


def test_a_negative_seed_is_refused_in_one_line(tmp_path, capsys):
    refused(capsys, "simulate", _sessions_log(tmp_path / "s.jsonl"), "--pool-tokens", "100k", "--users", "2",
            "--seed", "-1", "--quiet", fragments=("--seed",))
