"""servesize.datafiles: every data table read through one function, parsed from TOML once per content."""

from __future__ import annotations

import json
import tomllib

import pytest

from servesize import datafiles

TABLES = sorted(p.name for p in datafiles.DATA.glob("*.toml"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(datafiles.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def data_table(tmp_path, monkeypatch, text: str) -> None:
    """A data folder of one table, t.toml, holding ``text``, in place of the package's."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "t.toml").write_text(text)
    monkeypatch.setattr(datafiles, "DATA", data)


def parses(monkeypatch) -> list[str]:
    """Count the TOML parses from here on."""
    calls: list[str] = []
    real = tomllib.loads

    def counted(text, **kw):
        calls.append(text[:20])
        return real(text, **kw)

    monkeypatch.setattr(tomllib, "loads", counted)
    return calls


@pytest.mark.parametrize("name", TABLES)
def test_a_table_read_from_its_kept_copy_is_the_table_the_toml_holds(cache, name):
    truth = tomllib.loads((datafiles.DATA / name).read_text(encoding="utf-8"))
    first = datafiles.table(name)
    second = datafiles.table(name)
    assert first == second == truth
    assert first is not second  # a new dict each call: no caller can change another's
    assert len(list(cache.glob(f"{name}.*.json"))) == 1


def test_the_second_read_parses_no_toml_and_an_edited_table_is_parsed_again(cache, monkeypatch, tmp_path):
    data_table(tmp_path, monkeypatch, 'a = 1\n[b]\nc = "x"\n')
    calls = parses(monkeypatch)
    assert datafiles.table("t.toml") == {"a": 1, "b": {"c": "x"}}
    assert datafiles.table("t.toml") == {"a": 1, "b": {"c": "x"}}
    assert len(calls) == 1
    data_table(tmp_path, monkeypatch, 'a = 2\n[b]\nc = "x"\n')
    assert datafiles.table("t.toml") == {"a": 2, "b": {"c": "x"}}
    assert len(calls) == 2


def test_a_broken_or_foreign_copy_is_passed_over_and_written_anew(cache, monkeypatch, tmp_path):
    data_table(tmp_path, monkeypatch, "a = 1\n")
    datafiles.table("t.toml")
    (kept,) = cache.glob("t.toml.*.json")
    for bad in ('{"a": ', "[1, 2]", "\xff\xfe"):
        kept.write_text(bad, encoding="latin-1")
        assert datafiles.table("t.toml") == {"a": 1}
        assert json.loads(kept.read_text()) == {"a": 1}


def test_a_table_json_cannot_hold_exactly_is_never_kept(cache, monkeypatch, tmp_path):
    data_table(tmp_path, monkeypatch, "when = 2026-12-04\nx = nan\n")
    calls = parses(monkeypatch)
    first = datafiles.table("t.toml")
    assert str(first["when"]) == "2026-12-04"
    datafiles.table("t.toml")
    assert len(calls) == 2 and not list(cache.glob("*.json"))


def test_no_copy_is_kept_when_the_user_asks_for_none_or_the_folder_cannot_be_written(monkeypatch, tmp_path):
    monkeypatch.setenv(datafiles.CACHE_ENV, "")
    assert datafiles.cache_dir() is None
    assert datafiles.table("gpus.toml")["gpu"]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(datafiles.CACHE_ENV, str(blocker / "cache"))  # under a file: mkdir fails
    assert datafiles.table("gpus.toml")["gpu"]
    assert blocker.read_text() == ""


def test_without_the_variable_the_copies_go_under_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv(datafiles.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert datafiles.cache_dir() == tmp_path / "xdg" / "servesize"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert datafiles.cache_dir() == tmp_path / "home" / ".cache" / "servesize"


def test_every_data_table_is_read_through_the_one_function():
    """No module of the package parses a data table itself (workload files, a user's own, are not data tables)."""
    import pathlib

    src = pathlib.Path(datafiles.__file__).parent
    readers = [str(p.relative_to(src)) for p in src.rglob("*.py")
               if "tomllib.load" in p.read_text(encoding="utf-8")]
    assert sorted(readers) == ["datafiles.py", "workload/files.py"]
