"""A disaggregated Scenario (--prefill-instances X --decode-instances Y) resolved: the layout on --gpus, the link
between the pools, and the three ordinary Scenarios servesize plans it from (each pool as data-parallel replicas,
and the aggregated layout on the same GPUs)."""

from __future__ import annotations

import re
from typing import Any

from servesize.assumptions import assumption
from servesize.datafiles import table
from servesize.errors import BadInput
from servesize.model.hardware import load_host_links, load_kv_links, parse_gpus
from servesize.planning.disaggregated import Layout
from servesize.resolve.served import with_serve_line
from servesize.scenario import Scenario

# the fields that shape a layout, beside the two that ask for one (Scenario.disaggregated)
LAYOUT_FIELDS = ("prefill_tp", "decode_tp", "prefill_gpu", "kv_link")
_DISAGG_FIELDS = ("prefill_instances", "decode_instances", *LAYOUT_FIELDS)
_NVLINK = re.compile(r"^\s*NVLink\s*([345])\b", re.IGNORECASE)


def refuse_layout_fields_alone(scenario: Scenario) -> None:
    """A layout's own fields mean nothing to an aggregated plan: refused by name, not ignored."""
    for name in LAYOUT_FIELDS:
        if getattr(scenario, name) is not None:
            raise BadInput(f"--{name.replace('_', '-')} shapes a disaggregated layout: give --prefill-instances X "
                           "--decode-instances Y with it, or leave it out", field=name)


def without_layout(scenario: Scenario) -> Scenario:
    """The Scenario with its disaggregated fields cleared: the aggregated question on the same GPUs."""
    return scenario.replace(**{name: None for name in _DISAGG_FIELDS})


def default_link(interconnect: str, host_link: str, gpus_used: int) -> tuple[str, str]:
    """(key, why) of the link a pull crosses when --kv-link is not given: the GPU's NVLink (an NVSwitch fabric,
    interconnect 'NVLink3/4/5 ...') where the layout fits one NVLink domain (decode.nvlink_domain_gpus), else one
    400 Gb/s InfiniBand NIC per GPU (ib-ndr, an HGX/DGX node's); a GPU without NVLink in one host: its PCIe link."""
    domain = int(assumption("decode.nvlink_domain_gpus"))
    nvlink = _NVLINK.match(interconnect or "")
    if gpus_used <= domain:
        if nvlink:
            return f"nvlink{nvlink.group(1)}", (f"assumed: the GPU's NVLink ({interconnect}), the {gpus_used} GPUs "
                                               f"in one {domain}-GPU NVLink domain; give --kv-link")
        keys = {row["name"]: key for key, row in load_host_links().items()}
        if host_link in keys:
            return keys[host_link], f"assumed: the GPUs' {host_link} in one host (no NVLink fabric); give --kv-link"
    return "ib-ndr", (f"assumed: one 400 Gb/s InfiniBand NIC per GPU ({gpus_used} GPUs"
                      f"{' span more than one NVLink domain' if nvlink else ' without an NVLink fabric'}); "
                      "give --kv-link")


def check_connector(name: str) -> None:
    """Refuse, in one line, a connector servesize does not price: one vLLM's factory does not register, or one it
    does whose rule servesize has not read (data/vllm_flag_effects.toml [kv_connectors])."""
    known = table("vllm_flag_effects.toml")["kv_connectors"]
    if name in known["priced"]:
        return
    if name in known["names"]:
        raise BadInput(f"--kv-connector {name}: a connector vLLM {known['release']} registers, whose transfer "
                       f"servesize does not price; it prices {' and '.join(known['priced'])} (the decode instance "
                       "pulls what it lacks)", field="kv_connector")
    raise BadInput(f"--kv-connector {name[:80]!r}: vLLM {known['release']} registers no such connector (it knows "
                   f"{', '.join(known['names'])})", field="kv_connector")


def _prefill_gpu(name: str) -> Any:
    """The --prefill-gpu type, or one line naming the flag."""
    try:
        group = parse_gpus(name)
    except BadInput as exc:
        raise BadInput(f"--prefill-gpu {name[:40]!r}: {exc}", field="prefill_gpu") from None
    if group.count != 1:
        raise BadInput(f"--prefill-gpu {name[:40]!r} names a GPU type, not a count (the prefill pool's GPUs are "
                       "--prefill-instances x --prefill-tp)", field="prefill_gpu")
    return group.gpu


def mixed_link(prefill_gpu: str, decode_gpu: str) -> tuple[str, str]:
    """(key, why) of the link a pull crosses between pools of two GPU types when --kv-link is not given: one 400 Gb/s
    InfiniBand NIC per GPU (ib-ndr), since GPUs of two types share no NVLink fabric."""
    return "ib-ndr", (f"assumed: one 400 Gb/s InfiniBand NIC per GPU ({prefill_gpu} prefill and {decode_gpu} decode "
                      "GPUs share no NVLink fabric); give --kv-link")


def disaggregated_layout(scenario: Scenario) -> tuple[Layout, Scenario, Scenario, tuple[Scenario, ...]]:
    """The layout, and the prefill pool's, the decode pool's and the aggregated Scenarios (one, or one per GPU type
    where --prefill-gpu names another: each type's GPUs served apart)."""
    if scenario.prefill_instances is None or scenario.decode_instances is None:
        raise BadInput("a disaggregated layout takes both --prefill-instances X and --decode-instances Y",
                       field="prefill_instances" if scenario.prefill_instances is None else "decode_instances")
    if scenario.users is not None:
        raise BadInput("--users sizes aggregated replicas; a disaggregated layout is planned on the GPUs --gpus gives")
    if not scenario.gpus:
        raise BadInput("a disaggregated layout needs --gpus N x GPU (the GPUs its pools share)", field="gpus")
    read, _ = with_serve_line(scenario)  # a pasted serve line's --kv-transfer-config names the connector
    check_connector(read.kv_connector)
    group = parse_gpus(scenario.gpus)
    p_gpu = _prefill_gpu(scenario.prefill_gpu) if scenario.prefill_gpu else group.gpu
    mixed = p_gpu.key != group.gpu.key
    tp = scenario.tensor_parallel_size
    p_tp, d_tp = scenario.prefill_tp or tp, scenario.decode_tp or tp
    x, y = scenario.prefill_instances, scenario.decode_instances
    used = x * p_tp + y * d_tp
    if mixed and y * d_tp > group.count:
        raise BadInput(f"{y} decode instance(s) at TP {d_tp} need {y * d_tp} {group.gpu.key}; --gpus gives "
                       f"{group.count} (with --prefill-gpu {p_gpu.key}, --gpus holds the decode pool alone)", field="gpus")
    if not mixed and used > group.count:
        raise BadInput(f"{x}P{y}D at TP {p_tp} and {d_tp} needs {used} GPUs ({x} x {p_tp} + {y} x {d_tp}); --gpus "
                       f"gives {group.count}", field="gpus")
    links = load_kv_links()
    if scenario.kv_link is not None:
        key, why = scenario.kv_link, ""
    elif mixed:
        key, why = mixed_link(p_gpu.key, group.gpu.key)
    else:
        key, why = default_link(group.gpu.interconnect, group.gpu.host_link, used)
    layout = Layout(x, p_tp, y, d_tp, group.gpu.key, group.count, key, links[key], why, read.kv_connector, p_gpu.key)
    base = without_layout(scenario)

    def pool(instances: int, pool_tp: int, gpu: str) -> Scenario:
        return base.replace(gpus=f"{instances * pool_tp}x{gpu}", tensor_parallel_size=pool_tp,
                            data_parallel_size=instances)

    prefill, decode = pool(x, p_tp, p_gpu.key), pool(y, d_tp, group.gpu.key)
    # aggregated on the same GPUs: all of --gpus, and, where the prefill pool's GPUs are of another type, those too,
    # served apart at the prefill pool's TP (a group of one type per router behind the one the layout needs anyway)
    return layout, prefill, decode, (base, prefill) if mixed else (base,)
