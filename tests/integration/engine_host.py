"""Build real vLLM engines one after another in one interpreter, from `vllm serve` command lines (run it with the
vLLM venv's interpreter; standard library and vLLM only).

A server start is mostly two interpreter starts (the API server's and its engine core's), each importing vLLM and
torch: about 35 s on a 2-core EPYC, where building the engine itself takes under 2 s. The architecture cases need
only what the engine logs while it sizes its KV cache, so this host imports vLLM once and, for each command line:

- parses it with vLLM's own serve parser (`make_arg_parser`, then `validate_parsed_serve_args`), as `vllm serve` does;
- builds the config as the API server does (`AsyncEngineArgs.from_cli_args`, `create_engine_config` with the API
  server's usage context, which picks the server's batch defaults);
- builds the engine core in this process (`LLMEngine.from_vllm_config` with VLLM_ENABLE_V1_MULTIPROCESSING=0 and
  the uni executor: the same `EngineCore` that sizes the cache and logs its lines), then shuts it down and tears
  down vLLM's process group, so the next engine starts clean.

Everything vLLM logs for a case goes to that case's log file, with vLLM's own format, and a refused start's
exception is written there as the server would print it.

With "config_only", a case stops at the engine's configuration (vLLM's checks of the flags against the model's
config.json, no weights): a plan's recipe for a GPU is checked so on any CPU.

Protocol: one JSON object a line on stdin, {"flags": [...after the module name], "log": path, "config_only": bool};
one JSON line back on
the host's stdout per case, {"ok": bool, "seconds": float, "error": str}. vLLM's own prints go to stderr.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def forget_logged_once(vllm_logger) -> None:
    """vLLM logs some lines once per process (`info_once`, an lru_cache on the message), the KV cache size line among
    them: two engines of the same size would log it once. A fresh server process starts with these caches empty, and
    so does each engine here."""
    for name in ("_print_debug_once", "_print_info_once", "_print_warning_once", "_print_error_once"):
        getattr(vllm_logger, name).cache_clear()


def main() -> int:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever vLLM prints goes to stderr, never into the replies
    sys.stdout = sys.stderr

    from vllm import logger as vllm_logger
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args
    from vllm.usage.usage_lib import UsageContext
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    from vllm.v1.engine.llm_engine import LLMEngine

    cli_env_setup()
    root = logging.getLogger("vllm")
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        forget_logged_once(vllm_logger)
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(case["flags"])
        configure_logging_from_args(args)
        formatter = next((h.formatter for h in root.handlers if h.formatter is not None), None)
        handler = logging.FileHandler(case["log"], mode="a", encoding="utf-8")
        if formatter is not None:
            handler.setFormatter(formatter)
        root.addHandler(handler)
        t0 = time.monotonic()
        reply: dict = {"ok": True}
        engine = None
        try:
            validate_parsed_serve_args(args)
            config = AsyncEngineArgs.from_cli_args(args).create_engine_config(
                usage_context=UsageContext.OPENAI_API_SERVER)
            if not case.get("config_only"):
                engine = LLMEngine.from_vllm_config(config, usage_context=UsageContext.OPENAI_API_SERVER)
        except Exception as e:  # a refused start: the log says why, as the server's would
            root.error("EngineCore failed to start.\n%s", traceback.format_exc())
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        finally:
            if engine is not None:
                engine.engine_core.shutdown()
                del engine
            cleanup_dist_env_and_memory()
            root.removeHandler(handler)
            handler.close()
        reply["seconds"] = round(time.monotonic() - t0, 2)
        protocol.write(json.dumps(reply) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
