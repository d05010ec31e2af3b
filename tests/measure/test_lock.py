"""A run record is locked while a run writes it: a second run on the same record is refused at once.

Two ``--resume`` on one record at once used to both run and both exit 0, recording rungs twice with warm
rates measured while the two loaded the server together. Every test here decides from who holds the lock
(a second file descriptor in this process, or a child process that says when it holds it), never from
timing.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from testserver import INSTANT, Fault, ServerConfig, TestServer

from cli_runner import run
from servesize.errors import BadInput
from servesize.measure.record import RecordLock, RunRecord

REPO = pathlib.Path(__file__).resolve().parents[2]


def holder_words(pid: int) -> str:
    """How the refusal names the holder: its pid where /proc/locks says it (Linux)."""
    return f"pid {pid}" if os.path.exists("/proc/locks") else "another process"


def broken_pool_record(tmp_path, capsys) -> pathlib.Path:
    """A pool run stopped by HTTP 500 on its first request: a record to --resume."""
    rec = tmp_path / "p.jsonl"
    with TestServer(ServerConfig(capacity_tokens=5000, faults=[Fault("status")])) as server:
        code, _, err = run(capsys, "measure", "pool", "--url", server.url, "--prompt-tokens", 513, "--record", rec, "--quiet")
    assert code == 2 and "HTTP 500" in err
    return rec


def test_a_second_lock_on_one_record_is_refused_naming_the_record_and_the_holder(tmp_path):
    path = tmp_path / "r.jsonl"
    first = RecordLock.acquire(path, create=True)
    try:
        with pytest.raises(BadInput) as refused:
            RecordLock.acquire(path, create=False)  # another open file of the same record: flock refuses it
        line = str(refused.value)
        assert "\n" not in line and f"the run record {path} is in use by another run ({holder_words(os.getpid())})" in line
    finally:
        first.release()
    RecordLock.acquire(path, create=False).release()  # released: the next run takes it


def test_a_record_being_written_keeps_its_lock_while_this_process_reads_it_through_other_files(tmp_path):
    """flock belongs to the locking file: reading the record (as --resume does) and closing that file does
    not drop it, as a POSIX record lock would."""
    path = tmp_path / "r.jsonl"
    rec = RunRecord.create(path, "pool", {"url": "u"})
    try:
        path.read_text()  # another file of this process opened and closed
        with pytest.raises(BadInput, match="is in use by another run"):
            RunRecord.resume(path, "pool")
    finally:
        rec.close()
    rec2, contents = RunRecord.resume(path, "pool")
    rec2.close()
    assert contents.header["params"] == {"url": "u"}


def test_a_resume_of_a_record_another_run_holds_exits_2_and_sends_nothing(tmp_path, capsys):
    rec = broken_pool_record(tmp_path, capsys)
    before = rec.read_bytes()
    lock = RecordLock.acquire(rec, create=False)  # the other --resume, mid-run
    try:
        with TestServer(ServerConfig(capacity_tokens=5000, **INSTANT)) as server:
            code, out, err = run(capsys, "measure", "pool", "--resume", rec, "--url", server.url, "--quiet")
            served = server.completions
    finally:
        lock.release()
    assert code == 2 and out == "" and served == 0
    assert err.count("\n") == 1 and "resuming" not in err  # refused before it says or sends anything
    assert err.startswith(f"servesize: the run record {rec} is in use by another run ({holder_words(os.getpid())})")
    assert rec.read_bytes() == before  # not a byte written
    with TestServer(ServerConfig(capacity_tokens=5000, **INSTANT)) as server:  # the lock released, the record resumes
        code, _, err = run(capsys, "measure", "pool", "--resume", rec, "--url", server.url, "--quiet")
    assert code == 0, err


HOLD = ("import sys; from servesize.measure.record import RecordLock; lock = RecordLock.acquire(sys.argv[1], create=False); "
        "print('locked', flush=True); sys.stdin.read()")


def test_a_resume_while_another_process_runs_on_the_record_names_that_process(tmp_path, capsys):
    rec = broken_pool_record(tmp_path, capsys)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(rec)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"  # the marker: it holds the lock now
        code, _, err = run(capsys, "measure", "sessions", "--resume", rec, "--quiet")  # the kind is not even read
        assert code == 2 and err.count("\n") == 1
        assert f"the run record {rec} is in use by another run ({holder_words(holder.pid)})" in err
    finally:
        holder.communicate("")  # stdin closed: it exits, and its lock dies with it
    RecordLock.acquire(rec, create=False).release()


def test_a_new_run_on_a_record_another_run_is_creating_is_refused(tmp_path, capsys):
    path = tmp_path / "new.jsonl"
    lock = RecordLock.acquire(path, create=True)  # the first run has just made the file, empty
    try:
        code, _, err = run(capsys, "measure", "pool", "--url", "http://127.0.0.1:9", "--record", path, "--quiet")
    finally:
        lock.release()
    assert code == 2 and err.count("\n") == 1 and "is in use by another run" in err
    assert path.read_bytes() == b""


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_record_that_is_not_a_regular_file_is_refused_without_waiting(tmp_path, capsys, kind):
    if kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)  # opening it to write would wait for a reader: O_NONBLOCK refuses instead
    else:
        path = pathlib.Path("/dev/full")  # every write fails: refused before anything is measured
        if not path.exists():
            pytest.skip("no /dev/full here")
    for argv in (["--record", path, "--url", "http://127.0.0.1:9"], ["--resume", path]):
        code, _, err = run(capsys, "measure", "pool", *argv, "--quiet")
        # --record is refused by the output check every command runs first; --resume by the record's own
        assert code == 2 and err.count("\n") == 1 and "not a regular file" in err and str(path) in err
