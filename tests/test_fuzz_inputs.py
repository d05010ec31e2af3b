"""The project's fuzz suite (hypothesis): the command line, config.json, request logs, workload and
calibration files, vLLM logs and the web API, each fed generated and mutated inputs.

Properties, for every case: no traceback and no case that reaches the command line's last-resort
handler (``servesize: bug: ...``); the command line exits 0, 2 or 3 (3: the documented prediction that
vLLM would not start) and every line it writes to stderr starts ``servesize``, its refusal one line;
the library raises only ``ServesizeError`` with a one-line message; an accepted ``--json`` document
holds no NaN, no Infinity and no negative figure; and every case runs under the suite's memory cap
(``CASE_MEMORY_BYTES`` of address space past the process's own, set with ``RLIMIT_AS``: the kernel
refuses the allocation, so a case past it fails as a MemoryError). ``CASE_HANG_S`` is an alarm that
fails a case as a hang; it is a cap, not a measurement (no case's duration is asserted).

The seed is fixed (``derandomize``), so CI runs the same cases every time; ``SERVESIZE_FUZZ_EXAMPLES=N``
runs N cases per target instead (docs/hardening.md records the 10,000-case run; ``SERVESIZE_FUZZ_LOG=FILE``
appends one line per case to FILE, the only progress such a run shows). The harness's own
fuzz targets (records, SSE streams, measure's flags) are in tests/measure/test_fuzz.py.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import io
import json
import math
import os
import pathlib
import resource
import signal
import tempfile

import pytest

hypothesis = pytest.importorskip("hypothesis")  # the project's test extra installs it (pyproject: [test])
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import event as hypothesis_event  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import servesize.api as api  # noqa: E402
from cli_runner import run_captured  # noqa: E402
from servesize.cli import build_parser, main  # noqa: E402
from servesize.errors import ServesizeError  # noqa: E402
from servesize.model.architecture import from_config  # noqa: E402
from servesize.model.ledger import parameter_ledger  # noqa: E402
from servesize.vllm_logs.calibration import calibrate  # noqa: E402
from servesize.vllm_logs.files import load_calibrations  # noqa: E402
from servesize.vllm_logs.parse import parse_vllm_log  # noqa: E402
from servesize.workload.files import load_workload  # noqa: E402
from servesize.workload.readers import read_token_counts  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent
CONFIGS = sorted((ROOT / "fixtures" / "model-configs").glob("*/config.json"))
LOGS = sorted((ROOT / "data" / "vllm-logs").glob("*.log"))
PUBLIC_LOGS = json.loads((ROOT / "fixtures" / "vllm-logs-public.json").read_text())
QUOTES = sorted({q for entry in PUBLIC_LOGS for q in entry.get("quotes", [])})

EXAMPLES = int(os.environ.get("SERVESIZE_FUZZ_EXAMPLES", "0") or 0)
CASE_HANG_S = 300                 # an alarm: a case past this is a hang (caps end every case long before)
CASE_MEMORY_BYTES = 2 << 30       # address space a case may add to the process's own


CASE_LOG = os.environ.get("SERVESIZE_FUZZ_LOG")  # a file: one line per case as it ends (a long run's progress)


def event(label: str) -> None:
    """The case's class for hypothesis's statistics and, with SERVESIZE_FUZZ_LOG, one line in that file: a
    10,000-case run takes hours and hypothesis prints nothing until it ends."""
    hypothesis_event(label)
    if CASE_LOG:
        with open(CASE_LOG, "a") as fh:
            fh.write(f"{os.environ.get('PYTEST_CURRENT_TEST', '?').split(' ')[0]}\t{label}\n")


def fuzz(default_examples: int):
    return settings(max_examples=EXAMPLES or default_examples, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


class Hang(Exception):
    pass


def _address_space() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[0]) * resource.getpagesize()


@contextlib.contextmanager
def capped():
    """The case under the suite's caps: CASE_MEMORY_BYTES more address space (RLIMIT_AS), CASE_HANG_S."""
    def on_alarm(signum, frame):
        raise Hang(f"a fuzz case ran past its {CASE_HANG_S} s hang cap")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _address_space() + CASE_MEMORY_BYTES
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    previous = signal.signal(signal.SIGALRM, on_alarm)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    signal.alarm(CASE_HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def assert_one_line(message: str) -> None:
    assert message.strip() and "\n" not in message.strip() and "Traceback" not in message, message


def refusal_or(call):
    """``call()``'s value, or None when it refused with a ServesizeError of one line; anything else fails."""
    try:
        return call()
    except ServesizeError as exc:
        assert_one_line(str(exc))
        return None


def assert_figures_sane(obj, path: str = "") -> None:
    """No NaN, Infinity or negative number anywhere in an accepted document."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            assert_figures_sane(value, f"{path}.{key}")
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            assert_figures_sane(value, f"{path}[]")
    elif isinstance(obj, float):
        assert math.isfinite(obj) and obj >= 0, (path, obj)
    elif isinstance(obj, int) and not isinstance(obj, bool):
        assert obj >= 0, (path, obj)


def _no_constants(name: str):
    raise ValueError(f"{name} in a --json document")


# -- the command line --------------------------------------------------------------------------------------

COMMANDS = ["memory", "plan", "fit", "workload fit", "calibrate", "models", "gpus", "fleet", "bench"]
MODELS = ["llama-3.1-8b", "qwen3.6-27b", "qwen3-30b-a3b", "gpt-oss-20b", "qwen3.5-35b-a3b", "gemma-3-27b", "mixtral-8x7b",
          "llama-4-scout-17b-16e", "qwen3-next-80b-a3b-thinking", "deepseek-v3", str(CONFIGS[0]), str(CONFIGS[0].parent)]
BAD_MODELS = ["nosuchmodel", "org/name", "/dev/null", "/", "", "-q"]
GPUS = ["1xH100", "2xH100", "1xH200", "8xA100-80GB", "4xL40S", "1xB200", "2xH200"]


def often(good: list, bad: list):
    """A good value six times in seven: most cases then reach the engine, not only the parser."""
    return st.sampled_from(good) if not bad else st.one_of(*[st.sampled_from(good)] * 6, st.sampled_from(bad))
JUNK = ["0", "-1", "1", "2", "16", "0.5", "1.5", "nan", "inf", "-inf", "1e400", "1e999999999", "9" * 400, "", " ", "abc",
        "32k", "32K", "1m", "2.77m", "1_000", "0x10", "1e9", "-0", "1,2", "=", "--json", "\x00", "é", "1/0", "16GiB", "80GB",
        "[" * 3000 + "]" * 3000, '{"a":' * 100 + "1" + "}" * 100]
GOOD = {
    "gpus": ["1xH100", "2xH100", "1xH200", "8xA100-80GB", "4xL40S", "1xRTX-4090", "0xH100", "1xNOPE", "H100", "3xH100",
             "1xB200", "1025xH100"],
    "gpu_memory": ["80GiB", "81559MiB", "0", "1TiB"], "models": ["llama-3.1-8b,qwen3.6-27b", "nosuch", ""],
    "quantization": ["fp8", "awq", "gptq", "none", "nvfp4", "bogus"], "kv_cache_dtype": ["auto", "fp8", "fp8_e5m2", "int3"],
    "max_model_len": ["8k", "32768", "128k", "1m", "auto", "-1"], "vllm_version": ["0.8.5", "0.11.0", "0.20.1", "9.9.9", "x"],
    "precision": ["bf16,fp8", "fp4", "int4", "?"], "sweep": ["median=8k,31k", "spec_acceptance=0.5", "sigma=0,1", "nope=1",
                                                               "median=" + ",".join(["8k"] * 40)],
    "speculative_config": ['{"method": "mtp", "num_speculative_tokens": 2}', "{}", "[]", "{", '{"method": "ngram"}',
                           '{"num_speculative_tokens": -3}'],
    "limit_mm_per_prompt": ['{"image": 0}', '{"image": -1}', "[1]", "x"], "team": ["a=10", "a=-1", "=", "a=10:chat"],
    "priority": ["a=high", "a=1"], "gpu_hour_price": ["H100=2.5", "H100=-1", "H100=nan"], "gpus_from": ["H100,H200", "nope"],
    "column": ["prompt_tokens", "usage.prompt_tokens", "nope"], "preset": ["coding-agent", "chat", "rag", "batch", "x"],
    "users": ["1", "10", "1000", "0", "100000000"], "median": ["31k", "100", "0", "1e8"],
    # servesize bench: vllm bench serve's own flags
    "num_prompts": ["10", "200", "0", "-5", "100000000"], "random_input_len": ["1024", "1", "0", "100000000"],
    "random_output_len": ["128", "1", "0"], "random_range_ratio": ["0", "0.5", "0.99", "1", "-0.1", "nan"],
    "random_prefix_len": ["0", "512", "-1"], "max_concurrency": ["1", "8", "0", "-1"],
    "request_rate": ["inf", "5", "0.5", "0", "-1", "nan"],
}
PLAUSIBLE = {  # by the flag's metavar: values a user would type, so that most cases get past the parser
    "TOKENS": ["8k", "32k", "4096", "131072", "64K"], "N": ["1", "2", "4", "8", "64"], "U": ["0.9", "0.5", "0.95"],
    "F": ["0.1", "0.5", "0.9"], "S": ["0.5", "1.0", "1.5"], "R": ["0.1", "0.5", "8"], "X": ["1.5", "2"], "A": ["0.7"],
    "SECONDS": ["5", "30", "0.5"], "TOK_S": ["10", "25"], "K": ["1", "2", "3"], "GIB": ["0", "16"], "BYTES": ["8GiB", "20e9"],
    "GB_S": ["3350", "900"], "TFLOPS": ["989", "300"], "WATTS": ["700", "350"], "PUE": ["1.2"], "PRICE": ["0.15", "0.3"],
    "CODE": ["USD", "EUR"], "LIST": ["1,2", "bf16,fp8"], "K,": ["2"], "N,": ["1", "2"],
}
SKIP = {"help", "plot", "out", "json", "explain", "fills", "draws"}  # --plot/--out write files; fills/draws are set below


def _options(command: str) -> list:
    parser = build_parser(load=command)
    node = parser
    for word in command.split():
        sub = next(a for a in node._actions if a.__class__.__name__ == "_SubParsersAction")
        node = sub.choices[word]
    return [a for a in node._actions if a.option_strings and a.dest not in SKIP]


OPTIONS = {command: _options(command) for command in COMMANDS}


@st.composite
def _value(draw, action, files: dict[str, str], plausible: bool = False) -> str:
    if action.dest in ("workload",):
        return draw(st.sampled_from([files["workload"], files["bad_json"], files["fifo"], "/nonexistent"]))
    if action.dest == "calibration":
        return draw(st.sampled_from([files["calibration"], files["bad_json"], files["fifo"], files["workload"]]))
    if action.dest == "vllm_log":
        return draw(st.sampled_from([*map(str, LOGS[:6]), files["fifo"], files["bad_json"], "/nonexistent"]))
    if action.choices and (plausible or draw(st.integers(0, 4))):
        return str(draw(st.sampled_from(sorted(map(str, action.choices)))))
    good = GOOD.get(action.dest) or PLAUSIBLE.get(str(action.metavar).rstrip(","))
    if good and (plausible or draw(st.integers(0, 3))):
        return draw(st.sampled_from(good[:2] if plausible and action.dest in GOOD else good))
    if draw(st.integers(0, 3)) == 0:
        return str(draw(st.integers(-(2**70), 2**70)))
    return draw(st.sampled_from(JUNK))


@st.composite
def cli_argv(draw, files: dict[str, str], plausible: bool = False) -> list[str]:
    """A command line: any command, flags with values a user would type or junk; ``plausible``: the engine's
    commands with typed values only (so that most cases are accepted and their --json is checked)."""
    command = draw(st.sampled_from(["memory", "plan", "plan", "fit", "fleet", "bench"] if plausible else COMMANDS))
    argv = command.split()
    if command in ("memory", "plan", "bench"):
        argv.append(draw(often(MODELS, [] if plausible else BAD_MODELS)))
    if command == "workload fit":
        argv.append(draw(st.sampled_from([files["requests"], files["requests_gz"], files["bad_json"], files["fifo"],
                                          files["csv"], "/nonexistent"])))
    if command == "calibrate":
        argv += ["--vllm-log", draw(st.sampled_from(list(map(str, LOGS))))]
    if command in ("memory", "plan", "fit", "bench") and (plausible or draw(st.integers(0, 5))):
        argv += ["--gpus", draw(often(GPUS, [] if plausible else GOOD["gpus"]))]
    if command == "bench":  # a short run keeps a case fast (the prompt cap is tested on its own)
        argv += ["--num-prompts", draw(st.sampled_from(["20", "50"]))]
    if command == "fleet" and (plausible or draw(st.integers(0, 5))):
        argv += ["--models", draw(st.sampled_from(["llama-3.1-8b", "qwen3.6-27b", "llama-3.1-8b,qwen3-30b-a3b"])),
                 "--users", draw(st.sampled_from(["1", "40", "0"]))]
    options = OPTIONS[command]
    count = draw(st.sampled_from([0, 1, 1, 1, 2, 2, 3]))
    for action in draw(st.lists(st.sampled_from(options), min_size=count, max_size=count, unique_by=lambda a: a.dest)) \
            if options else []:
        flag = draw(st.sampled_from(action.option_strings))
        argv += [flag] if action.nargs == 0 else [flag, draw(_value(action, files, plausible))]
    if command in ("plan", "fleet"):  # small Monte-Carlo sizes keep a case fast (their caps are tested on their own)
        argv += ["--fills", "20", "--draws", "200"]
        if command == "plan":
            argv += ["--no-sensitivity"] if draw(st.integers(0, 3)) else []
    if draw(st.booleans()):
        argv.append("--json")
    return argv


def _write_files(tmp: pathlib.Path) -> dict[str, str]:
    requests = "\n".join(json.dumps({"usage": {"prompt_tokens": 1000 + 37 * i, "completion_tokens": 50 + i,
                                               "prompt_tokens_details": {"cached_tokens": 500 + i}}}) for i in range(40))
    (tmp / "requests.jsonl").write_text(requests + "\n")
    (tmp / "requests.jsonl.gz").write_bytes(gzip.compress(requests.encode()))
    (tmp / "requests.csv").write_text("prompt_tokens,output_tokens\n" + "\n".join(f"{900 + 11 * i},{40 + i}" for i in range(40)))
    (tmp / "bad.json").write_text("[" * 2000 + "]" * 2000)
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    code = main(["workload", "fit", str(tmp / "requests.jsonl"), "--out", str(tmp / "workload.json")])
    assert code == 0
    code = main(["calibrate", "--vllm-log", str(LOGS[0]), "--out", str(tmp / "calibration.json")])
    assert code == 0
    return {"requests": str(tmp / "requests.jsonl"), "requests_gz": str(tmp / "requests.jsonl.gz"),
            "csv": str(tmp / "requests.csv"), "bad_json": str(tmp / "bad.json"), "fifo": str(fifo),
            "workload": str(tmp / "workload.json"), "calibration": str(tmp / "calibration.json")}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return _write_files(tmp_path_factory.mktemp("fuzz"))


def assert_cli_contract(argv: list[str], code: int, out: str, err: str) -> None:
    assert code in (0, 2, 3), (argv, code, err)
    assert "Traceback" not in err and "servesize: bug:" not in err, (argv, err)
    lines = err.strip().split("\n") if err.strip() else []
    assert all(line.startswith("servesize") for line in lines), (argv, err)  # progress lines, then the refusal
    if code:
        assert lines, (argv, code)
    if code == 0 and "--json" in argv:
        assert_figures_sane(json.loads(out, parse_constant=_no_constants), "")


@fuzz(120)
@given(data=st.data())
def test_any_command_line_exits_0_2_or_3_with_one_line_and_sane_json(files, data):
    argv = data.draw(cli_argv(files))
    code, out, err = run_captured(*argv, around=capped)
    event(f"{argv[0]} exit {code}")
    assert_cli_contract(argv, code, out, err)


@fuzz(40)
@given(data=st.data())
def test_plausible_command_lines_are_mostly_accepted_and_their_json_is_sane(files, data):
    argv = data.draw(cli_argv(files, plausible=True))
    code, out, err = run_captured(*argv, around=capped)
    event(f"{argv[0]} exit {code}")
    assert_cli_contract(argv, code, out, err)


# -- config.json -------------------------------------------------------------------------------------------

REAL_CONFIGS = [json.loads(p.read_text()) for p in CONFIGS]
json_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12)
                | st.sampled_from([0, -1, 1, 2, 7, 8, 64, 128, 4096, 10**9, 1e9, 0.5, "8", "fp8", [128], [0, 0], [], {}]))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10)
QUANT_VARIANTS = ["fp8", [1], {"quant_method": "fp8", "weight_block_size": [128]},
                  {"quant_method": "fp8", "weight_block_size": [0, 0]}, {"quant_method": "gptq", "bits": 4, "group_size": "abc"},
                  {"quant_method": "awq", "bits": "x"}, {"quant_method": 5}, {"quant_method": "compressed-tensors", "config_groups": []},
                  {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": "8"}}}},
                  {"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": "fp8"},
                  {"quant_method": "modelopt", "quantized_layers": {"x": "FP8"}}, {"quant_method": "bitsandbytes"}]


@st.composite
def mutated_config(draw) -> dict:
    config = copy.deepcopy(draw(st.sampled_from(REAL_CONFIGS)))
    for _ in range(draw(st.integers(1, 3))):
        target = config
        if isinstance(config.get("text_config"), dict) and draw(st.booleans()):
            target = config["text_config"]
        keys = sorted(target)
        action = draw(st.sampled_from(["replace", "replace", "remove", "quant", "add"]))
        if action == "quant":
            config["quantization_config"] = draw(st.sampled_from(QUANT_VARIANTS))
        elif action == "add":
            target[draw(st.sampled_from(["head_dim", "sliding_window", "num_experts_per_tok", "layer_types",
                                         "num_key_value_heads", "rope_scaling", "vision_config", "text_config"]))] = draw(json_values)
        elif keys:
            key = draw(st.sampled_from(keys))
            if action == "remove":
                del target[key]
            else:
                target[key] = draw(json_values)
    return config


@st.composite
def generated_config(draw) -> dict:
    """A dict from scratch: a model_type servesize knows, and a handful of its fields with any values."""
    fields = ["hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "intermediate_size", "num_local_experts", "num_experts_per_tok", "sliding_window", "max_position_embeddings"]
    config = {"model_type": draw(st.sampled_from(["llama", "mixtral", "qwen3_moe", "gemma3", "mamba2", "deepseek_v3", "x"]))}
    for key in draw(st.lists(st.sampled_from(fields), max_size=len(fields), unique=True)):
        config[key] = draw(json_scalars)
    return config


def _read_config(config: dict) -> None:
    arch = refusal_or(lambda: from_config(config, "fuzzed"))
    if arch is None:
        return
    assert 1 <= arch.num_layers and arch.hidden_size >= 1 and arch.vocab_size >= 1
    ledger = refusal_or(lambda: parameter_ledger(arch))
    if ledger is not None:
        assert ledger.total >= 0


@fuzz(400)
@given(st.one_of(mutated_config(), generated_config()))
def test_any_config_json_is_read_or_refused_by_name_never_a_crash(config):
    with capped():
        _read_config(config)


@fuzz(60)
@given(mutated_config())
def test_memory_over_a_mutated_config_file_exits_0_2_or_3_with_sane_json(config):
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "config.json"
        path.write_text(json.dumps(config))
        argv = ["memory", str(path), "--gpus", "8xH100", "--json"]
        code, out, err = run_captured(*argv, around=capped)
        assert_cli_contract(argv, code, out, err)


# -- request logs (workload fit's readers) ------------------------------------------------------------------

RECORD_TEMPLATES = [
    {"usage": {"prompt_tokens": 1200, "completion_tokens": 80, "prompt_tokens_details": {"cached_tokens": 600}}},
    {"response": {"body": {"usage": {"prompt_tokens": 900, "completion_tokens": 10}}}},
    {"usage": {"input_tokens": 50, "cache_read_input_tokens": 900, "cache_creation_input_tokens": 20, "output_tokens": 30}},
    {"input_length": 3000, "output_length": 100, "hash_ids": [1, 2, 3, 4, 5, 6]},
    {"session_id": "s", "system_tokens": 500, "tool_tokens": 200, "block_size": 16,
     "requests": [{"t": 0, "in": 1000, "out": 20, "hash_ids": [1, 2]}, {"t": 5, "in": 1500, "out": 30, "hash_ids": [1, 2, 3]},
                  {"type": "subagent", "requests": [{"t": 6, "in": 400, "out": 10}]}]},
]
ODD_LINES = ["", "not json", "[1,2]", "3", '{"usage": null}', '{"usage": {"prompt_tokens": NaN}}', "[" * 3000,
             '{"usage": {"prompt_tokens": ' + "9" * 400 + "}}", '{"usage": {"prompt_tokens": 1e400}}', "\ufeff{}",
             '{"usage": {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 1818}}}']


def _mutate(record: dict, draw) -> dict:
    record = copy.deepcopy(record)
    target = record
    while isinstance(target, dict) and target and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(target)))
        if not isinstance(target[key], dict):
            break
        target = target[key]
    if isinstance(target, dict) and target:
        key = draw(st.sampled_from(sorted(target)))
        target[key] = draw(json_values)
    return record


@st.composite
def request_log(draw) -> tuple[str, bytes]:
    kind = draw(st.sampled_from(["jsonl", "json", "csv"]))
    n = draw(st.integers(0, 40))
    template = draw(st.sampled_from(RECORD_TEMPLATES))
    if kind == "csv":
        header = draw(st.sampled_from(["prompt_tokens,output_tokens,cached_tokens", "input_length", "x,y",
                                       "session_id,timestamp,prompt_tokens,class", ""]))
        cells = st.sampled_from(["1000", "2000", "0", "-5", "nan", "", "abc", "9" * 400, "1e3", "1500.5", "2026-01-01T00:00:00Z"])
        width = max(1, header.count(",") + 1)
        rows = [",".join(draw(cells) for _ in range(draw(st.integers(0, width + 1)))) for _ in range(n)]
        text = "\n".join([header, *rows])
    else:
        records = []
        for i in range(n):
            if draw(st.integers(0, 6)) == 0:
                records.append(None)
            else:
                record = copy.deepcopy(template)
                if "usage" in record and "prompt_tokens" in record["usage"]:
                    record["usage"]["prompt_tokens"] += 17 * i
                records.append(_mutate(record, draw) if draw(st.integers(0, 3)) == 0 else record)
        if kind == "json":
            text = json.dumps([r for r in records if r is not None])
        else:
            text = "\n".join(json.dumps(r) if r is not None else draw(st.sampled_from(ODD_LINES)) for r in records)
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 5)) == 0:
        data = gzip.compress(data)
        if draw(st.booleans()):
            data = data[: draw(st.integers(0, len(data)))]  # a torn download
    return kind, data


@fuzz(300)
@given(request_log(), st.sampled_from([None, "usage.prompt_tokens", "prompt_tokens", "nope"]))
def test_any_request_log_is_read_or_refused_in_one_line(log, column):
    kind, data = log
    with capped(), tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / f"requests.{kind}"
        path.write_bytes(data)
        obs = refusal_or(lambda: read_token_counts(path, column))
        if obs is None:
            return
        assert obs.skipped >= 0 and obs.records >= 0
        assert all(math.isfinite(x) and x > 0 for x in obs.user + obs.subagent)
        assert obs.cached_tokens <= obs.cached_prompt_tokens
        fitted = refusal_or(lambda: api.fit_workload(str(path), column=column))
        if fitted is not None:
            assert_figures_sane(json.loads(json.dumps(fitted.to_dict(), allow_nan=True), parse_constant=_no_constants))


# -- workload and calibration files --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def written(files) -> dict[str, dict]:
    return {"workload": json.loads(pathlib.Path(files["workload"]).read_text()),
            "calibration": json.loads(pathlib.Path(files["calibration"]).read_text())}


@fuzz(300)
@given(data=st.data())
def test_any_workload_or_calibration_file_is_read_or_refused_in_one_line(written, data):
    which = data.draw(st.sampled_from(["workload", "calibration"]))
    document = copy.deepcopy(written[which])
    for _ in range(data.draw(st.integers(0, 3))):
        document = _mutate(document, data.draw) if isinstance(document, dict) else document
    suffix = data.draw(st.sampled_from([".json", ".toml"])) if which == "workload" else ".json"
    with capped(), tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / f"file{suffix}"
        if suffix == ".toml":
            from servesize.workload.files import to_toml
            try:  # the writer writes what servesize writes; a value TOML cannot hold is not a reader's case
                text = to_toml(document) if isinstance(document, dict) else None
            except TypeError:
                return
            if text is None:
                return
            path.write_text(text)
        else:
            path.write_text(json.dumps(document))
        if which == "workload":
            workload = refusal_or(lambda: load_workload(path))
            if workload is not None:
                assert_figures_sane(json.loads(json.dumps(workload.to_dict()), parse_constant=_no_constants))
        else:
            found = refusal_or(lambda: load_calibrations(path))
            for cal in found or ():
                assert cal.pool_tokens is None or cal.pool_tokens >= 0


# -- vLLM logs (calibrate) ------------------------------------------------------------------------------------

REAL_LOG_LINES = [line for p in LOGS for line in p.read_text(errors="replace").splitlines() if line.strip()]


@st.composite
def mutated_line(draw) -> str:
    line = draw(st.sampled_from(REAL_LOG_LINES + QUOTES))
    action = draw(st.sampled_from(["keep", "digits", "number", "cut", "junk"]))
    if action == "digits":
        return "".join(draw(st.sampled_from("0123456789,.-")) if c.isdigit() and draw(st.booleans()) else c for c in line)
    if action == "number":
        import re
        return re.sub(r"[0-9][0-9,.]*", lambda m: draw(st.sampled_from(["0", "16.0", "-5", "1e400", "9" * 400, "1.2.3",
                                                                        ",", "0.00", m.group(0)])), line)
    if action == "cut":
        return line[: draw(st.integers(0, len(line)))]
    if action == "junk":
        return line + draw(st.text(max_size=20))
    return line


@st.composite
def vllm_log(draw) -> str:
    base = draw(st.sampled_from(LOGS)).read_text(errors="replace").splitlines()
    lines = list(base)
    for _ in range(draw(st.integers(0, 4))):
        action = draw(st.sampled_from(["drop", "replace", "insert"]))
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        if action == "drop" and lines:
            del lines[i]
        elif action == "replace" and lines:
            lines[i] = draw(mutated_line())
        else:
            lines.insert(i, draw(mutated_line()))
    return "\n".join(lines)


@fuzz(400)
@given(vllm_log(), st.sampled_from([{}, {"block_size": 16}, {"kv_cache_groups": 3}, {"mamba_cache_mode": "align"},
                                    {"block_size": 784, "kv_cache_groups": 4}]))
def test_any_vllm_log_is_calibrated_or_refused_in_one_line(text, knobs):
    with capped():
        facts = refusal_or(lambda: parse_vllm_log(text, "fuzzed.log"))
        if facts is None:
            return
        cal = refusal_or(lambda: calibrate(facts, **knobs))
        if cal is None:
            return
        assert cal.pool_tokens is None or cal.pool_tokens >= 0
        assert_figures_sane({k: v for k, v in cal.to_dict().items() if k not in ("non_torch_gib",)})


@fuzz(80)
@given(vllm_log(), st.booleans())
def test_calibrate_over_any_vllm_log_exits_0_or_2_with_one_line(text, as_json):
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "server.log"
        path.write_text(text)
        argv = ["calibrate", "--vllm-log", str(path)] + (["--json"] if as_json else [])
        code, out, err = run_captured(*argv, around=capped)
        assert code in (0, 2), (code, err)
        assert "Traceback" not in err and "servesize: bug:" not in err, err
        if code:
            assert err.startswith("servesize") and err.count("\n") == 1, err


@st.composite
def log_file_bytes(draw) -> bytes:
    """A generated log as a file may hold it: CRLF endings, colour codes (with or without their ESC byte), bytes
    that are not UTF-8, a long line, gzip."""
    lines = draw(vllm_log()).split("\n")
    out = []
    for line in lines:
        if draw(st.integers(0, 9)) == 0:
            line = draw(st.sampled_from(["\x1b[32mINFO\x1b[0m ", "[1;33m", "[0m"])) + line
        raw = line.encode("utf-8", errors="replace")
        if draw(st.integers(0, 19)) == 0:
            at = draw(st.integers(0, len(raw)))
            raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\xe4\xb8", b"\r", b"\x00", b"x" * 5000])) + raw[at:]
        out.append(raw + (b"\r" if draw(st.integers(0, 4)) == 0 else b""))
    data = b"\n".join(out) + draw(st.sampled_from([b"", b"\n", b"\n\n"]))
    return gzip.compress(data) if draw(st.booleans()) else data


@fuzz(200)
@given(log_file_bytes())
def test_a_log_file_read_as_lines_parses_as_its_whole_text(data):
    """#31's streaming reader against the whole-text path every log once took: the same facts, or the same refusal."""
    from servesize.limits import MAX_LOG_BYTES, input_lines, read_input

    with tempfile.TemporaryDirectory() as tmp, capped():
        path = pathlib.Path(tmp) / "server.log"
        path.write_bytes(data)
        whole = read_input(path, "--vllm-log", MAX_LOG_BYTES, gunzip=True).decode("utf-8", errors="replace")
        try:
            expected = parse_vllm_log(whole, "server.log")
        except ServesizeError as exc:
            with pytest.raises(ServesizeError) as got:
                parse_vllm_log(input_lines(path, "--vllm-log", MAX_LOG_BYTES, gunzip=True), "server.log")
            assert str(got.value) == str(exc)
            event("refused")
            return
        assert parse_vllm_log(input_lines(path, "--vllm-log", MAX_LOG_BYTES, gunzip=True), "server.log") == expected
        event("parsed")


# -- the web API (its request readers and views, in-process) -------------------------------------------------

WEB_BASE = {"model": "qwen3.6-27b", "gpus": "1xH200", "quantization": "fp8", "kv_cache_dtype": "fp8", "fills": 20, "draws": 200}
WEB_FIELDS = ["model", "gpus", "quantization", "kv_cache_dtype", "max_model_len", "median", "sigma", "prefix", "users",
              "load_users", "think_time", "gpu_memory_utilization", "tensor_parallel_size", "max_num_seqs", "fills", "draws",
              "seed", "mtp_speedup", "spec_acceptance", "workload", "calibration", "config", "preset", "nope", "sweep"]


WEB_GOOD = {"sigma": [0.5, 1.0], "prefix": ["8k", 2000], "load_users": [1, 10], "think_time": [5, 30],
            "gpu_memory_utilization": [0.9], "tensor_parallel_size": [1, 2], "max_num_seqs": [64, 256], "seed": [0, 7],
            "mtp_speedup": [1.5], "spec_acceptance": [0.7]}


@st.composite
def web_body(draw):
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    body = dict(WEB_BASE)
    for key in draw(st.lists(st.sampled_from(WEB_FIELDS), max_size=3, unique=True)):
        good = GOOD.get(key) or WEB_GOOD.get(key, ["1"])
        body[key] = draw(st.sampled_from(good)) if draw(st.integers(0, 2)) else draw(json_values | st.sampled_from(JUNK))
    body["fills"], body["draws"] = 20, 200  # small Monte-Carlo sizes (their caps are the Scenario's)
    return body


@fuzz(120)
@given(web_body(), st.sampled_from(["plan", "memory", "fit"]))
def test_any_web_api_body_is_a_view_or_a_400_with_one_line(body, endpoint):
    from servesize.web import views
    from servesize.web.requests import fit_query, plan_request, refusal, scenario_of

    def answer():
        if endpoint == "plan":
            return views.plan_view(plan_request(body))
        if endpoint == "memory":
            scenario, _ = scenario_of(body)
            return views.finite({"memory": api.memory(scenario).to_dict()})
        return views.fit_view(fit_query({k: v for k, v in body.items() if k in ("gpus", "max_model_len")}
                                        if isinstance(body, dict) else body))

    with capped():
        try:
            view = answer()
            event(f"{endpoint} view")
        except ServesizeError as exc:
            event(f"{endpoint} refused")
            assert_one_line(str(exc))
            document = refusal(exc)
            assert_one_line(document["error"])
            return
        json.dumps(view, allow_nan=False)  # the page's JSON: no NaN or Infinity


# --- issue 16: bounds ---
# Values that pass a flag's declared range but no physics (tiny and huge values at and just inside every numeric
# Scenario field's bounds), vLLM's vocabulary on models and releases that do not take it, and config.json fields
# that are not what they say: each exits 0, 2 or 3 with one line, never the bug line, never a numpy warning.

import warnings  # noqa: E402

from servesize.engine.vocabulary import vocabulary  # noqa: E402
from servesize.scenario import PARAMS  # noqa: E402

BOUNDS_NUMERIC = ("tokens", "bytes", "int", "float", "vllm_int", "vllm_len", "vllm_bytes")
BOUNDS_SKIP = {"fills", "draws", "users"}  # Monte-Carlo sizes have their own cap tests; --users sizes a fleet
BOUNDS_FIELDS = {command: [p for p in PARAMS.values() if p.kind in BOUNDS_NUMERIC and p.name not in BOUNDS_SKIP
                           and p.lo is not None and any(p.flag in a.option_strings for a in OPTIONS[command])]
                 for command in ("memory", "plan")}
BOUNDS_MODELS = ["llama-3.1-8b", "qwen3.6-27b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b"]
BOUNDS_GPUS = {"llama-3.1-8b": "1xH100", "qwen3.6-27b": "1xH200", "qwen3-30b-a3b": "1xH200",
               "deepseek-v3": "8xH200", "gpt-oss-20b": "1xH100"}


def _edges(p) -> list[float]:
    """The values at and just inside (and just past) a declared range: where 1e-300 used to divide by zero."""
    lo, hi = float(p.lo), float(p.hi if p.hi is not None else 2 * p.lo + 1e6)
    inside = [lo, math.nextafter(lo, hi), lo * (1 + 1e-9) if lo else 1e-300, hi, math.nextafter(hi, lo), hi * (1 - 1e-12)]
    outside = [math.nextafter(lo, -math.inf), 5e-324, -5e-324, hi * (1 + 1e-12), math.nextafter(hi, math.inf)]
    return inside + outside


def _spelled(p, value: float) -> str:
    if p.kind in ("float",):
        return repr(value)
    return str(int(value)) if math.isfinite(value) and abs(value) < 1e30 else repr(value)


@st.composite
def bounds_value(draw, p) -> str:
    """A field's value at its edges, or anywhere in its range on a log scale (tiny and huge alike)."""
    if draw(st.integers(0, 2)):
        return _spelled(p, draw(st.sampled_from(_edges(p))))
    lo, hi = max(float(p.lo), 1e-300), float(p.hi if p.hi is not None else 1e12)
    exponent = draw(st.floats(math.log10(lo), math.log10(max(hi, lo * 10)), allow_nan=False))
    return _spelled(p, min(hi, max(float(p.lo), 10 ** exponent)))


VOCABULARY_CASES = [  # a value vLLM knows, given where vLLM would not take it (the model, or the release)
    *[["--kv-cache-dtype", dtype] for dtype in vocabulary("kv_cache_dtype", (0, 33, 0))],
    *[["--num-speculative-tokens", k] for k in ("1", "3", "16")],
    *[["--vllm-version", v] for v in ("0.0.0", "0.6.3", "0.6.4", "0.33.9", "0.34.0", "1.0.0", "99.0.0")],
    ["--quantization", "fp8"], ["--quantization", "modelopt_fp4"], ["--quantization", "gptq_marlin"],
    ["--mamba-cache-mode", "align"], ["--max-num-batched-tokens", "1", "--no-enable-chunked-prefill"],
    ["--max-num-batched-tokens", "8", "--max-num-seqs", "1024"], ["--kv-cache-memory-bytes", "1000GiB"],
    ["--num-gpu-blocks-override", "4294967296"], ["--max-model-len", "1_6k"], ["--max-model-len", "1,024"],
]


@st.composite
def bounds_argv(draw) -> list[str]:
    """memory or plan on a real model, with one to three numeric fields at their edges or a vocabulary case."""
    command = draw(st.sampled_from(["memory", "memory", "plan"]))
    model = draw(st.sampled_from(BOUNDS_MODELS))
    argv = [command, model, "--gpus", BOUNDS_GPUS[model]]
    if model == "deepseek-v3":
        argv += ["-tp", "8"]
    for p in draw(st.lists(st.sampled_from(BOUNDS_FIELDS[command]), min_size=0, max_size=3, unique_by=lambda q: q.name)):
        argv += [p.flag, draw(bounds_value(p))]
    if draw(st.integers(0, 2)) == 0:
        argv += draw(st.sampled_from(VOCABULARY_CASES))
    if command == "plan":
        argv += ["--fills", "20", "--draws", "200", "--no-sensitivity"]
    return argv + (["--json"] if draw(st.booleans()) else [])


def run_cli_strict(argv: list[str]) -> tuple[int, str, str]:
    """run_cli with numpy's RuntimeWarnings as errors: a warning becomes the bug line, which the contract refuses
    (pytest would otherwise record the warning instead of letting it reach stderr)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return run_captured(*argv, around=capped)


@fuzz(150)
@given(bounds_argv())
def test_values_at_the_edges_of_every_declared_range_exit_0_2_or_3_with_one_line_and_no_warning(argv):
    code, out, err = run_cli_strict(argv)
    event(f"{argv[0]} exit {code}")
    assert_cli_contract(argv, code, out, err)
    if code:
        assert len(err.strip().split("\n")[-1]) <= 1000, argv  # a refusal line is bounded (errors.MAX_MESSAGE_CHARS)


BOUNDS_CONFIG_FIELDS = ["intermediate_size", "tie_word_embeddings", "architectures", "hidden_size", "vocab_size",
                        "num_key_value_heads", "num_attention_heads", "head_dim", "max_position_embeddings",
                        "num_hidden_layers", "torch_dtype", "rope_scaling", "model_type"]
BOUNDS_CONFIG_VALUES = [None, "NaN", "nan", "true", "false", 0, 1, -1, 0.5, 1e300, 2**70, 5e-324, True, False, [], {},
                        "", ["BertModel"], ["LlamaModel"], ["LlamaForSequenceClassification"], ["XLMRobertaModel"],
                        ["LlamaForCausalLM", "BertModel"], {"factor": 0}, {"factor": 1e300, "rope_type": "yarn"}]
BOUNDS_BASE_CONFIGS = [c for c, p in zip(REAL_CONFIGS, CONFIGS)
                       if p.parent.name in ("meta-llama--Meta-Llama-3.1-8B", "Qwen--Qwen3-30B-A3B", "Qwen--Qwen3.5-27B")]


@st.composite
def malformed_config(draw) -> dict:
    config = copy.deepcopy(draw(st.sampled_from(BOUNDS_BASE_CONFIGS)))
    text = config.get("text_config", config)
    for key in draw(st.lists(st.sampled_from(BOUNDS_CONFIG_FIELDS), min_size=1, max_size=2, unique=True)):
        value = draw(st.sampled_from(BOUNDS_CONFIG_VALUES))
        target = config if key in ("architectures", "model_type") else text
        if draw(st.integers(0, 5)) == 0:
            target.pop(key, None)
        else:
            target[key] = value
    return config


@fuzz(150)
@given(malformed_config())
def test_a_config_with_a_field_that_is_not_what_it_says_is_sized_or_refused_naming_the_file(config):
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "config.json"
        path.write_text(json.dumps(config))
        argv = ["memory", str(path), "--gpus", "8xH200", "--json"]
        code, out, err = run_cli_strict(argv)
    event(f"config exit {code}")
    assert_cli_contract(argv, code, out, err)
    if code == 2:
        assert str(path) in err or "config" in err, err  # the refusal says which file (or which config field)


def test_the_bounds_generator_makes_a_value_at_the_edge_of_a_declared_range_and_it_is_answered():
    """One generated example shown: a flag set to its declared lower bound's next float (e.g. --mfu 0.010000000000000002)."""
    def at_an_edge(argv: list[str]) -> bool:
        pairs = dict(zip(argv[4::2], argv[5::2]))
        return any(p.flag in pairs and p.kind == "float" and float(pairs[p.flag]) == math.nextafter(p.lo, math.inf)
                   for p in BOUNDS_FIELDS["memory"])

    example = hypothesis.find(bounds_argv(), at_an_edge, settings=settings(derandomize=True, database=None,
                                                                           max_examples=2000))
    print("a bounds case:", " ".join(example))
    code, out, err = run_cli_strict(example)
    assert_cli_contract(example, code, out, err)


# --- issue 16: explorer ---
# Requests a hostile page could make the browser send to the explorer on 127.0.0.1: foreign origins, simple
# (non-JSON) content types, a path or Hugging Face id in any string field that names a model (the request's
# model, a speculative draft, a pasted serve line's draft), and integers past Python's digit limit. Each goes
# through the real application; each is refused with 400, 403 or 415 and one line, never a 500, and no path a
# request names is opened, listed or looked at (the readers refuse before the file system is asked).

from aiohttp.test_utils import TestClient, TestServer  # noqa: E402

from servesize.web.app import make_app  # noqa: E402

HOSTILE_ORIGINS = st.sampled_from(["http://evil.example", "null", "https://127.0.0.1.evil.example", "http://127.0.0.1:9",
                                   "file://", "http://localhost"])
HOSTILE_TYPES = st.sampled_from(["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", "image/png",
                                 "application/jsonx", "text/json", ""])
HOSTILE_PATHS = st.sampled_from(["/etc/shadow", "/etc/passwd", "/nonexistent/config.json", "/", "~/config.json",
                                 "../../../../etc/hosts", "./config.json", "/dev/zero", "/proc/self/environ",
                                 "some-org/some-model", "C:\\\\Windows\\\\win.ini", "config.json"])
HOSTILE_ROUTES = st.sampled_from(["/api/plan", "/api/memory", "/api/explain", "/api/calibrate", "/api/fit",
                                  "/api/teams"])
WEB_TOUCHED: list[str] = []  # every path opened or listed while a hostile case runs (the audit hook below)
_WEB_AUDIT: list[bool] = []  # [recording]: installed once (an audit hook cannot be removed), records only in a case


def _web_audit(event: str, args: tuple) -> None:
    if _WEB_AUDIT[0] and event in ("open", "os.listdir", "os.scandir") and args:
        WEB_TOUCHED.append(str(args[0]))


@st.composite
def hostile_request(draw):
    """(route, body bytes, headers, class): one hostile request of one class."""
    route = draw(HOSTILE_ROUTES)
    body: dict = {"model": "qwen3-8b", "gpus": "1xH100", "fills": 20, "draws": 200}
    headers = {"Content-Type": "application/json"}
    kind = draw(st.sampled_from(["origin", "content-type", "path", "digits"]))
    if kind == "origin":
        headers["Origin"] = draw(HOSTILE_ORIGINS)
    elif kind == "content-type":
        headers["Content-Type"] = draw(HOSTILE_TYPES)
    elif kind == "path":
        path = draw(HOSTILE_PATHS)
        draft = json.dumps({"method": draw(st.sampled_from(["draft_model", "eagle3", "eagle"])), "model": path,
                            "num_speculative_tokens": 2})
        where = draw(st.sampled_from(["model", "speculative_config", "vllm_serve", "workload", "calibration"]))
        body[where] = {"model": path, "speculative_config": draft, "workload": path, "calibration": path,
                       "vllm_serve": f"vllm serve qwen3-8b --speculative-config '{draft}'"}[where]
        route = draw(st.sampled_from(["/api/plan", "/api/memory", "/api/explain"]))
    text = json.dumps(body)
    if kind == "digits":  # an integer past the interpreter's digit limit (4,300)
        text = text[:-1] + ', "median": ' + "9" * draw(st.integers(4301, 6000)) + "}"
    if route == "/api/calibrate" and kind != "path":
        text = text[:-1] + ', "vllm_log": "GPU KV cache size: 1,024 tokens"}'
    return route, text.encode(), headers, kind


async def _send(route: str, data: bytes, headers: dict) -> tuple[int, dict]:
    async with TestClient(TestServer(make_app())) as client:
        response = await client.post(route, data=data, headers=headers)
        return response.status, json.loads(await response.text())


@fuzz(80)
@given(hostile_request())
def test_a_hostile_request_is_refused_in_one_line_and_reads_no_file_it_names(case):
    import asyncio
    import sys

    if not _WEB_AUDIT:
        _WEB_AUDIT.append(False)
        sys.addaudithook(_web_audit)
    route, data, headers, kind = case
    WEB_TOUCHED.clear()
    _WEB_AUDIT[0] = True
    try:
        with capped():
            status, doc = asyncio.run(_send(route, data, headers))
    finally:
        _WEB_AUDIT[0] = False
    event(f"{kind}: {status}")
    expected = {"origin": {403}, "content-type": {415}, "path": {400}, "digits": {400}}[kind]
    assert status in expected, (kind, status, doc)
    assert_one_line(doc["error"])
    named = [p for p in WEB_TOUCHED if any(h in p for h in ("shadow", "passwd", "nonexistent", "environ", "win.ini",
                                                             "some-org", "/dev/zero", "etc/hosts"))]
    assert named == [], named


def test_the_explorer_generator_makes_one_request_of_each_class_and_each_is_refused():
    seen: dict[str, tuple] = {}

    @settings(max_examples=200, derandomize=True, deadline=None, database=None)
    @given(hostile_request())
    def collect(case):
        seen.setdefault(case[3], case)

    collect()
    assert set(seen) == {"origin", "content-type", "path", "digits"}
    import asyncio

    for kind, (route, data, headers, _) in sorted(seen.items()):
        status, doc = asyncio.run(_send(route, data, headers))
        assert status in (400, 403, 415), (kind, route, headers, data[:200])
        assert_one_line(doc["error"])


# --- issue 16: files ---
# Wrong shapes at every depth of a workload, calibration or trace file; output paths servesize must not
# write (devices, folders, the input itself, unknown extensions, missing folders, FIFOs); huge sizes in
# traces. Every case: exit 0 or 2, a refusal in one line naming what it refuses, never the bug line, and no
# output file left where the path was refused.

WRONG_SHAPES = [None, True, -1, 0, 1.5, 10**400, -(10**400), 2**70, "x", "", [], [1], [[[]]], {}, {"a": 1},
                {"calibrations": 5}, float("nan"), float("inf")]


def _paths(document, prefix=()):
    """Every path into ``document`` (dict keys and list indexes), the top level first."""
    yield prefix
    if isinstance(document, dict):
        for key in sorted(document):
            yield from _paths(document[key], (*prefix, key))
    elif isinstance(document, list):
        for i, value in enumerate(document[:4]):
            yield from _paths(value, (*prefix, i))


def _replaced(document, path, value):
    if not path:
        return value
    out = copy.deepcopy(document)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return out


@st.composite
def wrong_shape_file(draw, written: dict) -> tuple[str, object]:
    """A workload or calibration file (as servesize writes it) with a wrong shape at one place at any depth."""
    which = draw(st.sampled_from(["workload", "calibration"]))
    document = written[which]
    if which == "calibration" and draw(st.booleans()):
        document = {"calibrations": [document, document]}
    path = draw(st.sampled_from(list(_paths(document))))
    return which, _replaced(document, path, draw(st.sampled_from(WRONG_SHAPES)))


@fuzz(30)
@given(data=st.data())
def test_a_wrong_shape_at_any_depth_of_a_workload_or_calibration_file_is_refused_in_one_line(files, written, data):
    which, document = data.draw(wrong_shape_file(written))
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / f"{which}.json"
        path.write_text(json.dumps(document))
        argv = ["plan", "llama-3.1-8b", "--gpus", "1xH100", "--fills", "30", "--no-sensitivity", f"--{which}", str(path)]
        code, out, err = run_captured(*argv, around=capped)
    event(f"{which}: exit {code}")
    assert_cli_contract(argv, code, out, err)
    assert code in (0, 2), (argv, err)


OUTPUT_KINDS = ("device", "folder", "folder-slash", "same-as-input", "unknown-extension", "missing-folder", "fifo")


@st.composite
def output_case(draw, files: dict) -> tuple[str, list[str], str]:
    """(kind, argv, the output path): a command whose output flag names a path servesize must refuse."""
    kind = draw(st.sampled_from(OUTPUT_KINDS))
    command = draw(st.sampled_from(["calibrate-out", "fit-out", "fit-plot", "plan-plot", "simulate-plot", "pool-record"]))
    inputs = {"calibrate-out": str(LOGS[0]), "fit-out": files["requests"], "fit-plot": files["requests"],
              "plan-plot": files["workload"], "simulate-plot": files["requests"], "pool-record": files["requests"]}
    base = pathlib.Path(files["requests"]).parent
    ext = ".png" if command.endswith("plot") else ".json"
    path = {"device": "/dev/null", "folder": str(base), "folder-slash": f"{base}/",
            "same-as-input": inputs[command],
            "unknown-extension": str(base / f"out{draw(st.sampled_from(['.txt', '.yaml', '', '.png.']))}"),
            "missing-folder": str(base / "no-such-folder" / f"out{ext}"), "fifo": files["fifo"]}[kind]
    if kind == "unknown-extension" and not command.endswith("plot") and command != "fit-out":
        kind, path = "missing-folder", str(base / "no-such-folder" / "out.json")  # calibrate and records take any extension
    argv = {"calibrate-out": ["calibrate", "--vllm-log", inputs[command], "--out", path],
            "fit-out": ["workload", "fit", inputs[command], "--out", path],
            "fit-plot": ["workload", "fit", inputs[command], "--plot", path],
            "plan-plot": ["plan", "llama-3.1-8b", "--gpus", "1xH100", "--workload", inputs[command], "--plot", path],
            "simulate-plot": ["simulate", inputs[command], "--pool-tokens", "100k", "--quiet", "--plot", path],
            "pool-record": ["measure", "pool", "--url", "http://127.0.0.1:9", "--quiet", "--record", path]}[command]
    return kind, argv, path


@fuzz(40)
@given(data=st.data())
def test_an_output_path_servesize_must_not_write_is_refused_before_work_in_one_line(files, data):
    kind, argv, path = data.draw(output_case(files))
    before = {p: p.stat().st_mtime_ns for p in pathlib.Path(files["requests"]).parent.iterdir() if p.is_file()}
    code, out, err = run_captured(*argv, around=capped)
    event(f"{kind}: exit {code}")
    assert_cli_contract(argv, code, out, err)
    assert code == 2, (argv, err)
    assert err.strip().count("\n") == 0 and "--" in err, (argv, err)
    after = {p: p.stat().st_mtime_ns for p in pathlib.Path(files["requests"]).parent.iterdir() if p.is_file()}
    assert after == before, (argv, "an input or another file changed")


TRACE_SIZES = [0, 1, 17, 512, 4096, 100_000, 10**8 + 1, 10**12, 2**63, 2**70, 10**400, -1, 1.5e300]


@st.composite
def huge_trace(draw) -> tuple[str, bytes, list[str]]:
    """A small trace (Mooncake, OpenAI with sessions, or a Claude Code session) whose lengths are drawn from
    real sizes and ones no request has, and the replay's users (up to the declared maximum)."""
    fmt = draw(st.sampled_from(["mooncake", "openai", "claude-code"]))
    size = lambda: draw(st.sampled_from(TRACE_SIZES))  # noqa: E731
    n = draw(st.integers(1, 4))
    if fmt == "mooncake":
        lines = [{"timestamp": i, "input_length": size(), "output_length": size(), "hash_ids": [i, i + 1]} for i in range(n)]
    elif fmt == "openai":
        lines = [{"session_id": f"s{i % 2}", "timestamp": 1000 + i, "usage": {"prompt_tokens": size(), "completion_tokens": size()}}
                 for i in range(n)]
    else:
        lines = [{"id": f"c{i}", "hash_id_lists": [[1, 2, 3]], "requests": [{"t": 0, "in": size(), "out": size(), "hash_ids": 0}]}
                 for i in range(n)]
    users = draw(st.sampled_from([None, None, "1", "3", "100000"]))
    extra = ["--users", users] if users and fmt != "mooncake" else []
    return fmt, ("\n".join(json.dumps(line) for line in lines) + "\n").encode(), extra


@fuzz(60)
@given(case=huge_trace())
def test_a_trace_with_huge_sizes_is_replayed_or_refused_in_one_line_under_the_memory_cap(case):
    fmt, raw, extra = case
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "trace.jsonl"
        path.write_bytes(raw)
        argv = ["simulate", str(path), "--pool-tokens", "1M", "--quiet", "--no-bounds", *extra]
        code, out, err = run_captured(*argv, around=capped)
    event(f"{fmt}{' users ' + extra[1] if extra else ''}: exit {code}")
    assert_cli_contract(argv, code, out, err)
    assert code in (0, 2), (argv, err)


def test_one_generated_example_per_files_class_is_what_its_generator_says(files, written):
    """One case of each issue-16 generator, drawn with a fixed seed, shown and checked for its class."""
    seen = {}

    @settings(max_examples=1, derandomize=True, database=None, deadline=None)
    @given(data=st.data())
    def draw_one(data):
        seen["shape"] = data.draw(wrong_shape_file(written))
        seen["output"] = data.draw(output_case(files))
        seen["trace"] = data.draw(huge_trace())

    draw_one()
    which, document = seen["shape"]
    assert which in ("workload", "calibration") and document != written[which]
    kind, argv, path = seen["output"]
    assert kind in OUTPUT_KINDS and path in argv
    fmt, raw, _ = seen["trace"]
    assert fmt in ("mooncake", "openai", "claude-code") and raw.endswith(b"\n")
    print(f"wrong shape: {which} {json.dumps(document, default=str)[:120]}\noutput: {kind} {' '.join(argv)}\n"
          f"trace: {fmt} {raw[:120]!r}")
