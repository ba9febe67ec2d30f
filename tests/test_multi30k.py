"""Tests for annotated.multi30k: loading the Multi30k files, and downloading them with checksums."""

import gzip
import hashlib
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path

import pooch
import pytest

import annotated.data.multi30k as multi30k
from annotated.data import (
    MULTI30K_COMMIT,
    MULTI30K_ENV,
    MULTI30K_SHA256,
    MULTI30K_SIZES,
    MULTI30K_URL,
    Pair,
    load_multi30k,
    multi30k_path,
)


class Server(http.server.SimpleHTTPRequestHandler):
    """Serves `files` by name, the first `cut` tries dropped after `fail_after` bytes; logs the paths."""

    files: dict[str, bytes] = {}
    fail_after: int | None = None
    cut = 99
    requested: list[str] = []

    def do_GET(self):
        self.requested.append(self.path)
        name = self.path.rsplit("/", 1)[1]
        if name not in self.files:
            self.send_error(404)
            return
        data = self.files[name]
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        cut_off = self.fail_after is not None and len(self.requested) <= self.cut
        self.wfile.write(data[: self.fail_after] if cut_off else data)

    def log_message(self, *args):
        pass


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """No test may reach the internet: downloads go to a port where nothing listens, or to `serve`."""
    monkeypatch.setattr(multi30k, "MULTI30K_URL", "http://127.0.0.1:9/")
    monkeypatch.setattr(pooch.core.time, "sleep", lambda seconds: None)  # pooch waits between tries


def serve(
    monkeypatch, files: dict[str, bytes], fail_after: int | None = None, cut: int = 99
) -> list[str]:
    """Serve files by name on 127.0.0.1 as the dataset's repository; returns the list of requested paths."""
    attributes = {"files": files, "fail_after": fail_after, "cut": cut, "requested": []}
    handler = type("Handler", (Server,), attributes)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setattr(multi30k, "MULTI30K_URL", f"http://127.0.0.1:{httpd.server_port}/raw/")
    return handler.requested


# --- loading from a folder ------------------------------------------------------------------


def test_splits_have_the_published_sizes(data_dir):
    for split, size in MULTI30K_SIZES.items():
        pairs = load_multi30k(split, data_dir)
        assert len(pairs) == size
        assert all(isinstance(p, Pair) and p.src and p.tgt for p in pairs)
        assert all(p.src == p.src.strip() and "\n" not in p.src + p.tgt for p in pairs)
    first = load_multi30k("train", data_dir)[0]
    assert first.src == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    assert first.tgt == "Two young, White males are outside near many bushes."


def test_environment_variable_names_the_folder(data_dir, monkeypatch, tmp_path):
    monkeypatch.setenv(MULTI30K_ENV, str(data_dir))
    pairs = load_multi30k("val", cache_dir=tmp_path)  # no download: nothing listens at the address
    assert pairs == load_multi30k("val", data_dir)
    assert not any(tmp_path.iterdir())


def test_a_corrupted_local_copy_raises(data_dir, tmp_path):
    for name in MULTI30K_SHA256:
        shutil.copy(data_dir / name, tmp_path / name)
    bad = tmp_path / "val.en.gz"
    data = bytearray(bad.read_bytes())
    data[-10] ^= 0xFF
    bad.write_bytes(bytes(data))
    actual = hashlib.sha256(data).hexdigest()
    with pytest.raises(ValueError, match=f"val.en.gz.*{MULTI30K_SHA256['val.en.gz']}.*{actual}"):
        load_multi30k("val", tmp_path)
    assert bad.read_bytes() == bytes(data)  # a given copy is reported, never replaced
    assert len(load_multi30k("test_2016_flickr", tmp_path)) == 1000  # the intact files still load


def test_a_missing_file_and_a_bad_split_raise(tmp_path):
    with pytest.raises(FileNotFoundError, match="val.de.gz"):
        load_multi30k("val", tmp_path)
    with pytest.raises(ValueError, match="split must be one of .*got split='dev'"):
        load_multi30k("dev", tmp_path)
    with pytest.raises(ValueError, match="name must be one of"):
        multi30k_path("train.fr.gz", tmp_path)


# --- downloading ----------------------------------------------------------------------------


def test_the_address_is_pinned_to_a_commit():
    assert MULTI30K_URL == (
        f"https://raw.githubusercontent.com/multi30k/dataset/{MULTI30K_COMMIT}/data/task1/raw/"
    )
    assert re.fullmatch(r"[0-9a-f]{40}", MULTI30K_COMMIT)  # a commit, never a branch that moves


def test_download_caches_verified_files_and_reuses_them(data_dir, monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    files = {name: (data_dir / name).read_bytes() for name in MULTI30K_SHA256}
    requested = serve(monkeypatch, files)
    pairs = load_multi30k("val", cache_dir=tmp_path)
    assert pairs == load_multi30k("val", data_dir)
    assert requested == [f"/raw/val.{lang}.gz" for lang in ("de", "en")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["val.de.gz", "val.en.gz"]
    load_multi30k("val", cache_dir=tmp_path)
    assert len(requested) == 2  # the verified cache is used, nothing downloaded again


def test_a_corrupted_cache_file_is_downloaded_again(data_dir, monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    requested = serve(monkeypatch, {"val.de.gz": (data_dir / "val.de.gz").read_bytes()})
    (tmp_path / "val.de.gz").write_bytes(b"garbage")
    path = multi30k_path("val.de.gz", cache_dir=tmp_path)
    assert len(requested) == 1
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MULTI30K_SHA256["val.de.gz"]


def test_wrong_bytes_are_retried_then_raise_and_leave_no_file(monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    wrong = gzip.compress(b"Ein Hund.\n")
    requested = serve(monkeypatch, {"val.de.gz": wrong})
    expected, actual = MULTI30K_SHA256["val.de.gz"], hashlib.sha256(wrong).hexdigest()
    with pytest.raises(ValueError) as err:
        load_multi30k("val", cache_dir=tmp_path / "cache")
    message = str(err.value)
    assert message.startswith("downloaded val.de.gz from http://127.0.0.1:") and "\n" not in message
    assert "is not the Multi30k original: SHA256 hash" in message
    assert expected in message and actual in message
    assert len(requested) == 3  # the first try and two more
    assert (
        list((tmp_path / "cache").iterdir()) == []
    )  # neither the file nor a temporary one is left


def test_a_broken_download_is_retried_then_raises_and_leaves_no_file(monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    payload = os.urandom(3 << 20)  # several chunks, the connection drops after the first
    monkeypatch.setitem(MULTI30K_SHA256, "val.de.gz", hashlib.sha256(payload).hexdigest())
    requested = serve(monkeypatch, {"val.de.gz": payload}, fail_after=1 << 20)
    with pytest.raises(OSError, match="downloading val.de.gz from http://127.0.0.1:.* failed"):
        multi30k_path("val.de.gz", data_dir=None, cache_dir=tmp_path)
    assert len(requested) == 3 and list(tmp_path.iterdir()) == []


def test_a_download_that_fails_once_is_retried(data_dir, monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    good = (data_dir / "val.de.gz").read_bytes()
    requested = serve(monkeypatch, {"val.de.gz": good}, fail_after=len(good) // 2, cut=1)
    path = multi30k_path("val.de.gz", data_dir=None, cache_dir=tmp_path)
    assert len(requested) == 2 and path.read_bytes() == good  # cut off once, whole the second time


def test_no_network_is_an_error_that_names_the_file_and_the_address(monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    with pytest.raises(
        OSError, match="downloading val.de.gz from http://127.0.0.1:9/val.de.gz failed"
    ):
        multi30k_path("val.de.gz", cache_dir=tmp_path)


def test_the_book_states_the_download_size_of_the_files(data_dir):
    """Chapter 16 and appendix 29 say how much a reader downloads: the files' total, in MB."""
    total = sum((data_dir / name).stat().st_size for name in MULTI30K_SHA256) / 1e6
    for name in ("16_translation.ipynb", "29_multi30k_data.ipynb"):
        path = Path(__file__).resolve().parents[1] / "notebooks" / name
        text = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
        stated = [float(mb) for mb in re.findall(r"([\d.]+) MB", text)]
        assert stated and all(mb == round(total, 1) for mb in stated), (name, stated, total)


def test_downloads_go_under_the_package_cache_variable(data_dir, monkeypatch, tmp_path):
    """One variable for every download of the package (review of appendices 21-37, item 6)."""
    from annotated.book_files import CACHE_ENV

    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    serve(monkeypatch, {name: (data_dir / name).read_bytes() for name in MULTI30K_SHA256})
    assert load_multi30k("val") == load_multi30k("val", data_dir)
    assert sorted(p.name for p in (tmp_path / "cache" / "multi30k").iterdir()) == [
        "val.de.gz",
        "val.en.gz",
    ]
