"""Request logs -> token counts: one reader per record format, chosen by the first record."""

import json

import pytest

from servesize.errors import BadInput
from servesize.workload.readers import _detect, read_token_counts


def jsonl(tmp_path, records, name="log.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


@pytest.mark.parametrize("record, expected", [
    ({"requests": [{"in": 640}], "usage": {"prompt_tokens": 5}}, "claude-code"),  # sessions are tried first
    ({"usage": {"prompt_tokens": 5, "input_tokens": 5}}, "openai"),
    ({"response": {"body": {"usage": {"input_tokens": 5}}}}, "anthropic"),
    ({"input_length": 5, "prompt_tokens": 5}, "mooncake"),
    ({"requests": [{"out": 5}], "tokens": 5}, "jsonl"),  # requests without 'in' are not a session
])
def test_the_first_matching_format_in_table_order_wins(record, expected):
    assert _detect(record, None).format == expected


def test_a_record_with_only_usual_names_reads_the_first_of_them_and_column_overrides_everything():
    assert _detect({"tokens": 1, "prompt_len": 2}, None).field == "field 'prompt_len'"  # CSV_COLUMNS order
    assert _detect({"usage": {"prompt_tokens": 5}}, "a.b").field == "field 'a.b'"
    assert _detect({"hello": 1}, None) is None


def test_anthropic_prompt_is_input_plus_cache_read_plus_cache_creation(tmp_path):
    path = jsonl(tmp_path, [
        {"usage": {"input_tokens": 100, "cache_read_input_tokens": 9_000, "cache_creation_input_tokens": 900}},
        {"usage": {"input_tokens": 200, "cache_creation_input_tokens": 1_800}},  # reports no cache read
    ])
    obs = read_token_counts(path)
    assert obs.format == "anthropic" and list(obs.user) == [100 + 9_000 + 900, 200 + 1_800]
    assert (obs.cached_tokens, obs.cached_prompt_tokens) == (9_000, 100 + 9_000 + 900)  # only the record that reports it


def test_claude_code_sessions_split_user_and_subagent_requests_and_their_prefixes(tmp_path):
    session = {"system_tokens": 3_000, "tool_tokens": 12_000, "requests": [
        {"in": 64 * 300},
        {"type": "subagent", "system_tokens": 1_000, "requests": [{"in": 64 * 20}, {"in": 64 * 30}, "not an object"]},
        {"in": 64 * 310},
    ]}
    obs = read_token_counts(jsonl(tmp_path, [session, {"requests": [{"in": 64}]}]))
    assert obs.format == "claude-code" and obs.records == 2
    assert list(obs.user) == [64 * 300, 64 * 310, 64]
    assert list(obs.subagent) == [64 * 20, 64 * 30]
    assert list(obs.prefix_tokens) == [3_000 + 12_000] and list(obs.subagent_prefix_tokens) == [1_000]


def test_a_bad_count_inside_a_subagent_is_skipped_and_names_its_place(tmp_path):
    session = {"requests": [{"in": 64}, {"type": "subagent", "requests": [{"in": "lots"}, {"in": 640}]}]}
    obs = read_token_counts(jsonl(tmp_path, [session]))
    assert list(obs.user) == [64] and list(obs.subagent) == [640] and obs.skipped == 1
    assert obs.skip_examples == ["record 1, requests[1].requests[0].in: 'lots' is not a number"]


def test_later_records_are_read_in_the_first_ones_format(tmp_path):
    path = jsonl(tmp_path, [{"usage": {"prompt_tokens": 5_000}}, {"usage": {"input_tokens": 7_000}}])
    obs = read_token_counts(path)
    assert obs.format == "openai" and list(obs.user) == [5_000] and obs.records == 2


def test_a_dotted_column_reads_any_record_shape(tmp_path):
    path = jsonl(tmp_path, [{"meta": {"n": 10}}, {"meta": {}}, {"meta": {"n": 30}}])
    obs = read_token_counts(path, column="meta.n")
    assert (obs.format, obs.field, list(obs.user), obs.records) == ("jsonl", "field 'meta.n'", [10, 30], 3)


def test_a_json_array_holding_a_non_object_skips_it_by_record_number_and_refuses_one_that_starts_so(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps([{"input_length": 5}, 7]))
    obs = read_token_counts(path)
    assert list(obs.user) == [5] and obs.skip_examples == ["record 2: not a JSON object"]
    path.write_text(json.dumps([7, {"input_length": 5}]))
    with pytest.raises(BadInput, match="record 1: expected a JSON object, got int"):
        read_token_counts(path)


def test_a_csv_column_named_but_absent_lists_the_columns(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("id,prompt_tokens\n1,5\n")
    with pytest.raises(BadInput, match=r"no column 'in' in the CSV header \(columns: id, prompt_tokens\)"):
        read_token_counts(path, column="in")


@pytest.mark.parametrize("ids, ok", [
    ([1, 2, 3], True), (["a", 7], True), ([], True),
    ([1, True], False),  # a bool is an int to isinstance, not a block id
    ([1, 2.5], False), ([1, [2]], False), ([1, None], False), ("123", False),
])
def test_hash_ids_are_a_list_of_numbers_or_strings_and_nothing_else(ids, ok):
    from servesize.workload.readers import _BadRow, _hash_ids
    if ok:
        assert _hash_ids(ids, "r") is ids
    else:
        with pytest.raises(_BadRow, match="not a list of block ids"):
            _hash_ids(ids, "r")


def test_a_container_after_a_long_run_of_numbers_is_still_walked_for_depth():
    from collections import OrderedDict

    from servesize.limits import check_depth
    deep: object = 0
    for _ in range(70):
        deep = OrderedDict(x=deep)  # a dict subclass counts as a level too
    check_depth([*range(10_000)], "flat")
    with pytest.raises(BadInput, match="nested deeper than 64"):
        check_depth([*range(10_000), deep], "deep")
