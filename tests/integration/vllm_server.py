"""Start and stop a real vLLM (CPU build) OpenAI server as a subprocess, for integration tests.

Standard library only, so it imports in the project venv; the server itself runs with the
interpreter of the vLLM venv (scripts/vllm-cpu-env.sh).

    cfg = ServerConfig(model="/tmp/tiny", kv_cache_memory_bytes=16 * 2**20)
    with VllmServer(python=".venv-vllm/bin/python", config=cfg, log_path="/tmp/vllm.log") as srv:
        srv.base_url          # http://127.0.0.1:PORT
        srv.flags             # the exact CLI flags after the module name
        srv.kv_cache_lines()  # the startup log lines about the KV cache

The server is started with `python -m vllm.entrypoints.openai.api_server` (the `vllm`
console script does not work in the CPU wheel), in its own process group, so stop() can end
the API server and its engine-core child together.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

SERVED_MODEL_NAME = "tiny-llama"

# The settings of the session server of tests/integration/conftest.py (`vllm_server` fixture).
# Tests derive their expected numbers from these by arithmetic.
SESSION_KV_CACHE_MEMORY_BYTES = 16 * 2**20  # 16 MiB -> 1,024 blocks of 32 tokens (512 B/token)
SESSION_BLOCK_SIZE = 32
SESSION_MAX_MODEL_LEN = 4096
SESSION_MAX_NUM_SEQS = 64
SESSION_DTYPE = "bfloat16"


_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


class TinyModelError(RuntimeError):
    """make_tiny_model.py failed: its stderr's tail."""


def make_tiny_model(vllm_python: str | os.PathLike, out: str | os.PathLike, dtype: str = "bfloat16",
                    family: str = "llama", all_families: bool = False) -> list[dict]:
    """Run make_tiny_model.py in the vLLM venv; its JSON summaries (path, shape), one per model written: `family`
    into `out`, or with `all_families` every family into out/<family> in one interpreter."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(k, None)
    which = ["--all-families"] if all_families else ["--family", family]
    script = pathlib.Path(__file__).resolve().parent / "make_tiny_model.py"
    r = subprocess.run([str(vllm_python), str(script), str(out), "--dtype", dtype, *which],
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise TinyModelError(f"make_tiny_model.py failed:\n{r.stderr[-3000:]}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago (the OS picks it), never one this process handed out before:
    servers started at once on several threads each get their own."""
    with _handed_out_lock:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise OSError(f"no free port on {host} that this process has not handed out already")


def vllm_env(in_process: bool = False, no_avx512_bf16_site: pathlib.Path | None = None) -> dict[str, str]:
    """The environment of a vLLM interpreter: offline, no usage stats, none of the project venv's paths.
    `no_avx512_bf16_site`: a folder to write the sitecustomize into that makes vLLM decide as on an AVX2 CPU."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        PYTHONUNBUFFERED="1",
    )
    if in_process:
        # the engine core runs in the API server's process, the worker in the engine's (--distributed-executor-backend
        # uni): vLLM starts one interpreter instead of three, which halves a start-up on two cores
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    # The project venv must not leak into the vLLM venv's interpreter.
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(k, None)
    if no_avx512_bf16_site is not None:
        env["PYTHONPATH"] = str(_no_avx512_bf16_site(no_avx512_bf16_site))
    return env


def _no_avx512_bf16_site(parent: pathlib.Path) -> pathlib.Path:
    site = pathlib.Path(parent) / "no-avx512-bf16-site"
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "# vLLM's CPU platform decides dtypes by torch.cpu._is_avx512_bf16_supported() and its MLA backend by\n"
        "# torch.cpu._is_amx_tile_supported(): answer as an AVX2 CPU would\n"
        "import torch\n"
        "torch.cpu._is_avx512_bf16_supported = lambda: False\n"
        "torch.cpu._is_amx_tile_supported = lambda: False\n")
    return site


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    model: str
    block_size: int | None = 32  # the CPU backend wants a multiple of 32; None: its default (128)
    kv_cache_memory_bytes: int | str = 16 * 2**20  # bytes: a plain integer, or vLLM's spelling ('12M' = 12 MiB)
    max_model_len: int | str = 4096
    max_num_seqs: int = 64
    dtype: str = "bfloat16"  # KV dtype follows it (kv_cache_dtype auto): 2 B; float32: 4 B
    max_num_batched_tokens: int | str | None = None
    served_model_name: str = SERVED_MODEL_NAME
    host: str = "127.0.0.1"
    port: int | None = None  # None: pick a free loopback port at start
    extra_args: tuple[str, ...] = ()
    prefix_caching: bool | None = True  # None: the engine's default for the model
    max_num_seqs_flag: bool = True  # False: leave --max-num-seqs to the engine's default
    in_process: bool = False  # engine core and worker in the API server's process (one interpreter start, not three)
    # True: vLLM decides as on a CPU without AVX-512 BF16 (an AVX2 EPYC, say), whatever this CPU has: torch's
    # checks for AVX-512 BF16 and for AMX tiles (no CPU has AMX without AVX-512 BF16) are answered False in the
    # server's interpreter (a sitecustomize on its path); its kernels are unchanged
    without_avx512_bf16: bool = False

    def flags(self, port: int) -> list[str]:
        f = [
            "--model", self.model,
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(port),
            "--dtype", self.dtype,
            "--kv-cache-memory-bytes", str(self.kv_cache_memory_bytes),
            "--max-model-len", str(self.max_model_len),
            "--enforce-eager",
            "--enable-prompt-tokens-details",
        ]  # fmt: skip
        if self.block_size is not None:
            f += ["--block-size", str(self.block_size)]
        if self.max_num_seqs_flag:
            f += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.prefix_caching is not None:
            f += ["--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching"]
        if self.max_num_batched_tokens is not None:
            f += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.in_process:
            f += ["--distributed-executor-backend", "uni"]
        return f + list(self.extra_args)


def command_line(flags: list[str]) -> str:
    """The serve command line of these flags, as the tests hand it to `servesize memory --vllm-serve`."""
    return " ".join(["python", "-m", VllmServer.MODULE, *flags])


class ServerStartError(RuntimeError):
    pass


class VllmServer:
    """One vLLM API server subprocess.  Use as a context manager or call start()/stop()."""

    MODULE = "vllm.entrypoints.openai.api_server"

    def __init__(self, python: str | os.PathLike, config: ServerConfig, log_path: str | os.PathLike):
        self.python = str(python)
        self.config = config
        self.log_path = pathlib.Path(log_path)
        self.port = config.port or free_port(config.host)
        self.flags = config.flags(self.port)
        self.argv = [self.python, "-m", self.MODULE, *self.flags]
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    @property
    def command_line(self) -> str:
        return command_line(self.flags)

    def env(self) -> dict[str, str]:
        return vllm_env(in_process=self.config.in_process,
                        no_avx512_bf16_site=self.log_path.parent if self.config.without_avx512_bf16 else None)

    def start(self, timeout_s: float = 300.0) -> VllmServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        log.write(("$ " + " ".join(self.argv) + "\n").encode())
        log.flush()
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env(),
            start_new_session=True,  # own process group: stop() ends the engine core too
        )
        log.close()
        try:
            self._wait_healthy(timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"vLLM exited with code {self.proc.returncode} during startup; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"vLLM not healthy after {timeout_s:.0f} s; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def stop(self, grace_s: float = 30.0) -> None:
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGINT)  # the group is this server's own (start_new_session)
                p.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
            except ProcessLookupError:
                pass
        # the engine core may outlive the API server for a moment; end whatever is left of the group
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc = None

    def __enter__(self) -> VllmServer:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- the log -------------------------------------------------------------------------

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def kv_cache_lines(self) -> list[str]:
        """The startup lines about the KV cache (size in tokens, explicit memory, block size)."""
        pat = re.compile(r"KV cache|kv cache|num_gpu_blocks|block size", re.IGNORECASE)
        return [ln for ln in self.log_text().splitlines() if pat.search(ln)]

    def logged_kv_cache_tokens(self) -> int | None:
        """N from `CPU KV cache size: N tokens` (GPU builds say `GPU`)."""
        m = re.search(r"(?:CPU|GPU)[^\n]*? KV cache size: ([\d,]+) tokens", self.log_text())
        return int(m.group(1).replace(",", "")) if m else None

    def logged_max_concurrency(self) -> tuple[int, float] | None:
        """(L, C) from `Maximum concurrency for L tokens per request: C x`."""
        m = re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", self.log_text())
        return (int(m.group(1).replace(",", "")), float(m.group(2))) if m else None


class EngineHost:
    """One long-lived vLLM interpreter (engine_host.py) that builds engines from serve command lines one after
    another: what a server start logs while it sizes its KV cache, for about a tenth of a start's time. Thread-safe:
    one engine at a time.

        with EngineHost(python, log_dir) as host:
            reply = host.build(cfg.flags(port), log_dir / "case.log")   # {"ok": bool, "seconds": float, ...}
    """

    SCRIPT = pathlib.Path(__file__).resolve().parent / "engine_host.py"

    def __init__(self, python: str | os.PathLike, log_dir: str | os.PathLike, without_avx512_bf16: bool = False,
                 timeout_s: float = 300.0, name: str = "engine-host"):
        self.log_dir = pathlib.Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self.stderr_path = self.log_dir / f"{name}.log"
        env = vllm_env(in_process=True, no_avx512_bf16_site=self.log_dir if without_avx512_bf16 else None)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen([str(python), str(self.SCRIPT)], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, env=env, text=True, bufsize=1,
                                         start_new_session=True)
        self.lock = threading.Lock()

    def build(self, flags: list[str], log_path: str | os.PathLike, config_only: bool = False) -> dict:
        """Build (and shut down) the engine `vllm serve <flags>` would, or with `config_only` only its configuration;
        its log goes to `log_path`, headed by the command line as VllmServer's logs are. The answer: {"ok": bool,
        "seconds": float, "error": str}."""
        log_path = pathlib.Path(log_path)
        log_path.write_text("$ " + command_line(flags) + "\n")
        with self.lock:
            if self.proc.poll() is not None:
                raise ServerStartError(f"the engine host exited ({self.proc.returncode}); {self.stderr_path}:\n"
                                       + self._stderr_tail())
            self.proc.stdin.write(json.dumps({"flags": flags, "log": str(log_path), "config_only": config_only}) + "\n")
            self.proc.stdin.flush()
            line = self._readline()
        if not line:
            raise ServerStartError(f"the engine host gave no answer; {self.stderr_path}:\n" + self._stderr_tail())
        return json.loads(line)

    def _readline(self) -> str:
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(self.timeout_s)
        if reader.is_alive():
            self.close()
            raise ServerStartError(f"the engine host did not answer in {self.timeout_s:.0f} s; {self.stderr_path}:\n"
                                   + self._stderr_tail())
        return box[0] if box else ""

    def _stderr_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        p = self.proc
        if p.poll() is None:
            try:
                p.stdin.close()
                p.wait(30)
            except (subprocess.TimeoutExpired, OSError):
                pass
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        p.wait(10)

    def __enter__(self) -> EngineHost:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
