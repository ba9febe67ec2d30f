"""The book's files (appendix 37): the clone's copy, else one checked download into a cache."""

import functools
import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pooch
import pytest
import requests

from annotated import book_files
from annotated.book_files import CACHE_ENV, FILES_URL_ENV, book_path, book_ref, cached_book_path

ROOT = Path(__file__).resolve().parents[1]
NAME = "results/copy/results.json"


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    monkeypatch.setattr(pooch.core.time, "sleep", lambda seconds: None)  # pooch waits between tries


@pytest.fixture
def server(tmp_path, monkeypatch):
    """A copy of results/copy served on 127.0.0.1 as the repository's files; an empty cache."""
    served = tmp_path / "served"
    shutil.copytree(ROOT / "results/copy", served / "results/copy")
    handler = functools.partial(Quiet, directory=str(served))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv(FILES_URL_ENV, f"http://127.0.0.1:{httpd.server_port}/")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    yield served, tmp_path / "cache" / book_ref()
    httpd.shutdown()
    httpd.server_close()


def test_the_list_names_every_file_under_results_with_its_sum():
    done = subprocess.run([sys.executable, str(ROOT / "tools/book_files.py"), "--check"])
    assert done.returncode == 0, "annotated/book_files.json is out of date: run make export"
    listed = book_files.book_files()
    on_disk = {p.relative_to(ROOT).as_posix() for p in (ROOT / "results").rglob("*") if p.is_file()}
    assert set(listed) == on_disk


def test_inside_the_clone_the_repository_copy_is_used():
    assert book_files.clone_root() == ROOT
    assert book_path(NAME) == ROOT / NAME
    assert book_path("results/copy/") == ROOT / "results/copy"


def test_a_clone_s_file_that_differs_from_the_list_is_refused(tmp_path, monkeypatch):
    """A clone's copy is checked like a download: an edited file is named, not read."""
    clone = tmp_path / "clone"
    shutil.copytree(ROOT / "results/copy", clone / "results/copy")
    monkeypatch.setattr(book_files, "clone_root", lambda: clone)
    assert book_path(NAME) == clone / NAME
    (clone / NAME).write_text((ROOT / NAME).read_text().replace('"copy"', '"kopy"', 1))
    with pytest.raises(
        ValueError, match=r"results\.json is not the file this package was built with"
    ):
        book_path(NAME)
    with pytest.raises(ValueError, match="check out the version of the repository") as err:
        book_path("results/copy")
    assert "make" not in str(err.value)  # a reader's advice, not a maintainer's target


def test_outside_a_clone_a_file_is_downloaded_checked_and_cached(server, monkeypatch):
    served, cache = server
    monkeypatch.setattr(book_files, "clone_root", lambda: None)
    got = book_path(NAME)
    assert got == cache / NAME and got.read_bytes() == (ROOT / NAME).read_bytes()
    (served / NAME).unlink()  # a second call reads the cache, not the server
    assert book_path(NAME).read_bytes() == (ROOT / NAME).read_bytes()


def test_a_folder_brings_every_listed_file_under_it(server):
    _, cache = server
    folder = cached_book_path("results/copy")
    listed = {n for n in book_files.book_files() if n.startswith("results/copy/")}
    assert {p.relative_to(cache).as_posix() for p in folder.rglob("*") if p.is_file()} == listed


def test_a_changed_or_longer_file_is_refused_and_not_cached(server):
    served, cache = server
    (served / NAME).write_bytes(b"{}")
    with pytest.raises(ValueError, match=r"results/copy/results.json from http://127.0.0.1:\d+/"):
        cached_book_path(NAME)
    original = (ROOT / NAME).read_bytes()
    (served / NAME).write_bytes(original + b" ")  # the listed bytes and one more
    with pytest.raises(ValueError, match="not the file this package was built with"):
        cached_book_path(NAME)
    assert not (cache / NAME).exists() and not any(cache.parent.rglob("*.tmp"))


def test_a_damaged_cached_copy_is_fetched_again(server):
    _, cache = server
    cached_book_path(NAME)
    (cache / NAME).write_text("damaged")
    assert json.loads(cached_book_path(NAME).read_text())  # the listed file again


def test_an_unknown_name_says_which_names_there_are():
    with pytest.raises(
        ValueError,
        match=r"name='results/copy/notes.txt' is not one of the book's files.*results/copy",
    ):
        book_path("results/copy/notes.txt")
    with pytest.raises(ValueError, match="name='' is not one of"):
        book_path("")
    with pytest.raises(ValueError, match="is not one of"):
        book_path("../results/copy")  # names are the repository's, never relative to a notebook


def test_no_network_gives_one_line_that_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv(FILES_URL_ENV, "http://127.0.0.1:9/")  # the discard port: nothing answers
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    with pytest.raises(OSError) as err:
        cached_book_path(NAME)
    message = str(err.value)
    assert "\n" not in message and NAME in message and FILES_URL_ENV in message


def test_the_default_address_is_the_release_the_package_was_built_from(monkeypatch, tmp_path):
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert book_ref() == f"v{version}"
    seen = []
    monkeypatch.delenv(FILES_URL_ENV, raising=False)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))

    def refuse(url, *args, **kwargs):
        seen.append(url)
        raise requests.ConnectionError("offline")

    monkeypatch.setattr(requests, "get", refuse)  # what pooch downloads with
    with pytest.raises(OSError):
        cached_book_path(NAME)
    repository = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"][
        "Repository"
    ]
    slug = repository.removeprefix("https://github.com/")
    assert (
        seen == [f"https://raw.githubusercontent.com/{slug}/v{version}/{NAME}"] * 3
    )  # two retries
