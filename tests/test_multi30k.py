"""Tests for annotated.multi30k: loading the Multi30k files, and downloading them with checksums."""

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import urllib.request
from pathlib import Path

import pytest

from annotated.data import (
    MULTI30K_BYTES,
    MULTI30K_ENV,
    MULTI30K_SHA256,
    MULTI30K_SIZES,
    MULTI30K_URL,
    Pair,
    download_multi30k_file,
    load_multi30k,
    multi30k_path,
)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """No test may reach the internet; download tests install their own fake opener."""

    def refuse(url, *args, **kwargs):
        raise AssertionError(f"a test tried to open {url}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def serve(monkeypatch, files: dict[str, bytes], fail_after: int | None = None) -> list[str]:
    """Replace urlopen by a fake that serves files by name; returns the list of requested URLs."""
    requested = []

    class Response(io.BytesIO):
        def read(self, size=-1):
            if fail_after is not None and self.tell() >= fail_after:
                raise ConnectionResetError("connection reset by peer")
            return super().read(min(size, fail_after or size) if size > 0 else size)

    def fake_urlopen(url, timeout=None):
        requested.append(url)
        return Response(files[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    return requested


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
    pairs = load_multi30k("val", cache_dir=tmp_path)  # no download: urlopen would raise
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


def test_download_caches_verified_files_and_reuses_them(data_dir, monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    files = {name: (data_dir / name).read_bytes() for name in MULTI30K_SHA256}
    requested = serve(monkeypatch, files)
    pairs = load_multi30k("val", cache_dir=tmp_path)
    assert pairs == load_multi30k("val", data_dir)
    assert requested == [MULTI30K_URL.format(name=f"val.{lang}.gz") for lang in ("de", "en")]
    assert requested[0] == (
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/val.de.gz"
    )
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


def test_wrong_bytes_raise_and_leave_no_file(monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    wrong = gzip.compress(b"Ein Hund.\n")
    serve(monkeypatch, {"val.de.gz": wrong})
    expected, actual = MULTI30K_SHA256["val.de.gz"], hashlib.sha256(wrong).hexdigest()
    with pytest.raises(ValueError, match=f"val.de.gz.*expected sha256 {expected}, got {actual}"):
        load_multi30k("val", cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []  # neither the file nor a .part is left


def test_a_broken_download_raises_and_leaves_no_file(monkeypatch, tmp_path):
    payload = os.urandom(3 << 20)  # several chunks, the connection drops after the first
    monkeypatch.setitem(MULTI30K_SHA256, "val.de.gz", hashlib.sha256(payload).hexdigest())
    monkeypatch.setitem(MULTI30K_BYTES, "val.de.gz", len(payload))  # and its size
    serve(monkeypatch, {"val.de.gz": payload}, fail_after=1 << 20)
    with pytest.raises(OSError, match="downloading val.de.gz from https://.*failed"):
        download_multi30k_file("val.de.gz", tmp_path / "val.de.gz")
    assert list(tmp_path.iterdir()) == []


def test_download_verifies_against_the_checksum_table(monkeypatch, tmp_path):
    payload = b"any bytes at all"  # runs without the data: the table is patched to match
    monkeypatch.setitem(MULTI30K_SHA256, "val.de.gz", hashlib.sha256(payload).hexdigest())
    serve(monkeypatch, {"val.de.gz": payload})
    download_multi30k_file("val.de.gz", tmp_path / "sub" / "val.de.gz")
    assert (tmp_path / "sub" / "val.de.gz").read_bytes() == payload
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["val.de.gz"]


def test_the_book_states_the_download_size_of_the_files(data_dir):
    """Chapter 16 and appendix 29 say how much a reader downloads: the files' total, in MB."""
    total = sum((data_dir / name).stat().st_size for name in MULTI30K_SHA256) / 1e6
    for name in ("16_translation.ipynb", "29_multi30k_data.ipynb"):
        path = Path(__file__).resolve().parents[1] / "notebooks" / name
        text = "".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
        stated = [float(mb) for mb in re.findall(r"([\d.]+) MB", text)]
        assert stated and all(mb == round(total, 1) for mb in stated), (name, stated, total)
