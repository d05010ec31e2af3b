"""servesize against the real vLLM CPU engine, across architectures: for each kind of KV cache vLLM
has, a tiny random-weight model (make_tiny_model.py --family) is started at two settings, and
`servesize memory`, given the server's own command line (--vllm-serve), must print both lines the
engine logged, character for character.

    family       what it exercises
    llama        GQA, every layer full attention
    qwen3        an explicit head_dim (64) that is not hidden / heads (32)
    gemma3       5 sliding-window layers : 1 global (hybrid groups, group size 1)
    mistral_swa  the window on every layer (vLLM charges cdiv(min(W - 1 + batch, L), B) + 1 blocks)
    qwen3_moe    routed experts
    gpt_oss      sliding and full layers, attention sinks, experts
    qwen3_next   Gated DeltaNet + full attention (state-aligned block, padded state page)
    mamba2       attention-free (a block is one sequence)
    deepseek_v2  MLA (with AMX tiles the CPU build's AMX MLA backend keeps block and prefix caching; without,
                 its reference kernel forces block 16, no prefix caching: "-avx2" checks that one on any CPU)
    qwen2_window Qwen2's spelling of a window on every layer (use_sliding_window, max_window_layers 0)
    phi3_window  Phi-3-mini-4k's spelling: a bare sliding_window (2,047), no layer_types
    starcoder2   the window (256) on every layer, on vLLM's Transformers backend
    cohere2      3 sliding : 1 global, the window one token wider than the config's (vLLM's +1)
    exaone4      3 sliding : 1 global by an integer sliding_window_pattern (no layer_types), q/k norms
    smollm3      NoPE on every 4th layer, every layer full attention (vLLM's Transformers backend)
    granitemoehybrid  3 Mamba2 mixers : 1 full attention, experts and a shared MLP (state-aligned block)

Setting A leaves the engine its defaults (block 128, batch 2048, the model's prefix caching);
setting B sets block 32 (64 for MLA, which the engine overrides to 16), a 3,000-token max_model_len,
`--kv-cache-memory-bytes 12M` and `--max-num-batched-tokens 1K` in vLLM's own number spelling
(12 MiB and 1,024), and turns prefix caching off for the hybrid. Setting C asks the attention-free
model for prefix caching (Mamba2 'align' mode). A case ending "-avx2" starts the engine deciding as on
a CPU without AVX-512 BF16 or AMX and runs servesize with `--cpu-avx512-bf16 no` (which implies no AMX).

Each (family, setting) starts one server for the module (in-process engine: one interpreter
start), two at a time on worker threads ahead of the tests; its start-up seconds are recorded in the log
directory (starts.json).

REFUSED: starts vLLM refuses (one request at max_model_len does not fit); servesize must exit 3 naming
the largest --max-model-len vLLM estimated in its error.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import threading

import pytest
from vllm_server import ServerConfig, ServerStartError, VllmServer

from servesize.cli import main
from servesize.model.architecture import from_config, load_config_file
from servesize.model.ledger import parameter_ledger

pytestmark = pytest.mark.vllm

FAMILIES = ("llama", "qwen3", "gemma3", "mistral_swa", "qwen3_moe", "gpt_oss", "qwen3_next", "mamba2", "deepseek_v2",
            "qwen2_window", "phi3_window", "starcoder2", "cohere2", "exaone4", "smollm3",
            "granitemoehybrid")
SETTINGS = {
    "A": dict(block_size=None, max_model_len=4096, kv_cache_memory_bytes=16 * 2**20),
    "B": dict(block_size=32, max_model_len=3000, kv_cache_memory_bytes="12M", max_num_batched_tokens="1K"),
}
EXTRA_B = {"qwen3_next": dict(prefix_caching=False), "granitemoehybrid": dict(prefix_caching=False),
           "deepseek_v2": dict(block_size=64)}
# Setting C: the attention-free model with prefix caching asked for, which puts its Mamba2 layers in
# 'align' mode (three state blocks per request from 0.32: MambaMixer2's prefill checkpoint block).
SETTINGS["C"] = dict(SETTINGS["A"], prefix_caching=True)
# The same starts on a CPU without AVX-512 BF16 or AMX (vLLM keeps the states' own dtype there and serves MLA
# with its reference kernel): "A-avx2" etc.
# decide as an AVX2 machine would, so both kinds of x86 CPU are checked on whichever machine runs the tests.
AVX2 = "-avx2"
CASES = ([(f, s) for f in FAMILIES for s in ("A", "B")] + [("mamba2", "C")]
         + [("qwen3_next", "B" + AVX2), ("mamba2", "A" + AVX2), ("mamba2", "C" + AVX2),
            ("deepseek_v2", "A" + AVX2), ("deepseek_v2", "B" + AVX2)])


# Starts run START_WORKERS at a time, ahead of the tests that read them: a start is mostly one interpreter's
# single-threaded import and set-up, so on two cores two starts take about the time of one (14.0 s alone, 14.0 s
# each with two at once: benchmarks/bench_vllm_starts.py on a 2-core Xeon, docs/benchmarks.md).
START_WORKERS = max(1, min(2, os.cpu_count() or 1))
KV_LINES_TEST = "test_servesize_memory_given_the_servers_command_line_prints_its_kv_lines_exactly"


def selected_cases(session: pytest.Session) -> list[tuple[str, str]]:
    """The (family, setting) of each KV-lines test this run selected, in run order (nothing else is started)."""
    return [(item.callspec.params["family"], item.callspec.params["setting"]) for item in session.items
            if getattr(item, "originalname", None) == KV_LINES_TEST and item.module is not None
            and item.module.__name__ == __name__]


@pytest.fixture(scope="module")
def started(request, vllm_python, tiny_model_of, vllm_log_dir, start_timeout_s):
    """(family, setting) -> the server's command line and its start-up log, one start per case, each started (and
    stopped) on a worker thread before its test asks for it."""
    seconds: dict[str, float] = {}
    lock = threading.Lock()

    def start(family: str, setting: str) -> tuple[str, str]:
        base = setting.removesuffix(AVX2)
        fields = {**SETTINGS[base], **(EXTRA_B.get(family, {}) if base == "B" else {})}
        cfg = ServerConfig(model=tiny_model_of(family)["path"], prefix_caching=fields.pop("prefix_caching", None),
                           max_num_seqs_flag=False, in_process=True, without_avx512_bf16=setting.endswith(AVX2),
                           **fields)
        srv = VllmServer(vllm_python, cfg, vllm_log_dir / f"vllm-{family}-{setting}.log")
        srv.start(timeout_s=start_timeout_s)
        try:
            result = (srv.command_line, srv.log_text())
        finally:
            srv.stop()
        with lock:
            seconds[f"{family}-{setting}"] = round(srv.startup_s or 0.0, 1)
            (vllm_log_dir / "starts.json").write_text(json.dumps(seconds, indent=1))
        return result

    pool = concurrent.futures.ThreadPoolExecutor(START_WORKERS, thread_name_prefix="vllm-start")
    futures = {case: pool.submit(start, *case) for case in selected_cases(request.session)}

    def get(family: str, setting: str) -> tuple[str, str]:
        with lock:
            if (family, setting) not in futures:  # a case the run did not select up front
                futures[family, setting] = pool.submit(start, family, setting)
            future = futures[family, setting]
        return future.result()

    try:
        yield get
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def logged_lines(log: str) -> list[str]:
    """The KV-cache lines as the engine printed them, prefixes dropped."""
    return [m.group(1) for m in re.finditer(r"\] ((?:CPU|GPU) KV cache size: .*x)\s*$", log, re.MULTILINE)]


def version_of(log: str) -> str:
    m = re.search(r"Initializing a V1 LLM engine \(v(\d+\.\d+\.\d+)\)", log)
    return m.group(1) if m else "0.32.0"


@pytest.mark.parametrize("family,setting", CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_servesize_memory_given_the_servers_command_line_prints_its_kv_lines_exactly(capsys, started, family, setting):
    command, log = started(family, setting)
    lines = logged_lines(log)
    assert len(lines) == 1, lines  # 0.28+: tokens and concurrency on one line
    cpu = ["--cpu-avx512-bf16", "no"] if setting.endswith(AVX2) else []  # else servesize reads this machine's CPU
    code = main(["memory", "--gpus", "1xH100", "--device", "cpu", *cpu, "--vllm-version", version_of(log),
                 "--vllm-serve", command, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["log_lines"] == lines
    # the serve line's host, port and server-only flags change no figure, and are listed as such
    assert "--host 127.0.0.1" in doc["flags_not_affecting"] and "--enable-prompt-tokens-details" in doc["flags_not_affecting"]


# Starts vLLM refuses: 1 MiB holds 16 blocks of 128 tokens over the tiny model's 2 layers, and a request under
# Phi-3's 2,047-token window needs cdiv(2,046 + 2,048, 128) + 1 = 33 of them (full attention would need 32 at
# 4,096); vLLM names the longest max_model_len that would start.
REFUSED = {"phi3_window": dict(SETTINGS["A"], kv_cache_memory_bytes="1M")}


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_a_start_vllm_refuses_exits_3_naming_the_largest_length_vllm_names(capsys, vllm_python, tiny_model_of,
                                                                            vllm_log_dir, start_timeout_s, family):
    cfg = ServerConfig(model=tiny_model_of(family)["path"], max_num_seqs_flag=False, in_process=True,
                       prefix_caching=None, **REFUSED[family])
    srv = VllmServer(vllm_python, cfg, vllm_log_dir / f"vllm-{family}-refused.log")
    with pytest.raises(ServerStartError):
        srv.start(timeout_s=start_timeout_s)
    log = srv.log_text()
    m = re.search(r"the estimated maximum model length is (\d+)\.", log)
    assert m, log[-3000:]
    code = main(["memory", "--gpus", "1xH100", "--device", "cpu", "--vllm-version", version_of(log),
                 "--vllm-serve", srv.command_line])
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert f"the largest --max-model-len that starts is {int(m.group(1)):,}" in err


# Families added with their own tensor layout in the ledger: its total must be what torch counts in the tiny
# model make_tiny_model.py built (model.parameters(), tied weights once); no server needed.
LEDGER_CHECKED = ("qwen2_window", "phi3_window", "starcoder2", "cohere2", "exaone4", "smollm3",
            "granitemoehybrid")


@pytest.mark.parametrize("family", LEDGER_CHECKED)
def test_the_ledger_counts_the_tiny_models_parameters_as_torch_does(tiny_model_of, family):
    tiny = tiny_model_of(family)
    assert parameter_ledger(from_config(load_config_file(tiny["path"]))).total == tiny["params"]
