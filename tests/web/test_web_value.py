"""POST /api/value: a control's text read by its field's own declaration (Param.parse, servesize.units), so
the page places a slider's thumb with no units rule of its own; a text the command line refuses is refused
here in the same words, naming the field."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp.test_utils import TestClient, TestServer

from servesize.errors import BadInput
from servesize.fleet_query import FLEET_PARAMS
from servesize.scenario import FIT_PARAMS, PARAMS
from servesize.units import parse_tokens
from servesize.web.app import make_app
from servesize.web.form import VIEW_PARAMS, form

TOKEN_TEXTS = ["45k", "140k", "15k", "16K", "1M", "2.77m", "31000", "0.5k", "1e4", " 32k ", "64K", "2.77M", "1,024",
               "1_6k", "lots", "", "-5", "3x", "1.5K", "100000001", "0"]


def ask(bodies: list) -> list[tuple[int, dict]]:
    """Each body posted to one application, in order: (status, JSON)."""

    async def go():
        async with TestClient(TestServer(make_app())) as client:
            out = []
            for body in bodies:
                response = await client.post("/api/value", data=json.dumps(body), headers={"Content-Type": "application/json"})
                out.append((response.status, json.loads(await response.text())))
            return out

    return asyncio.run(go())


def expected(param, text):
    try:
        return 200, {"field": param.name, "value": param.parse(text)}
    except BadInput as exc:
        return 400, str(exc)


def test_a_token_text_is_read_as_the_command_line_reads_it():
    answers = ask([{"view": "plan", "field": "median", "text": t} for t in TOKEN_TEXTS])
    for text, (status, doc) in zip(TOKEN_TEXTS, answers):
        want_status, want = expected(PARAMS["median"], text)
        assert status == want_status, (text, doc)
        if status == 200:
            assert doc == want and doc["value"] == parse_tokens(text), text
        else:
            assert doc == {"error": want, "field": "median"}, text
    got = dict(zip(TOKEN_TEXTS, (doc.get("value") for _, doc in answers)))
    assert (got["45k"], got["16K"], got["2.77m"], got["1M"]) == (45_000, 16_384, 2_770_000, 1_048_576)
    assert got["2.77M"] is None and got["1,024"] is None  # refused, as vLLM refuses them


@pytest.mark.parametrize("view, params", [("plan", {**PARAMS, **VIEW_PARAMS}), ("fit", FIT_PARAMS), ("fleet", FLEET_PARAMS)])
def test_every_slider_of_every_view_reads_its_text_by_its_own_declaration(view, params):
    sliders = [n for n, spec in form(["H100-SXM"])[view]["fields"].items() if spec.get("widget") == "slider"]
    assert sliders
    texts = ["0.5", "2", "12k", "8K", "1e-2", "nan", "inf", "abc", "-1", "0"]
    bodies = [{"view": view, "field": n, "text": t} for n in sliders for t in texts]
    for body, (status, doc) in zip(bodies, ask(bodies)):
        want_status, want = expected(params[body["field"]], body["text"])
        assert status == want_status, (body, doc)
        assert doc == want if status == 200 else doc["error"] == want, (body, doc)


def test_an_unknown_view_or_field_or_a_text_that_is_not_text_is_refused_in_one_line():
    answers = ask([{"view": "nowhere", "field": "median", "text": "1"}, {"view": "fleet", "field": "load_users", "text": "1"},
                   {"view": "plan", "field": "median", "text": True}, {"view": "plan", "field": "median", "text": ["1"]}, [1]])
    assert all(status == 400 and "\n" not in doc["error"] for status, doc in answers), answers
    assert "one of plan, fit, fleet" in answers[0][1]["error"]
    assert "not a field of the fleet view" in answers[1][1]["error"]
