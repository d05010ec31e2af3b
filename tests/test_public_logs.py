"""Every public start-up log with an "Available KV cache memory" line (tests/fixtures/vllm-logs-available.json),
replayed: both printed lines exactly from what the log states, and the available memory from the flags alone
within 10% -- or the fact the log does not state that the prediction needs, named in the fixture and in
docs/accuracy.md (whose table scripts/public_logs_accuracy.py generates; this test checks it is current).
Over the logs that state everything, the median |error| is at most 2% and the largest at most 10%, and
there are at least MIN_COMPLETE of them, so the tolerance cannot hold vacuously."""

import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("public_logs_accuracy", ROOT / "scripts" / "public_logs_accuracy.py")
acc = importlib.util.module_from_spec(_spec)
sys.modules["public_logs_accuracy"] = acc  # dataclasses look their module up there
_spec.loader.exec_module(acc)
CASES = acc.cases()
MIN_COMPLETE = 3  # the logs in the fixture that state everything a flags-alone prediction needs
MEDIAN_TOLERANCE, MAX_TOLERANCE = 0.02, 0.10


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_each_log_prints_its_own_lines_from_what_it_states(case):
    result = acc.exact(case)
    assert result.ok, result.detail


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_from_the_flags_alone_the_available_memory_is_within_10_percent_or_the_missing_fact_is_named(case):
    predicted = acc.flags_alone(case)
    if case.get("missing_for_flags_alone"):
        assert len(case["missing_for_flags_alone"]) > 20  # named, in words a reader can act on
        return
    assert predicted.error is not None and abs(predicted.error) <= 0.10, predicted


def test_enough_logs_state_everything_for_the_tolerance_to_mean_something():
    complete = [c["id"] for c in CASES if not c.get("missing_for_flags_alone")]
    assert len(complete) >= MIN_COMPLETE, complete


def test_over_the_logs_that_state_everything_the_median_error_is_within_2_percent_and_the_largest_within_10():
    table = acc.rows()
    errors = acc._counted_errors(table)
    assert len(errors) >= MIN_COMPLETE  # every complete log yields a prediction (a refusal carries its memory too)
    assert acc.median_error(table) <= MEDIAN_TOLERANCE, acc.markdown(table)
    assert acc.max_error(table) <= MAX_TOLERANCE, acc.markdown(table)


def test_the_accuracy_page_holds_the_generated_table():
    page = (ROOT / "docs" / "accuracy.md").read_text()
    start, end = "<!-- public-logs:start -->\n", "<!-- public-logs:end -->"
    assert start in page and end in page
    assert page.split(start, 1)[1].split(end, 1)[0] == acc.markdown(acc.rows())


@pytest.mark.parametrize("case", [c for c in CASES if "--kv-transfer-config" in c["scenario"].get("vllm_serve", "")],
                         ids=lambda c: c["id"])
def test_a_log_served_with_a_kv_connector_is_one_servesize_warns_of_and_one_the_median_leaves_out(case):
    connector = case["scenario"]["vllm_serve"].split('"kv_connector":"', 1)[1].split('"', 1)[0]
    assert any(connector in q for q in case["quotes"])  # the connector is the one the log's own command names
    warned = acc.flags_alone(case).not_modelled
    assert len(warned) == 1 and f"KV connector {connector} changes where KV lives" in warned[0]
    assert connector in case["missing_for_flags_alone"]

