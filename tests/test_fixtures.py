"""Every published fact under tests/fixtures/ names where it came from: a fact without its source fails here."""

import csv
import json
import pathlib
import re

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
CONFIGS = FIXTURES / "model-configs"
URL = re.compile(r"https://\S+")


def test_every_fixture_file_is_one_whose_sources_this_module_checks():
    # A new kind of fixture needs a source check below before it can land.
    assert {p.name for p in FIXTURES.iterdir()} == {"README.md", "vllm-logs-public.json", "model-configs", "gpu-specs.md",
                                                   "seeds.json", "vllm-cli", "vllm-logs-available.json",
                                                   "decode-benchmarks.json", "published-hit-rates.json", "measured"}


# ---------------------------------------------------------------- measured/ (the step model's runs)

MEASURED = FIXTURES / "measured"
PUBLISHED_RUNS = [(p.name, run) for p in sorted(MEASURED.glob("vllm-bench-published-*.json"))
                  for run in json.loads(p.read_text())["runs"]]


def test_the_aiconfigurator_rows_name_their_package_version_and_licence():
    notice = (MEASURED / "aiconfigurator-NOTICE.md").read_text()
    assert "aiconfigurator-core` 0.12.0" in notice and "Apache-2.0" in notice and "silicon_sample.csv" in notice
    assert "Apache License" in (MEASURED / "aiconfigurator-LICENSE.txt").read_text()
    with (MEASURED / "aiconfigurator-silicon-vllm.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 573 and all(r["backend"] == "vllm" and r["mode"] == "agg" for r in rows)
    assert all(float(r["silicon_ttft_ms"]) > 0 and float(r["silicon_tpot_ms"]) > 0 for r in rows)


def test_the_published_runs_are_at_least_thirty_with_unique_ids():
    ids = [run["id"] for _, run in PUBLISHED_RUNS]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)


@pytest.mark.parametrize("name,run", PUBLISHED_RUNS, ids=lambda x: x["id"] if isinstance(x, dict) else x)
def test_every_published_run_names_its_url_and_quotes_every_figure_it_states(name, run):
    assert URL.match(run["url"]) and run["quote"] and run["model"] and run["gpu"] and run["gpus"] >= 1
    quoted = "\n".join(run["quote"])
    numbers = {float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*", quoted)}
    for key, value in run["measured"].items():
        if value is not None:
            assert float(value) in numbers, f"{run['id']}: {key} = {value} is not in the quoted lines"


# ---------------------------------------------------------------- vllm-logs-available.json

AVAILABLE_CASES = json.loads((FIXTURES / "vllm-logs-available.json").read_text())
# The one figure, as each engine generation spells it: V1's line; V0 0.6.5-0.7's multi-line profile
# (worker.py, after vllm#10511); V0 0.6.x's one-line "Memory profiling results"; V0 0.7-0.8's sentence.
AVAILABLE_LINE_SPELLINGS = ("Available KV cache memory", "available_kv_cache_memory", "kv_cache_size=",
                            "the rest of the memory reserved for KV Cache is")


@pytest.mark.parametrize("case", AVAILABLE_CASES, ids=lambda c: c["id"])
def test_every_available_memory_log_names_its_url_quotes_its_available_line_and_states_its_flags(case):
    source = case["source"]
    assert source["url"].startswith("https://github.com/") and f"/{source['number']}" in source["url"]
    assert any(spelling in q for q in case["quotes"] for spelling in AVAILABLE_LINE_SPELLINGS)
    assert case["scenario"]["gpus"] and case["scenario"]["vllm_version"] and case["reported"]["available_kv_gib"]


# ---------------------------------------------------------------- vllm-cli/

@pytest.mark.parametrize("path", sorted((FIXTURES / "vllm-cli").glob("*")), ids=lambda p: p.name)
def test_every_vllm_cli_dump_names_the_release_it_was_read_from_and_how(path):
    doc = json.loads(path.read_text())
    assert URL.match(doc["source"]["url"]) and doc["source"]["how"] and doc["vllm_version"] in path.name
    assert doc["flags"] and set(doc["switches"]) <= set(doc["flags"])


# ---------------------------------------------------------------- vllm-logs-public.json

LOG_CASES = json.loads((FIXTURES / "vllm-logs-public.json").read_text())


@pytest.mark.parametrize("case", LOG_CASES, ids=lambda c: c["id"])
def test_every_public_vllm_log_case_names_its_issue_url_and_quotes_its_lines(case):
    source = case["source"]
    assert source["url"].startswith("https://github.com/"), case["id"]
    assert f"/{source['number']}" in source["url"] and source["repo"] in source["url"]
    assert case["quotes"] and all(line.strip() for line in case["quotes"])
    assert case["reported"]


def test_the_public_vllm_log_cases_are_six_with_distinct_ids():
    assert len({c["id"] for c in LOG_CASES}) == len(LOG_CASES) == 6


# ---------------------------------------------------------------- model-configs/

def _config_sources():
    """file -> (source URL, copied-from URL) from the table in model-configs/SOURCES.md."""
    rows = {}
    for line in (CONFIGS / "SOURCES.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and cells[0].endswith(".json"):
            assert cells[0] not in rows, f"{cells[0]} has two rows"
            rows[cells[0]] = (cells[1], cells[2])
    return rows


CONFIG_SOURCES = _config_sources()
CONFIG_FOLDERS = sorted(p for p in CONFIGS.iterdir() if p.is_dir())


def test_the_model_configs_are_the_44_published_files():
    assert len(CONFIG_FOLDERS) == 44
    assert all(len(list(folder.glob("config*.json"))) == 1 for folder in CONFIG_FOLDERS)
    assert {p.name for p in CONFIGS.iterdir() if p.is_file()} == {"SOURCES.md"}


@pytest.mark.parametrize("folder", CONFIG_FOLDERS, ids=lambda p: p.name)
def test_every_model_config_has_a_hugging_face_source_and_the_pinned_file_it_was_copied_from(folder):
    (path,) = folder.glob("config*.json")
    key = f"{folder.name}/{path.name}"
    assert key in CONFIG_SOURCES, f"{key} has no row in model-configs/SOURCES.md"
    source, copied_from = CONFIG_SOURCES[key]
    org, name = folder.name.split("--", 1)
    assert source == f"https://huggingface.co/{org}/{name}/blob/main/config.json"
    assert re.fullmatch(r"https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/\S+", copied_from), copied_from
    assert json.loads(path.read_text())  # the file is the JSON it claims to be


def test_every_row_of_the_config_sources_names_a_file_that_is_here():
    assert all((CONFIGS / key).is_file() for key in CONFIG_SOURCES), set(CONFIG_SOURCES)


# ---------------------------------------------------------------- gpu-specs.md

GPU_SPECS = (FIXTURES / "gpu-specs.md").read_text(encoding="utf-8")


def _gpu_rows():
    rows = []
    for line in GPU_SPECS.split("## Table", 1)[1].splitlines():
        if not line.startswith("|"):
            if rows:
                break
            continue
        label = line.strip("|").split("|")[0].strip()
        if label != "GPU" and not set(label) <= {"-"}:
            rows.append((label, line))
    return rows


def _gpu_sources():
    """Number -> text of each entry under '## Sources' (an entry runs on over its indented lines)."""
    entries, number = {}, None
    for line in GPU_SPECS.split("## Sources", 1)[1].split("\n## ", 1)[0].splitlines():
        start = re.match(r"(\d+)\. (.*)", line)
        if start:
            number = int(start.group(1))
            entries[number] = start.group(2)
        elif line.startswith(" ") and number is not None:
            entries[number] += " " + line.strip()
    return entries


def _cited(row):
    """The source numbers a row's tags cite: '[V:1,2]', '[U:15]', '[D: 2×BF16; U:21]' (not '[U]' alone)."""
    return {int(n) for tag in re.findall(r"\[[VUD][^\]]*\]", row)
            for refs in re.findall(r"[VU]:\s*([0-9][0-9,\s]*)", tag) for n in refs.replace(" ", "").split(",") if n}


GPU_SOURCES = _gpu_sources()


def test_the_gpu_spec_sources_are_numbered_one_to_62_without_gaps():
    assert sorted(GPU_SOURCES) == list(range(1, 63))


@pytest.mark.parametrize("label, row", [pytest.param(label, row, id=label) for label, row in _gpu_rows()])
def test_every_gpu_spec_row_cites_a_source_that_is_listed(label, row):
    cited = _cited(row)
    assert cited, f"{label} cites no numbered source"
    assert cited <= set(GPU_SOURCES), (label, cited - set(GPU_SOURCES))


@pytest.mark.parametrize("number", sorted(GPU_SOURCES))
def test_every_gpu_spec_source_says_where_it_is_and_an_issue_or_pr_gives_its_url(number):
    text = GPU_SOURCES[number]
    assert len(text) > 20, text
    if re.search(r"\b(issue|PR) #\d+", text):
        assert "https://github.com/" in text, text


def test_every_gpu_spec_source_is_cited_by_some_row_or_note():
    cited = set().union(*(_cited(row) for _, row in _gpu_rows()), _cited(GPU_SPECS.split("## Sources", 1)[0]))
    assert set(GPU_SOURCES) <= cited, set(GPU_SOURCES) - cited


# ---------------------------------------------------------------- seeds.json

SEEDS = json.loads((FIXTURES / "seeds.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: s["id"])
def test_every_seed_names_its_url_or_says_why_it_has_none(seed):
    assert seed["title"].strip()
    if seed["url"] is None:
        assert seed["no_url_because"].strip()
    else:
        assert URL.fullmatch(seed["url"]), seed["url"]
    assert seed["figures"]


@pytest.mark.parametrize("figure", [f for s in SEEDS for f in s["figures"]], ids=lambda f: f["quote"][:40])
def test_every_seed_figure_is_quoted_and_names_tests_that_exist(figure):
    assert figure["quote"].strip() and figure["checked_by"]
    for node in figure["checked_by"]:
        path, name = node.split("::")
        assert re.search(rf"^def {re.escape(name)}\(", (TESTS.parent / path).read_text(), re.M), node


# ---------------------------------------------------------------- decode-benchmarks.json

BENCHMARKS = json.loads((FIXTURES / "decode-benchmarks.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("source", BENCHMARKS["sources"], ids=lambda s: s["id"])
def test_every_decode_benchmark_source_names_its_url_publisher_and_quotes(source):
    assert URL.fullmatch(source["url"]), source["url"]
    assert source["publisher"].strip() and source["what"].strip()
    assert source["quotes"] and all(q.strip() for q in source["quotes"])


def test_every_decode_benchmark_case_names_a_listed_source():
    ids = {s["id"] for s in BENCHMARKS["sources"]}
    assert all(case["source"] in ids for case in BENCHMARKS["cases"])


# ---------------------------------------------------------------- published-hit-rates.json (the Simulate issue)

HIT_RATES = json.loads((FIXTURES / "published-hit-rates.json").read_text(encoding="utf-8"))["facts"]


@pytest.mark.parametrize("fact", HIT_RATES, ids=lambda f: f["id"])
def test_every_published_hit_rate_quotes_its_source_url_names_its_definition_and_the_tests_that_check_it(fact):
    assert URL.fullmatch(fact["url"]), fact["url"]
    assert fact["quote"].strip() and fact["definition"].strip() and fact["trace"].strip()
    assert fact["checked_by"]
    for node in fact["checked_by"]:
        path, name = node.split("::")
        assert re.search(rf"^def {re.escape(name)}\(", (TESTS.parent / path).read_text(), re.M), node
