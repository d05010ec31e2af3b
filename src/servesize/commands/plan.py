"""servesize plan MODEL --gpus ...: warm users, decode, latency, saturation; the binding ceiling and the recipe."""

from __future__ import annotations

import sys

from servesize.commands._engine import add_engine_arguments, add_model_and_gpus, deployment_from_args, gpus_from_args

HELP = "warm users, decode speed, latency: which ceiling binds, and the vLLM recipe"
EPILOG = """\
examples:
  servesize plan qwen3.6-27b --gpus 1xH200 -q fp8 --kv-cache-dtype fp8 --median 31k
  servesize plan qwen3.6-27b --gpus 1xH200 -q fp8 --kv-cache-dtype fp8 --pool-tokens 2.77M \\
      --state-dtype bfloat16 --assumptions seed          the seed's headline (86 warm users p50)
  servesize plan qwen3.6-27b --gpus 2xH200 -tp 2 -q fp8 --kv-cache-dtype fp8 --sweep median=31k,45k,60k,80k
  servesize plan qwen3.6-27b --gpus 1xH200 -q fp8 --workload my-workload.toml --think-time 43 --plot plan.png
  servesize plan llama-3.1-8b --gpus 4xH100 -dp 4 --cpu-offload-gib 200 --json

Workload flags override --workload FILE, which overrides the seed's reference workload
(median 31k, sigma 0.81, prefix 15k; subagents 8k / 0.9 / 3k at 0.10 per user request).
--max-model-len is both the engine's flag and the workload's cap (default 180k, the seed's).
"""

# flag name -> (dest, kind) for the workload and the sweepable knobs; kind: tokens | float | int | bool
WORKLOAD_FLAGS = {
    "median": "tokens", "sigma": "float", "prefix": "tokens",
    "subagent_ratio": "float", "subagent_median": "tokens", "subagent_sigma": "float", "subagent_prefix": "tokens",
    "invalidation": "float", "think_time": "float", "output_tokens": "tokens", "warm_turn_tokens": "tokens",
}
KNOB_FLAGS = {
    "bandwidth_efficiency": "float", "tp_efficiency": "float", "mtp_speedup": "float", "spec_acceptance": "float",
    "spec_tokens": "int", "decode_floor": "float", "comfortable_floor": "float", "mfu": "float", "ttft_limit": "float",
    "cpu_offload_gib": "float", "max_model_len": "tokens",
}
_RENAME = {"think_time": "think_time_s", "ttft_limit": "ttft_limit_s"}


def add_arguments(parser) -> None:
    add_model_and_gpus(parser)
    add_engine_arguments(parser)
    w = parser.add_argument_group("workload (default: the seed's reference workload)")
    w.add_argument("--workload", metavar="FILE", help="a workload file (servesize workload fit); flags below override it")
    w.add_argument("--median", metavar="TOKENS", help="user session median prompt length, e.g. 31k")
    w.add_argument("--sigma", metavar="S", help="user log-normal sigma (seed 0.81)")
    w.add_argument("--prefix", metavar="TOKENS", help="user shared prefix (system prompt + tools), e.g. 15k")
    w.add_argument("--subagent-ratio", metavar="R", help="subagent requests per user request (seed 0.10; 0 = none)")
    w.add_argument("--subagent-median", metavar="TOKENS")
    w.add_argument("--subagent-sigma", metavar="S")
    w.add_argument("--subagent-prefix", metavar="TOKENS")
    w.add_argument("--subagents-share-prefix", action="store_true", default=None, help="subagents start with the user prefix")
    w.add_argument("--invalidation", metavar="F", help="fraction of requests that match no cached prefix (seed 0.01)")
    w.add_argument("--think-time", metavar="SECONDS", help="seconds between one user's requests (seed 30)")
    w.add_argument("--output-tokens", metavar="TOKENS", help="output tokens per request (seed 1000)")
    p = parser.add_argument_group("pool and state")
    p.add_argument("--pool-tokens", metavar="TOKENS", help="a measured KV pool per replica in tokens, e.g. 2.77M")
    p.add_argument("--calibration", metavar="FILE", help="a calibration file (servesize calibrate): its pool replaces the model's")
    p.add_argument("--state-dtype", choices=["auto", "float32", "bfloat16", "float16"],
                   help="recurrent-state dtype (sets --mamba-ssm-cache-dtype)")
    p.add_argument("--cpu-offload-gib", metavar="GIB", help="host RAM for KV offload per engine (GiB)")
    p.add_argument("--no-sticky-routing", action="store_true", help="DP behind a cache-blind balancer")
    d = parser.add_argument_group("decode (modelled assumptions; see --explain)")
    d.add_argument("--spec-acceptance", metavar="A", help="per-draft MTP acceptance (speedup 1 + a + ... + a^k)")
    d.add_argument("--spec-tokens", metavar="K", help="MTP draft tokens (default 2)")
    d.add_argument("--mtp-speedup", metavar="X", help="tokens per step with speculation (seed 1.7; 1.0 = off)")
    d.add_argument("--decode-floor", metavar="TOK_S", help="per-user p50 decode floor (default 40)")
    d.add_argument("--comfortable-floor", metavar="TOK_S", help="comfortable decode speed (default 50)")
    d.add_argument("--bandwidth-efficiency", metavar="F", help="achieved / datasheet HBM bandwidth (default 0.70, seed 1.0)")
    d.add_argument("--tp-efficiency", metavar="F", help="bandwidth/FLOP efficiency of the TP group (default 0.90 per doubling)")
    f = parser.add_argument_group("prefill and latency")
    f.add_argument("--mfu", metavar="F", help="prefill model FLOP utilisation (default 0.45)")
    f.add_argument("--ttft-limit", metavar="SECONDS", help="mean cold-miss TTFT limit (default 10)")
    f.add_argument("--warm-turn-tokens", metavar="TOKENS", help="tokens prefilled on a warm hit (default 2000)")
    m = parser.add_argument_group("Monte-Carlo and output")
    m.add_argument("--draws", metavar="N", help="sessions drawn per fill (grown when needed; default 2000)")
    m.add_argument("--fills", metavar="N", help="Monte-Carlo fills (default 1500)")
    m.add_argument("--seed", metavar="N", help="RNG seed (default 0)")
    m.add_argument("--assumptions", choices=["default", "seed"], default="default",
                   help="seed: the warm-capacity seed's values (bandwidth efficiency 1.0, MTP 1.7, ...)")
    m.add_argument("--sweep", metavar="PARAM=V1,V2,...", help="e.g. median=31k,45k,60k or prefix=3k,15k,30k or mfu=0.3,0.45,0.6")
    m.add_argument("--plot", metavar="FILE.png", help="write a 2x2 figure (matplotlib)")
    m.add_argument("--no-sensitivity", action="store_true", help="skip the sensitivity scan (faster)")


def _parse(name: str, kind: str, text):
    from servesize.errors import BadInput
    from servesize.units import parse_tokens

    flag = "--" + name.replace("_", "-")
    try:
        if kind == "tokens":
            return parse_tokens(str(text))
        if kind == "int":
            v = float(text)
            if v != int(v):
                raise ValueError
            return int(v)
        return float(text)
    except (ValueError, TypeError, BadInput):
        raise BadInput(f"{flag} {text!r} is not a valid {'token count' if kind == 'tokens' else 'number'}") from None


def _apply(wl, knobs, name: str, value):
    from servesize.planning.sensitivity import apply_param

    if name == "cpu_offload_gib":
        from servesize.units import GiB
        return apply_param(wl, knobs, "cpu_offload_bytes", float(value) * GiB)
    return apply_param(wl, knobs, _RENAME.get(name, name), value)


def run(args):
    from dataclasses import replace

    from servesize.engine.memory import memory_report
    from servesize.errors import BadInput
    from servesize.model.catalogue import resolve_model
    from servesize.planning.inputs import Knobs, fixed_from_memory
    from servesize.planning.plan import make_plan, sweep
    from servesize.render.plots import plot_plan

    # --- parse everything first, so a bad value is one line and exit 2 ---------------------
    explicit = {}
    for name, kind in {**WORKLOAD_FLAGS, **KNOB_FLAGS}.items():
        text = getattr(args, name, None)
        if text is not None:
            explicit[name] = _parse(name, kind, text)
    for name in ("decode_floor", "comfortable_floor", "mfu", "ttft_limit", "bandwidth_efficiency", "tp_efficiency"):
        if name in explicit and not explicit[name] > 0:
            raise BadInput(f"--{name.replace('_', '-')} must be positive, got {explicit[name]:g}")
    mc = {}
    for name in ("draws", "fills", "seed"):
        if getattr(args, name) is not None:
            mc[name] = _parse(name, "int", getattr(args, name))
            if mc[name] < (0 if name == "seed" else 1):
                raise BadInput(f"--{name} must be at least {0 if name == 'seed' else 1}")
    pool_tokens, pool_source = None, None
    if args.pool_tokens is not None:
        pool_tokens, pool_source = float(_parse("pool_tokens", "tokens", args.pool_tokens)), "--pool-tokens (measured)"
        if pool_tokens <= 0:
            raise BadInput("--pool-tokens must be positive")
    if args.calibration:
        from servesize.vllm_logs.files import load_calibration

        try:
            cal = load_calibration(args.calibration)
        except OSError as exc:
            raise BadInput(f"cannot read calibration {args.calibration}: {exc.strerror or exc}") from None
        if pool_tokens is None:
            # The most direct measurement wins: the real pool, else the engine's own available
            # bytes (the pool then follows exactly), else its block count.
            if cal.pool_tokens:
                pool_tokens, pool_source = float(cal.pool_tokens), f"calibration {args.calibration} (pool)"
            elif cal.available_kv_bytes_per_gpu:
                lo, hi = cal.available_kv_bytes_per_gpu
                args.kv_cache_memory_bytes = (lo + hi) // 2
                pool_source = f"engine arithmetic on the available KV bytes logged in {args.calibration}"
            elif cal.num_blocks:
                args.num_gpu_blocks_override = cal.num_blocks
                pool_source = f"engine arithmetic on the block count logged in {args.calibration}"
            else:
                raise BadInput(f"calibration {args.calibration} has no pool, available memory or block count; "
                               "pass --pool-tokens instead")
    if args.state_dtype:
        args.mamba_ssm_cache_dtype = args.state_dtype

    model = resolve_model(args.model)
    from servesize.workload.files import load_workload
    from servesize.workload.model import Workload

    wl = load_workload(args.workload) if args.workload else Workload.seed_reference()
    knobs = Knobs(assumptions=args.assumptions, sticky_routing=not args.no_sticky_routing, **mc)
    if args.subagents_share_prefix:
        wl = wl.replace(subagents_share_prefix=True)
    for name, value in explicit.items():  # prefixes and lengths first, so a smaller cap below can hold them
        if name == "max_model_len":
            continue
        wl, knobs = _apply(wl, knobs, name, value)
    from servesize.engine.deployment import derived_max_model_len

    model_limit = derived_max_model_len(model.architecture)
    if "max_model_len" in explicit:
        wl = wl.replace(max_model_len=explicit["max_model_len"])
    elif model_limit and wl.max_model_len > model_limit:
        wl = wl.replace(max_model_len=model_limit)  # the workload's cap, at most the model's own context
    args.max_model_len = wl.max_model_len  # the workload's cap is the engine's --max-model-len

    has_mtp = bool(model.architecture.mtp_layers)
    spec_asked = [f for f in ("mtp_speedup", "spec_acceptance", "spec_tokens") if f in explicit
                  and not (f == "mtp_speedup" and explicit[f] == 1.0) and not (f == "spec_tokens" and explicit[f] == 0)]
    if spec_asked and not has_mtp:
        raise BadInput(f"{model.architecture.name} has no MTP head, and servesize models speculative decoding only "
                       f"through a model's own MTP module: drop --{spec_asked[0].replace('_', '-')}")
    if "mtp_speedup" in explicit:
        drafts = int(explicit.get("spec_tokens", 0)) or int(Knobs().a("decode.mtp_drafts"))
        if explicit["mtp_speedup"] > drafts + 1:
            raise BadInput(f"--mtp-speedup {explicit['mtp_speedup']:g} is more than {drafts} drafts can give "
                           f"(at most {drafts + 1}x, every draft accepted)")

    sweep_param = sweep_values = sweep_labels = None
    if args.sweep:
        if "=" not in args.sweep:
            raise BadInput("--sweep takes PARAM=V1,V2,... e.g. median=31k,45k,60k")
        sweep_param, _, rest = args.sweep.partition("=")
        sweep_param = sweep_param.strip().lstrip("-").replace("-", "_")
        kinds = {**WORKLOAD_FLAGS, **KNOB_FLAGS}
        if sweep_param == "spec_tokens":
            raise BadInput("--sweep cannot vary spec_tokens: the memory itself depends on the draft count; "
                           "run plan once per --spec-tokens value")
        if sweep_param not in kinds or sweep_param == "max_model_len":
            raise BadInput(f"--sweep cannot vary {sweep_param!r}; choose one of: {', '.join(k for k in kinds if k != 'max_model_len')}")
        sweep_labels = [v.strip() for v in rest.split(",") if v.strip()]
        if not sweep_labels:
            raise BadInput("--sweep needs at least one value")
        sweep_values = [_parse(sweep_param, kinds[sweep_param], v) for v in sweep_labels]
        for v in sweep_values:  # validate every value before the long work
            _apply(wl, knobs, sweep_param, v)

    # --- the deployment ----------------------------------------------------------------------
    gpus = gpus_from_args(args)
    dep = deployment_from_args(args)
    if (model.architecture.mtp_layers and not dep.num_speculative_tokens and args.assumptions != "seed"
            and knobs.mtp_speedup != 1.0):
        # The recipe serves with the model's MTP head: size the memory as vLLM will (MTP weights, its
        # attention layer in the KV group, draft slots in the recurrent state). The seed's model
        # ignores this, so --assumptions seed leaves it out.
        from servesize.planning.inputs import spec_tokens_of

        dep = replace(dep, num_speculative_tokens=spec_tokens_of(knobs))
    name = getattr(model, "name", None) or model.architecture.name
    report = memory_report(model.architecture, gpus, dep, budget=args.budget, name=name)
    hf_id = getattr(getattr(model, "entry", None), "hf_id", None) or (args.model if "/" in args.model else name)
    fixed = fixed_from_memory(report, model.architecture, pool_tokens, pool_source,
                              seed_convention=args.assumptions == "seed", hf_id=hf_id)
    if fixed.pool_tokens <= wl.reserved_prefix_tokens():
        raise BadInput(f"the KV pool ({fixed.pool_tokens:,.0f} tokens per replica) does not even hold the shared "
                       f"prefixes ({wl.reserved_prefix_tokens():,} tokens): nothing stays warm")

    print("servesize: planning (Monte-Carlo fills)...", file=sys.stderr) if not args.json else None
    result = make_plan(fixed, dep, wl, knobs, with_sensitivity=not args.no_sensitivity)
    if sweep_param:
        if sweep_param == "cpu_offload_gib":
            from servesize.units import GiB
            sweep_values = [v * GiB for v in sweep_values]
            sweep_param = "cpu_offload_bytes"
        result.sweep = sweep(fixed, wl, knobs, _RENAME.get(sweep_param, sweep_param), sweep_values, sweep_labels)
    if args.plot:
        try:
            plot_plan(result, args.plot)
        except ImportError:
            raise BadInput("--plot needs matplotlib (pip install matplotlib)") from None
        result.plot = args.plot
    return result
