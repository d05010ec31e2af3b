"""The explorer under a hostile page (issue 16): any page the user happens to visit can make the browser
POST to 127.0.0.1, so the API executes only application/json from its own page, never touches a path a
request names (not even to look), takes huge numbers as a refusal, and an upload never holds up a verdict.
Each request goes through the real application (aiohttp's test server), as the browser's would."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import shutil
import sys
import threading

import pytest
from aiohttp.test_utils import TestClient, TestServer

from servesize.web.app import ROUTES, make_app

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
SMALL_CONFIG = FIXTURES / "model-configs" / "Qwen--Qwen3-0.6B" / "config.json"
BASE = {"model": "qwen3-8b", "gpus": "1xH100", "fills": 20, "draws": 200}
JSON = {"Content-Type": "application/json"}


async def _request(client, method, path, body, headers):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    response = await client.request(method, path, data=data, headers=headers)
    text = await response.text()
    try:
        return response.status, json.loads(text)
    except ValueError:
        return response.status, text


def call(path: str, body=None, headers=None, method: str = "POST"):
    async def go():
        async with TestClient(TestServer(make_app())) as client:
            return await _request(client, method, path, BASE if body is None else body,
                                  JSON if headers is None else headers)

    return asyncio.run(go())


# -- who may POST ---------------------------------------------------------------------------------------

POSTS = [path.replace("{name}", "decode") for method, path, _ in ROUTES if method == "POST"]


@pytest.mark.parametrize("path", POSTS)
def test_a_post_from_a_foreign_origin_is_refused_before_anything_runs(path, monkeypatch):
    import servesize.web.handlers as handlers

    ran = []
    monkeypatch.setattr(handlers, "plan_request", lambda *a, **k: ran.append(a))
    for origin in ("http://evil.example", "null", "http://127.0.0.1:1"):
        status, doc = call(path, headers={**JSON, "Origin": origin})
        assert status == 403 and "may not use this explorer" in doc["error"], (path, origin, doc)
    status, doc = call(path, headers={**JSON, "Sec-Fetch-Site": "cross-site"})
    assert status == 403
    assert ran == []


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                          "image/png", ""])
def test_a_post_that_is_not_application_json_is_refused_with_415(content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    status, doc = call("/api/plan", json.dumps(BASE).encode(), headers=headers)
    assert status == 415 and "application/json" in doc["error"]


def test_the_explorers_own_page_may_post_with_its_own_origin():
    async def go():
        async with TestClient(TestServer(make_app())) as client:
            own = f"http://{client.host}:{client.port}"
            return await _request(client, "POST", "/api/memory", BASE,
                                  {**JSON, "Origin": own, "Sec-Fetch-Site": "same-origin"})

    status, doc = asyncio.run(go())
    assert status == 200 and doc["memory"]["pool"]["kv_cache_tokens"] > 0


def test_the_page_itself_sends_application_json():
    script = (pathlib.Path(__file__).resolve().parents[2] / "src/servesize/web/static/app.js").read_text()
    assert '"Content-Type": "application/json"' in script


# -- no path a request names is touched ------------------------------------------------------------------

class Touches:
    """Every open (the interpreter's audit event) and stat of a path under ``root``, from any thread."""

    def __init__(self, root: pathlib.Path):
        self.root, self.seen = str(root), []

    def audit(self, event: str, args: tuple) -> None:
        if event in ("open", "os.listdir", "os.scandir") and args and self.root in str(args[0]):
            self.seen.append((event, str(args[0])))


_AUDITED: list[Touches] = []


def _hook(event, args):
    for t in _AUDITED:
        t.audit(event, args)


sys.addaudithook(_hook)  # an audit hook cannot be removed: it records only while a test has a Touches in _AUDITED


@pytest.fixture
def secret(tmp_path, monkeypatch):
    """A real, readable model folder and config.json: were the server to read a named path, it would succeed."""
    folder = tmp_path / "secret-model"
    folder.mkdir()
    shutil.copy(SMALL_CONFIG, folder / "config.json")
    touches = Touches(folder)
    real_stat = os.stat

    def stat(path, *a, **k):
        if str(folder) in str(path):
            touches.seen.append(("stat", str(path)))
        return real_stat(path, *a, **k)

    monkeypatch.setattr(os, "stat", stat)
    _AUDITED.append(touches)
    yield folder, touches
    _AUDITED.remove(touches)


def _draft(path: str) -> str:
    return json.dumps({"method": "draft_model", "model": path, "num_speculative_tokens": 2})


def _named_paths(folder: pathlib.Path) -> list[tuple[str, dict]]:
    config = str(folder / "config.json")
    return [
        ("/api/memory", {**BASE, "speculative_config": _draft(config)}),
        ("/api/memory", {**BASE, "speculative_config": _draft(str(folder))}),
        ("/api/plan", {**BASE, "speculative_config": _draft(config)}),
        ("/api/memory", {**BASE, "vllm_serve": f"vllm serve qwen3-8b --speculative-config '{_draft(config)}'"}),
        ("/api/memory", {**BASE, "model": config}),
        ("/api/memory", {**BASE, "workload": config}),
        ("/api/memory", {**BASE, "calibration": config}),
    ]


def test_a_request_naming_a_server_path_is_a_400_and_reads_nothing(secret):
    folder, touches = secret
    for path, body in _named_paths(folder):
        status, doc = call(path, body)
        assert status == 400, (body, doc)
        assert "\n" not in doc["error"]
    # a serve line's model: the request's own model wins (the web form always gives one), and the path is unread
    status, _ = call("/api/memory", {**BASE, "vllm_serve": f"vllm serve {folder / 'config.json'}"})
    assert status == 200
    assert touches.seen == []


def test_the_same_draft_named_from_the_catalogue_is_sized():
    status, doc = call("/api/memory", {**BASE, "speculative_config": _draft("qwen3-0.6b")})
    assert status == 200 and doc["memory"]["pool"]["kv_cache_tokens"] > 0


def test_the_command_line_still_reads_the_draft_path_the_user_gives(secret):
    from servesize.cli import main

    folder, touches = secret
    code = main(["memory", "qwen3-8b", "--gpus", "1xH100", "--speculative-config", _draft(str(folder / "config.json")),
                 "--json"])
    assert code == 0 and touches.seen  # the terminal's user names their own files; the explorer's visitors do not


# -- numbers and uploads --------------------------------------------------------------------------------

def test_a_5000_digit_integer_in_a_body_is_a_400():
    status, doc = call("/api/plan", '{"model": "qwen3-8b", "gpus": "1xH100", "median": ' + "9" * 5000 + "}")
    assert status == 400 and len(doc["error"]) < 300


def test_calibrate_reads_40000_repeated_kv_lines_in_one_pass():
    line = "INFO 12-01 [kv_cache_utils.py:1] GPU KV cache size: 290,864 tokens"
    body = {"model": "qwen3.5-27b", "gpus": "1xH20-3e", "vllm_log": "\n".join([line] * 40_000)}
    status, doc = call("/api/calibrate", body)
    assert status in (200, 400) and isinstance(doc, dict)


def test_repeated_untagged_lines_are_numbered_each_once():
    from servesize.vllm_logs.parse import Fact, LogFacts

    facts = tuple(Fact("gpu_kv_cache_tokens", i, i, "", None) for i in range(1, 40_001))
    per = LogFacts("log", facts, 1, 1, 1, 40_000, ()).per_rank("gpu_kv_cache_tokens")
    assert len(per) == 40_000 and per["engine"] == 1 and per["engine#2"] == 2 and per["engine#40000"] == 40_000


def plan_while_an_upload_is_held(started: threading.Event, release: threading.Event, order: list[str]):
    """POST a calibrate upload; once the hold ``started``, ask for a plan, note it in ``order``, then ``release`` the
    upload: ((plan status, doc), (upload status, doc)). The order of events decides, not a clock."""
    async def go():
        async with TestClient(TestServer(make_app())) as client:
            upload = asyncio.ensure_future(_request(client, "POST", "/api/calibrate", {**BASE, "vllm_log": "x"}, JSON))
            await asyncio.get_running_loop().run_in_executor(None, started.wait, 120)
            plan = await _request(client, "POST", "/api/plan", BASE, JSON)
            order.append("plan")
            release.set()
            return plan, await upload

    return asyncio.run(go())


def test_a_verdict_is_answered_while_an_upload_is_still_being_computed(monkeypatch):
    """An upload runs on a worker of its own: a plan asked for while a calibrate is held in its worker is
    answered first (decided by the order of events, not by a clock)."""
    import servesize.web.views as views

    release, started, order = threading.Event(), threading.Event(), []

    def held_calibrate(scenario, log, hints=None):
        started.set()
        release.wait(120)
        order.append("calibrate")
        return {"held": True}

    monkeypatch.setattr(views, "calibrate_view", held_calibrate)

    (plan_status, _), (upload_status, upload) = plan_while_an_upload_is_held(started, release, order)
    assert order == ["plan", "calibrate"]
    assert plan_status == 200 and upload_status == 200 and upload == {"held": True}


# -- serve --host ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("host, says", [("a" * 300, "not an address or host name"),
                                        ("x" * 64 + ".example", "not an address or host name"),
                                        ("256.1.1.1", "cannot listen on 256.1.1.1")])
def test_serve_on_a_host_it_cannot_listen_on_says_so_in_one_line_and_never_that_it_listens(capsys, host, says):
    from servesize.cli import main

    code = main(["serve", "--host", host, "--port", "0"])
    out, err = capsys.readouterr()
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1
    assert "listening" not in err and "explorer:" not in out


# -- malformed requests (issue 31): a refusal, never a bug; one line in the terminal, never a traceback ------------

@pytest.mark.parametrize("encoding, body", [("gzip", b"not gzip"), ("deflate", b"not deflate"), ("x-foo", b"{}"),
                                            ("gzip", __import__("gzip").compress(json.dumps(BASE).encode()))],
                         ids=["gzip-not-gzip", "deflate-not-deflate", "unknown-encoding", "real-gzip"])
def test_a_body_with_a_content_encoding_is_refused_with_415_not_a_bug(encoding, body):
    """The page never compresses a body. A gzip header over bytes that are not gzip was a 'bug' 500 (aiohttp failed
    to inflate it as the handler read it); any encoding is now refused before the body is read."""
    status, doc = call("/api/memory", body, headers={**JSON, "Content-Encoding": encoding})
    assert status == 415 and "Content-Encoding" in doc["error"] and "bug" not in doc["error"], doc


def test_the_explorer_answers_malformed_http_with_one_line_in_its_terminal_and_no_traceback():
    """Clients that go away mid-body (one with a chunk size that is not hex), a request with no Host header, one whose
    body is not the gzip it claims, and bytes that are not HTTP, sent to a real `servesize serve`: its terminal gets at
    most one 'servesize explorer:' line for each, never a traceback (a client gone mid-body was a 'bug' traceback)."""
    import re
    import signal
    import socket
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "servesize", "serve", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first: list[str] = []
        reader = threading.Thread(target=lambda: first.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(60)
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)/", first[0]).group(1))
        post = b"POST /api/plan HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        for first, then in ((post + b"Content-Length: 100\r\n\r\n{\"model\"", None),  # gone before its body ends
                            (post + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{\"\r\n", b"ZZ\r\n0\r\n\r\n")):  # chunk size 'ZZ'
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(first)
                if then is not None:
                    sock.sendall(then)
        for raw in (b"POST /api/plan HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
                    b"POST /api/plan HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Content-Encoding: gzip\r\nContent-Length: 8\r\n\r\nnot gzip",
                    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not HTTP at all\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                sock.sendall(raw)
                answer = sock.recv(4096)
                assert answer.startswith((b"HTTP/1.0 400", b"HTTP/1.1 400", b"HTTP/1.1 415")), answer[:200]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert "Traceback" not in err, err
    assert all(line.startswith("servesize explorer:") for line in err.splitlines()), err


# -- work bounded by what a request must compute (issue 31) ----------------------------------------------------------

def test_a_comma_list_repeating_one_precision_is_one_fit_not_twenty_thousand():
    """An 80 KB body of "fp8," x 20,000 held both verdict workers for minutes: a list's work is per distinct item."""
    from servesize.scenario import FitQuery

    assert FitQuery(gpus="1xH100", precision="fp8," * 20_000).precisions() == ("fp8",)
    assert FitQuery(gpus="1xH100", precision="fp8,int4,fp8, int4").precisions() == ("fp8", "int4")
    query = {"gpus": "1xH100", "models": "llama-3.1-8b," * 5_000}
    many = call("/api/fit", {**query, "precision": "fp8," * 20_000})
    one = call("/api/fit", {**query, "precision": "fp8"})
    assert many[0] == one[0] == 200
    assert many[1]["rows"] == one[1]["rows"] and len(one[1]["rows"]) == 1


def test_a_form_past_its_limit_is_413_and_an_upload_of_the_same_size_is_read():
    from servesize.web.server import FORM_BODY_BYTES, MAX_BODY_BYTES

    padding = "x" * (FORM_BODY_BYTES + 1)
    status, doc = call("/api/plan", {**BASE, "pad": padding})
    assert status == 413 and f"larger than {FORM_BODY_BYTES >> 20} MiB" in doc["error"], doc
    status, doc = call("/api/calibrate", {**BASE, "vllm_log": "INFO nothing to calibrate\n" + padding})
    assert status == 400 and "larger than" not in doc["error"], doc   # read, then refused for what it says
    status, doc = call("/api/calibrate", {**BASE, "vllm_log": "x" * (MAX_BODY_BYTES + 1)})
    assert status == 413, doc


def test_a_verdict_is_answered_while_an_upload_body_is_still_being_parsed(monkeypatch):
    """An upload's JSON is parsed on the uploads' worker, not on the event loop: a plan asked while a pasted log's
    body is held in its parse is answered first (decided by the order of events, not by a clock)."""
    import servesize.web.server as server

    release, started, order = threading.Event(), threading.Event(), []
    parse = server.parse_json

    def held_parse(text, what):
        if "vllm_log" in text:
            started.set()
            release.wait(120)
            order.append("upload parsed")
        return parse(text, what)

    monkeypatch.setattr(server, "parse_json", held_parse)

    (plan_status, _), (upload_status, _) = plan_while_an_upload_is_held(started, release, order)
    assert order == ["plan", "upload parsed"]
    assert plan_status == 200 and upload_status == 400
