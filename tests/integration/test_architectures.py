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
    falcon_h1    a Mamba2 mixer and attention side by side in every layer (two cache layers per layer)

Setting A leaves the engine its defaults (block 128, batch 2048, the model's prefix caching);
setting B sets block 32 (64 for MLA, which the engine overrides to 16), a 3,000-token max_model_len,
`--kv-cache-memory-bytes 12M` and `--max-num-batched-tokens 1K` in vLLM's own number spelling
(12 MiB and 1,024), and turns prefix caching off for the hybrid. Setting C asks the attention-free
model for prefix caching (Mamba2 'align' mode). A case ending "-avx2" starts the engine deciding as on
a CPU without AVX-512 BF16 or AMX and runs servesize with `--cpu-avx512-bf16 no` (which implies no AMX).

Each (family, setting) is one engine, built from the server's command line the way `vllm serve` builds it, in a
long-lived vLLM interpreter (EngineHost, engine_host.py) rather than a server start of its own: vLLM's serve parser
reads the line, the API server's config builder and the engine core run as in a start, and the engine logs its lines
into the case's log. SESSION checks that: the engine host, given the session server's command line, logs the line
that real server logged.

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
from vllm_server import (
    SESSION_BLOCK_SIZE,
    SESSION_DTYPE,
    SESSION_KV_CACHE_MEMORY_BYTES,
    SESSION_MAX_MODEL_LEN,
    SESSION_MAX_NUM_SEQS,
    EngineHost,
    ServerConfig,
    command_line,
    free_port,
)

from servesize.cli import main
from servesize.model.architecture import from_config, load_config_file
from servesize.model.ledger import parameter_ledger

pytestmark = pytest.mark.vllm

FAMILIES = ("llama", "qwen3", "gemma3", "mistral_swa", "qwen3_moe", "gpt_oss", "qwen3_next", "mamba2", "deepseek_v2",
            "qwen2_window", "phi3_window", "starcoder2", "cohere2", "exaone4", "smollm3",
            "granitemoehybrid", "falcon_h1")
SETTINGS = {
    "A": dict(block_size=None, max_model_len=4096, kv_cache_memory_bytes=16 * 2**20),
    "B": dict(block_size=32, max_model_len=3000, kv_cache_memory_bytes="12M", max_num_batched_tokens="1K"),
}
EXTRA_B = {"qwen3_next": dict(prefix_caching=False), "granitemoehybrid": dict(prefix_caching=False),
           "falcon_h1": dict(prefix_caching=False),
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
            ("deepseek_v2", "A" + AVX2), ("deepseek_v2", "B" + AVX2), ("falcon_h1", "A" + AVX2),
            ("falcon_h1", "B" + AVX2)])


# Engine hosts deciding as this CPU does, each on its own thread (the cases deciding as an AVX2 CPU would have one
# more): a host is one single-threaded interpreter, so two keep two cores busy.
NATIVE_HOSTS = max(1, min(2, os.cpu_count() or 1))
# The KV-lines tests and the refused start, by the name of the test function.
KV_LINES_TEST = "test_servesize_memory_given_the_servers_command_line_prints_its_kv_lines_exactly"
REFUSED_TEST = "test_a_start_vllm_refuses_exits_3_naming_the_largest_length_vllm_names"
REFUSED_SETTING = "refused"
SESSION_TEST = "test_the_engine_host_logs_the_kv_line_a_real_server_start_logs"
SESSION_SETTING = "session"


def selected_cases(session: pytest.Session) -> list[tuple[str, str]]:
    """The (family, setting) of each engine this run's selected tests read, in run order (nothing else is built)."""
    cases = []
    for item in session.items:
        if item.module is None or item.module.__name__ != __name__:
            continue
        name = getattr(item, "originalname", None)
        if name == KV_LINES_TEST:
            cases.append((item.callspec.params["family"], item.callspec.params["setting"]))
        elif name == REFUSED_TEST:
            cases.append((item.callspec.params["family"], REFUSED_SETTING))
        elif name == SESSION_TEST:
            cases.append(("llama", SESSION_SETTING))
    return cases


def config_of(model: str, family: str, setting: str) -> ServerConfig:
    """The server's configuration of one case: SETTINGS (EXTRA_B on top for B), or REFUSED."""
    if setting == SESSION_SETTING:  # the session server's own settings (conftest.vllm_server)
        return ServerConfig(model=model, block_size=SESSION_BLOCK_SIZE, kv_cache_memory_bytes=SESSION_KV_CACHE_MEMORY_BYTES,
                            max_model_len=SESSION_MAX_MODEL_LEN, max_num_seqs=SESSION_MAX_NUM_SEQS, dtype=SESSION_DTYPE,
                            in_process=True)
    if setting == REFUSED_SETTING:
        return ServerConfig(model=model, max_num_seqs_flag=False, in_process=True, prefix_caching=None,
                            **REFUSED[family])
    base = setting.removesuffix(AVX2)
    fields = {**SETTINGS[base], **(EXTRA_B.get(family, {}) if base == "B" else {})}
    return ServerConfig(model=model, prefix_caching=fields.pop("prefix_caching", None), max_num_seqs_flag=False,
                        in_process=True, without_avx512_bf16=setting.endswith(AVX2), **fields)


@pytest.fixture(scope="module")
def started(request, vllm_python, tiny_model_of, vllm_log_dir, start_timeout_s):
    """(family, setting) -> (the server's command line, the engine's log, whether it started), one engine per case.

    Each engine is built from the serve command line by an EngineHost (vllm_server.py): one vLLM interpreter that
    parses the line with vLLM's own serve parser and builds the engine as the API server does, one case after another
    (about 3 s each, where a server start is about 35 s on a 2-core EPYC: two interpreters importing vLLM). The cases
    that decide as an AVX2 CPU would have a host of their own. Each host works through its cases on its own thread,
    ahead of the tests that read them; each engine's seconds are recorded in the log directory (starts.json)."""
    seconds: dict[str, float] = {}
    lock = threading.Lock()
    hosts: dict[tuple[bool, int], EngineHost] = {}
    lanes: dict[tuple[bool, int], concurrent.futures.ThreadPoolExecutor] = {}

    def lane(avx2: bool, index: int) -> tuple[EngineHost, concurrent.futures.ThreadPoolExecutor]:
        key = (avx2, index)
        with lock:
            if key not in hosts:
                hosts[key] = EngineHost(vllm_python, vllm_log_dir, without_avx512_bf16=avx2, timeout_s=start_timeout_s,
                                        name=f"engine-host-{'avx2-' if avx2 else ''}{index}")
                lanes[key] = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"engine-host-{key}")
            return hosts[key], lanes[key]

    def build(host: EngineHost, family: str, setting: str) -> tuple[str, str, bool]:
        cfg = config_of(tiny_model_of(family)["path"], family, setting)
        flags = cfg.flags(free_port(cfg.host))
        log_path = vllm_log_dir / f"vllm-{family}-{setting}.log"
        reply = host.build(flags, log_path)
        with lock:
            seconds[f"{family}-{setting}"] = reply["seconds"]
            (vllm_log_dir / "starts.json").write_text(json.dumps(seconds, indent=1))
        return command_line(flags), log_path.read_text(errors="replace"), reply["ok"]

    futures: dict[tuple[str, str], concurrent.futures.Future] = {}

    def submit(family: str, setting: str, index: int = 0) -> concurrent.futures.Future:
        avx2 = setting.endswith(AVX2)
        host, pool = lane(avx2, 0 if avx2 else index % NATIVE_HOSTS)
        return pool.submit(build, host, family, setting)

    cases = selected_cases(request.session)
    for i, case in enumerate(cases):
        futures[case] = submit(*case, index=i)

    def get(family: str, setting: str) -> tuple[str, str, bool]:
        with lock:
            known = (family, setting) in futures
        if not known:  # a case the run did not select up front
            future = submit(family, setting)
            with lock:
                futures.setdefault((family, setting), future)
        return futures[family, setting].result()

    try:
        yield get
    finally:
        for pool in lanes.values():
            pool.shutdown(wait=True, cancel_futures=True)
        for host in hosts.values():
            host.close()


def logged_lines(log: str) -> list[str]:
    """The KV-cache lines as the engine printed them, prefixes dropped."""
    return [m.group(1) for m in re.finditer(r"\] ((?:CPU|GPU) KV cache size: .*x)\s*$", log, re.MULTILINE)]


def version_of(log: str) -> str:
    m = re.search(r"Initializing a V1 LLM engine \(v(\d+\.\d+\.\d+)\)", log)
    return m.group(1) if m else "0.32.0"


def test_the_engine_host_logs_the_kv_line_a_real_server_start_logs(vllm_server, started):
    """The engine host stands in for 38 server starts: given the session server's command line (the same tiny Llama,
    block 32, 16 MiB), the engine it builds logs the line that server logged when it started."""
    _, log, ok = started("llama", SESSION_SETTING)
    assert ok, log[-3000:]
    assert logged_lines(log) == logged_lines(vllm_server.log_text()) != []


@pytest.mark.parametrize("family,setting", CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_servesize_memory_given_the_servers_command_line_prints_its_kv_lines_exactly(capsys, started, family, setting):
    command, log, ok = started(family, setting)
    assert ok, log[-3000:]
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
def test_a_start_vllm_refuses_exits_3_naming_the_largest_length_vllm_names(capsys, started, family):
    command, log, ok = started(family, REFUSED_SETTING)
    assert not ok, log[-3000:]
    m = re.search(r"the estimated maximum model length is (\d+)\.", log)
    assert m, log[-3000:]
    code = main(["memory", "--gpus", "1xH100", "--device", "cpu", "--vllm-version", version_of(log),
                 "--vllm-serve", command])
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert f"the largest --max-model-len that starts is {int(m.group(1)):,}" in err


# Families added with their own tensor layout in the ledger: its total must be what torch counts in the tiny
# model make_tiny_model.py built (model.parameters(), tied weights once); no server needed.
LEDGER_CHECKED = ("qwen2_window", "phi3_window", "starcoder2", "cohere2", "exaone4", "smollm3",
                  "granitemoehybrid", "falcon_h1")


@pytest.mark.parametrize("family", LEDGER_CHECKED)
def test_the_ledger_counts_the_tiny_models_parameters_as_torch_does(tiny_model_of, family):
    tiny = tiny_model_of(family)
    assert parameter_ledger(from_config(load_config_file(tiny["path"]))).total == tiny["params"]
