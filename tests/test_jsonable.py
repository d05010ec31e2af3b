"""One sanitiser makes every JSON document servesize writes: the CLI's --json, the explorer's API, the run record."""

import json
import math

import numpy as np

from servesize.jsonable import finite


class _Result:
    def to_dict(self):
        return {"ceiling": math.inf, "users": 3}


def test_non_finite_figures_become_null_at_any_depth():
    doc = {"a": math.inf, "b": [1.5, -math.inf, (math.nan, 2)], "c": {"d": {"e": math.nan}}, 7: "seven"}
    assert finite(doc) == {"a": None, "b": [1.5, None, [None, 2]], "c": {"d": {"e": None}}, "7": "seven"}


def test_results_and_numpy_values_are_written_as_plain_json():
    doc = finite({"r": _Result(), "arr": np.array([1.0, np.inf]), "n": np.float64(np.nan), "i": np.int64(4),
                  "ok": True, "none": None})
    assert doc == {"r": {"ceiling": None, "users": 3}, "arr": [1.0, None], "n": None, "i": 4, "ok": True, "none": None}
    assert type(doc["i"]) is int
    json.dumps(doc, allow_nan=False)  # raises ValueError if anything non-finite were left


def test_the_cli_the_explorer_and_the_run_record_share_it():
    import servesize.measure.record as record
    import servesize.web.fleet_view as fleet_view
    import servesize.web.views as views

    assert views.finite is finite and fleet_view.finite is finite and record.finite is finite
    import servesize.cli as cli

    for module in (views, record, cli):
        assert not hasattr(module, "_finite")


def test_a_run_record_writes_a_non_finite_figure_as_null(tmp_path):
    from servesize.measure.record import RunRecord

    path = tmp_path / "r.jsonl"
    with RunRecord(path) as rec:
        rec.append("probe", ttft_s=math.inf, values=(1.0, math.nan), n=np.int64(2))
    assert json.loads(path.read_text()) == {"type": "probe", "ttft_s": None, "values": [1.0, None], "n": 2}
