"""``servesize models``: the catalogue — parameters, layers by kind, KV bytes per token, quantisation."""

from __future__ import annotations

import argparse

EPILOG = """\
examples:
  servesize models                       every catalogue model: params, layers, KV bytes/token at 16 bits
  servesize models qwen3.5-27b --explain the parameter ledger of one model, term by term
  servesize models ./config.json         any config.json (or model folder, or Hugging Face id)
  servesize models --json                one JSON document

KV/token is for the whole model (tensor parallel 1) at a 16-bit cache: full-attention and MLA
layers grow with every token; sliding/chunked layers add '+N' only up to their window; Gated
DeltaNet / Mamba layers hold a constant state per sequence instead. KiB = 2**10 B, MiB = 2**20 B.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="*", metavar="MODEL",
                        help="only these models: catalogue key, Hugging Face id, or a config.json path / model folder")


def run(args):
    from servesize.api import models

    return models(list(getattr(args, "model", None) or []), explain=bool(getattr(args, "explain", False)))
