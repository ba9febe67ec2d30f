"""Untrusted checkpoints and tokenizers, and writes that meet a full disk (issue 29, items 3 to 7, and
the review of them): a crafted file is refused in one line before it costs memory or runs code, a
tokenizer of another run is refused, a failed write names the file and leaves the previous one whole,
and a failed lock lets the run folder go."""

import errno
import importlib
import io
import os
import shutil
import struct
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from cli_helpers import SENTENCES, TINY, fails

import annotated.app.multi30k_training as multi30k_training
import annotated.data.tokenizer_file as tokenizer_file
from annotated.app import main
from annotated.data import Pair, save_tokenizer, train_tokenizer
from annotated.files import atomic_write, sha256_of
from annotated.model import make_model
from annotated.runs import write_manifest
from annotated.runs.folder_lock import HOLDER, run_lock
from annotated.training import load_checkpoint, save_checkpoint
from annotated.training.model_file import load_model, save_model

checkpoint_module = importlib.import_module("annotated.training.checkpoint")
files_module = importlib.import_module("annotated.files")

OTHER_SENTENCES = [  # another run's data: a tokenizer of the same size with other subwords
    ("Drei Katzen schlafen auf dem Sofa.", "Three cats sleep on the sofa."),
    ("Ein Junge wirft einen roten Ball.", "A boy throws a red ball."),
    ("Die Sonne scheint über dem Meer.", "The sun shines over the sea."),
    ("Eine alte Frau kauft Brot.", "An old woman buys bread."),
] * 5
VOCAB = 60

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(SENTENCES, vocab_size=VOCAB)


@pytest.fixture(scope="module")
def other_tok(tok):
    other = train_tokenizer(OTHER_SENTENCES, vocab_size=VOCAB)
    assert other.get_vocab_size() == tok.get_vocab_size()  # only the subwords differ
    return other


def make_run(folder: Path, tok) -> Path:
    """A Multi30k-like run folder with an untrained tiny model, which records its tokenizer's SHA-256
    and its direction, as 'train' does."""
    folder.mkdir(parents=True, exist_ok=True)
    save_tokenizer(tok, folder / "tokenizer.json")
    extra = {"tokenizer_sha256": sha256_of(folder / "tokenizer.json"), "direction": "de-en"}
    V = tok.get_vocab_size()
    torch.manual_seed(0)
    model = make_model(
        V, V, shared_vocab=True, n_layers=1, d_model=16, d_ff=32, n_heads=2, max_len=80
    )
    save_checkpoint(folder / "checkpoint.pt", model, step=1, task="multi30k", run="r1", **extra)
    save_model(folder / "model.safetensors", model, step=1, task="multi30k", run="r1", **extra)
    write_manifest(folder, "r1", 1)
    return folder / "checkpoint.pt"


def resume(capsys, checkpoint):
    """`train --resume` on the checkpoint's folder: what reads a checkpoint that a user hands over."""
    code = main(["train", "--resume", str(checkpoint.parent), "--steps", "5"])
    out = capsys.readouterr()
    return code, out.out, out.err


def translate(capsys, checkpoint, *args):
    code = main(["translate", "--model", str(checkpoint), "--beam", "1", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- 3. A member that unpacks to more than the config can fill ----------------------------------


def with_blob(path: Path, blob_bytes: int) -> None:
    """Add a tensor of `blob_bytes` to the checkpoint's extras, its bytes never written: a sparse file,
    `blob_bytes` long but a few KB on disk, whose directory declares every member's true size."""
    state = torch.load(path, weights_only=True)
    state["extra"]["blob"] = torch.empty(blob_bytes, dtype=torch.uint8)  # never touched: no memory
    with torch.serialization.skip_data():  # the members' sizes, without writing their bytes
        torch.save(state, path)


def spy_on_loads(monkeypatch) -> list[dict]:
    """Record the keyword arguments of every torch.load call."""
    loads, real_load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(k) or real_load(*a, **k))
    return loads


def test_a_member_that_unpacks_past_what_the_config_fills_is_refused_unread(
    capsys, monkeypatch, tmp_path, tok
):
    ckpt = make_run(tmp_path / "run", tok)
    with_blob(ckpt, 2**27)  # 128 MiB of tensor data for a model of a few KB
    write_manifest(tmp_path / "run", "r1", 1)
    loads = spy_on_loads(monkeypatch)
    code, out, err = resume(capsys, ckpt)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert str(ckpt) in err and "unpack to 128 MiB" in err and "refused unread" in err
    assert all(k.get("map_location") == "meta" for k in loads)  # no tensor data was read


def rezipped(path: Path, pickle_bytes: bytes, pickle_compression: int) -> None:
    """Replace the checkpoint's data.pkl with `pickle_bytes`, stored with `pickle_compression`."""
    plain = path.with_suffix(".plain")
    path.rename(plain)
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            if info.filename.endswith("/data.pkl"):
                dst.writestr(info.filename, pickle_bytes, compress_type=pickle_compression)
            else:
                dst.writestr(info, src.read(info))
    plain.unlink()


def test_a_compressed_pickle_is_refused_unread(capsys, monkeypatch, tmp_path, tok):
    ckpt = make_run(tmp_path / "run", tok)
    # a list of a million empty dicts, a byte each: 1 MB that unpickles to 90 MB, deflated to 1 KB
    empty_dicts = b"\x80\x02](" + b"}" * 10**6 + b"e."
    rezipped(ckpt, empty_dicts, zipfile.ZIP_DEFLATED)
    assert ckpt.stat().st_size < len(empty_dicts) / 10  # deflate packs it a hundredfold
    write_manifest(tmp_path / "run", "r1", 1)
    loads = spy_on_loads(monkeypatch)
    code, out, err = resume(capsys, ckpt)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{ckpt} is not a checkpoint: its member" in err and "data.pkl is compressed" in err
    assert loads == []  # nothing was unpickled


def test_a_pickle_larger_than_a_long_runs_is_refused_unread(capsys, monkeypatch, tmp_path, tok):
    ckpt = make_run(tmp_path / "run", tok)
    state = torch.load(ckpt, weights_only=True)
    # far more than any run's curves pickle to (0.3 MiB at their cap): loaded
    state["extra"]["curve"] = "x" * 6_000_000
    torch.save(state, ckpt)
    assert load_checkpoint(ckpt, restore_rng=False).extra["curve"] == "x" * 6_000_000
    state["extra"]["curve"] = "x" * 20 * 2**20  # 20 MiB, stored as it is: refused
    torch.save(state, ckpt)
    loads = spy_on_loads(monkeypatch)
    assert resume(capsys, ckpt)[0] == 2
    assert loads == []  # the 20 MiB pickle was refused before torch.load
    with pytest.raises(ValueError, match=r"its pickle unpacks to 20 MiB.*refused unread"):
        load_checkpoint(ckpt)


def test_an_archive_of_too_many_members_is_refused_before_its_directory_is_read(
    monkeypatch, tmp_path
):
    # 100,000 empty members: a 9 MB file whose directory costs 1.4 s and 57 MB to list (measured)
    path = tmp_path / "many.pt"
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(100_000):
            archive.writestr(f"many/data/{i}", b"")
    listed = []
    monkeypatch.setattr(zipfile.ZipFile, "infolist", lambda self: listed.append(1) or [])
    with pytest.raises(
        ValueError,
        match=r"many\.pt is not a checkpoint: its directory takes 5\.\d MiB, more than the 4 MiB "
        r"that 16,384 members fill; refused unread",
    ):
        load_checkpoint(path)
    assert listed == []  # refused from the end record alone


def test_a_checkpoint_replaced_while_it_is_checked_is_read_from_the_one_checked(
    monkeypatch, tmp_path
):
    model = make_model(5, 5, n_layers=1, d_model=8, d_ff=8, n_heads=2, max_len=20)
    save_checkpoint(tmp_path / "checkpoint.pt", model, step=1)
    save_checkpoint(tmp_path / "newer.pt", model, step=2)
    checked_config = checkpoint_module._checked_config

    def replaced_meanwhile(*args):  # the run saves its next checkpoint between checks and load
        cfg = checked_config(*args)
        os.replace(tmp_path / "newer.pt", tmp_path / "checkpoint.pt")
        return cfg

    with monkeypatch.context() as m:
        m.setattr(checkpoint_module, "_checked_config", replaced_meanwhile)
        assert load_checkpoint(tmp_path / "checkpoint.pt", restore_rng=False).step == 1
    assert load_checkpoint(tmp_path / "checkpoint.pt", restore_rng=False).step == 2  # replaced


# ---- 4. A tokenizer of another run ---------------------------------------------------------------


def test_a_tokenizer_of_another_run_is_refused(capsys, tmp_path, tok, other_tok):
    ckpt = make_run(tmp_path / "run", tok)
    ckpt = ckpt.with_name("model.safetensors")  # what translate reads
    save_tokenizer(other_tok, tmp_path / "other.json")
    code, out, err = translate(capsys, ckpt, "--tokenizer", tmp_path / "other.json", "Ein Hund.")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{tmp_path / 'other.json'} is not the tokenizer that the model in {ckpt}" in err
    code, out, err = translate(capsys, ckpt, "Ein Hund.")  # its own tokenizer: translated
    assert code == 0 and out.count("\n") == 1 and err == ""


def test_a_tokenizer_is_compared_by_its_hash_before_it_is_parsed(capsys, tmp_path, tok):
    ckpt = make_run(tmp_path / "run", tok)
    ckpt = ckpt.with_name("model.safetensors")  # what translate reads
    junk = tmp_path / "junk.json"
    junk.write_text('{"not": "a tokenizer"}')  # parsing it would fail: the hash refuses it first
    code, out, err = translate(capsys, ckpt, "--tokenizer", junk, "Ein Hund.")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{junk} is not the tokenizer that the model in {ckpt} was trained with" in err
    assert "SHA-256 differs" in err


def test_a_tokenizer_file_over_the_cap_is_refused_unread(capsys, tmp_path, tok):
    ckpt = make_run(tmp_path / "run", tok)
    ckpt = ckpt.with_name("model.safetensors")  # what translate reads
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(tokenizer_file.TOKENIZER_MAX_BYTES + 1)  # a sparse file: no disk space used
    code, out, err = translate(capsys, ckpt, "--tokenizer", huge, "Ein Hund.")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    cap = f"{tokenizer_file.TOKENIZER_MAX_BYTES:,}"
    assert f"{huge} is {tokenizer_file.TOKENIZER_MAX_BYTES + 1:,} bytes, more than the {cap}" in err


@pytest.mark.parametrize("missing", ["tokenizer_sha256", "direction", "task"])
def test_a_model_file_that_does_not_say_what_it_was_trained_for_is_refused(
    capsys, tmp_path, tok, missing
):
    """Nothing was released before 'train' recorded these: a file without one is refused, not guessed."""
    path = make_run(tmp_path / "run", tok).with_name("model.safetensors")
    model, info = load_model(path)
    info.pop(missing)
    save_model(path, model, **info)
    write_manifest(tmp_path / "run", "r1", 1)
    code, out, err = translate(capsys, path, "Ein Hund.")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"error: {path} does not record its {missing}: a Multi30k model file records" in err


@pytest.fixture
def small_multi30k(monkeypatch):
    """Multi30k replaced by 20 sentence pairs: 'train --task multi30k' in about a second."""
    pairs = [Pair(*p) for p in SENTENCES]
    monkeypatch.setattr(
        multi30k_training, "load_multi30k", lambda split, data_dir=None, direction="de-en": pairs
    )


def test_train_records_its_tokenizer_and_resume_refuses_another(
    capsys, tmp_path, small_multi30k, other_tok
):
    out, half = tmp_path / "run", tmp_path / "half.safetensors"
    args = ["train", "--steps", "2", "--vocab-size", VOCAB, "--no-test", *TINY, "--out", out]
    assert main([str(a) for a in [*args, "--export-half", half]]) == 0
    recorded = sha256_of(out / "tokenizer.json")
    assert (
        load_checkpoint(out / "checkpoint.pt", restore_rng=False).extra["tokenizer_sha256"]
        == recorded
    )
    for path in (out / "model.safetensors", half):
        assert load_model(path)[1]["tokenizer_sha256"] == recorded
    capsys.readouterr()
    save_tokenizer(other_tok, out / "tokenizer.json")  # another run's tokenizer, same size
    err = fails(capsys, ["train", "--resume", out, "--steps", "3"])
    assert (
        f"{out / 'tokenizer.json'} is not the tokenizer that the model in {out / 'checkpoint.pt'}"
        in err
    )


# ---- 5. A pickle that asks for code ---------------------------------------------------------------


class _MakesAFolder:
    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):  # unpickling would call os.mkdir(path)
        return (os.mkdir, (str(self.path),))


def test_a_pickle_that_asks_for_code_is_refused_in_one_line(capsys, tmp_path, tok):
    ckpt = make_run(tmp_path / "run", tok)
    marker = tmp_path / "ran"
    torch.save({"format": "annotated.training/1", "extra": _MakesAFolder(marker)}, ckpt)
    code, out, err = resume(capsys, ckpt)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{ckpt} is not a checkpoint: its pickle asks for" in err and "mkdir" in err
    assert (
        "weights_only" not in err and not marker.exists()
    )  # nothing of PyTorch's advice, nothing run


# ---- 6. An export that fails leaves the previous one ----------------------------------------------


@pytest.mark.parametrize(
    "failure, code",
    [(OSError(errno.ENOSPC, "No space left on device"), 2), (KeyboardInterrupt(), 130)],
)
def test_a_failed_export_leaves_the_previous_one(capsys, monkeypatch, tmp_path, tok, failure, code):
    pytest.importorskip("onnx")
    import annotated.app.onnx_export as onnx_export

    ckpt, out = make_run(tmp_path / "run", tok).with_name("model.safetensors"), tmp_path / "page"
    assert main(["export-onnx", "--model", str(ckpt), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == [
        "decoder_step.onnx",
        "encoder.onnx",
        "tokenizer.json",
        "translator.json",
    ]
    store = onnx_export.store_exact_float16

    def half_written(path):  # the disk fills (or Ctrl-C comes) while the float16 copy is written
        store(path)
        Path(path).write_bytes(Path(path).read_bytes()[:1000])
        raise failure

    monkeypatch.setattr(onnx_export, "store_exact_float16", half_written)
    capsys.readouterr()
    assert main(["export-onnx", "--model", str(ckpt), "--out", str(out)]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    if code == 2:
        assert "could not write" in err and "the disk is full" in err and str(out) in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing new, nothing cut


# ---- 7. A full disk while training ---------------------------------------------------------------

TORCH_FULL = "[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0"


@pytest.mark.parametrize(
    "failure",
    [OSError(errno.ENOSPC, "No space left on device"), RuntimeError(TORCH_FULL)],
    ids=["ENOSPC", "torch-zip-writer"],
)
def test_a_full_disk_names_the_file_and_what_was_kept(capsys, monkeypatch, tmp_path, failure):
    real_save, saves = torch.save, []

    def disk_fills(obj, f, *args, **kwargs):  # the second checkpoint meets a full disk
        if isinstance(obj, dict) and "format" in obj:  # a checkpoint, written to a temporary file
            saves.append(obj["step"])
            if len(saves) == 2:
                f.write(bytes(64))
                raise failure
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", disk_fills)
    # torch's writer loses the errno: the free space tells (what a full disk reports)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=2**30, free=0))
    out = tmp_path / "run"
    args = ["train", "--task", "copy", *TINY, "--steps", "4", "--save-every", "2", "--out", out]
    err = fails(capsys, args)
    path = out / "checkpoint.pt"
    assert err.startswith(f"error: could not write {path}: the disk is full"), err
    assert f"{path} keeps update 2" in err and f"--resume {out}" in err
    assert load_checkpoint(path, restore_rng=False).step == 2 and temporaries(out) == []


def test_other_failed_writes_keep_their_own_error(tmp_path):
    def refuses(f):
        raise PermissionError(errno.EACCES, "Permission denied")

    with pytest.raises(PermissionError):  # not a full disk: the error as it came
        atomic_write(tmp_path / "a.json", refuses)
    assert list(tmp_path.iterdir()) == []


def test_writes_do_only_what_windows_allows(monkeypatch, tmp_path):
    fcntl = pytest.importorskip("fcntl")
    real_fsync, real_open = os.fsync, os.open

    def windows_fsync(fd):  # Windows flushes only a file opened for writing
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY:
            raise OSError(errno.EBADF, "Bad file descriptor")
        real_fsync(fd)

    def windows_open(path, flags, *args):  # and opens no folder as a file
        if os.path.isdir(path):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "fsync", windows_fsync)
    with files_module.atomic_path(tmp_path / "model.onnx") as tmp:
        tmp.write_bytes(b"graph")
    assert (tmp_path / "model.onnx").read_bytes() == b"graph" and temporaries(tmp_path) == []
    monkeypatch.setattr(os, "open", windows_open)
    with monkeypatch.context() as m:  # only around the call: pathlib picks its class by os.name
        m.setattr(os, "name", "nt")
        files_module._sync_folder(tmp_path)


@pytest.mark.parametrize("fails", ["fsync", "replace"])
def test_a_lock_whose_note_cannot_be_written_lets_the_folder_go(monkeypatch, tmp_path, fails):

    def disk_full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, fails, disk_full)
        with pytest.raises(OSError, match=f"could not write .*{HOLDER}: the disk is full"):
            with run_lock(tmp_path):
                raise AssertionError("the lock was held without its note")
    assert list(tmp_path.iterdir()) == []  # neither the lock's file nor a half-written note
    with run_lock(tmp_path):  # the same process takes it again: the first one's lock was let go
        assert (tmp_path / HOLDER).read_text().startswith(f"process {os.getpid()}")


# ---- review of appendices 21-37 ------------------------------------------------------------------


def test_a_model_file_moved_out_of_its_run_folder_translates(capsys, tmp_path, small_multi30k):
    """Factual error 1: a model that 'train' wrote is handed on with its tokenizer; its run folder
    is checked only where it is one (a manifest or a checkpoint beside the model)."""
    out, moved = tmp_path / "run", tmp_path / "moved"
    args = ["train", "--steps", "2", "--vocab-size", VOCAB, "--no-test", *TINY, "--out", out]
    assert main([str(a) for a in args]) == 0
    moved.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        shutil.copy(out / name, moved / name)
    capsys.readouterr()
    code, text, err = translate(capsys, moved / "model.safetensors", "Ein Hund.")
    assert code == 0 and text.count("\n") == 1 and err == "", err
    (out / "manifest.json").unlink()  # the run folder of a run that did not finish
    err = fails(capsys, ["translate", "--model", out / "model.safetensors", "Ein Hund."])
    assert err == (
        f"error: {out / 'model.safetensors'}: its folder has no manifest.json, so the run that wrote "
        f"it did not finish (continue it with: python -m annotated train --resume {out})"
    )


def test_the_kind_of_file_is_named_before_the_tokenizer_is_looked_for(capsys, tmp_path, tok):
    """Weak check 13: a copy-task model or a checkpoint given to translate, with no tokenizer beside."""
    copy_run = tmp_path / "copy"
    assert main([*"train --task copy --steps 2".split(), *TINY, "--out", str(copy_run)]) == 0
    capsys.readouterr()
    err = fails(capsys, ["translate", "--model", copy_run / "model.safetensors", "x"])
    assert "holds a model trained on the copy task" in err, err
    err = fails(capsys, ["translate", "--model", copy_run / "checkpoint.pt", "x"])
    assert "is not a safetensors model file: it is a torch.save checkpoint" in err, err


def lying_archive(path: Path, members: int, declared: int) -> Path:
    """A tiny checkpoint with `members` empty members more, whose end record declares `declared`."""
    torch.manual_seed(0)
    save_checkpoint(path, make_model(5, 5, n_layers=1, d_model=8, d_ff=16, n_heads=2), step=0)
    good = path.read_bytes()
    buffer = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as src, zipfile.ZipFile(buffer, "w") as dst:
        for name in src.namelist():
            dst.writestr(name, src.read(name))
        for i in range(members):
            dst.writestr(f"archive/x{i}", b"")
    data = bytearray(buffer.getvalue())
    end = data.rfind(b"PK\x05\x06")
    data[end + 8 : end + 12] = struct.pack("<HH", declared, declared)
    path.write_bytes(bytes(data))
    return path


def test_the_member_cap_counts_the_directory_not_the_end_records_claim(monkeypatch, tmp_path):
    """Weak check 1: the zip module reads the directory by its size, whatever count the end record
    declares; counting the directory's own records stays cheap."""
    path = lying_archive(tmp_path / "lying.pt", 20_000, declared=10)
    listed = []
    monkeypatch.setattr(zipfile.ZipFile, "infolist", lambda self: listed.append(1) or [])
    started = time.perf_counter()
    with pytest.raises(ValueError) as err:
        load_checkpoint(path)
    assert time.perf_counter() - started < 1.0 and listed == []
    assert str(err.value).startswith(f"{path} is not a checkpoint: its archive lists 20,0")
    assert str(err.value).endswith(
        "members, more than the 16,384 any checkpoint needs; refused unread"
    )


def test_an_end_record_that_miscounts_the_directory_is_refused_in_one_line(tmp_path):
    path = lying_archive(tmp_path / "miscounted.pt", 3, declared=2)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path)
    message = str(err.value)
    assert message.startswith(
        f"{path} is damaged: its end record counts 2 members, but its directory lists "
    )
    assert "\n" not in message and "Could this error message be improved" not in message


def test_an_adam_moment_of_another_shape_is_refused_naming_the_file(tmp_path):
    """Weak check 4: it loaded, and failed at the first optimizer step deep in PyTorch."""
    torch.manual_seed(0)
    model = make_model(5, 5, n_layers=1, d_model=8, d_ff=16, n_heads=2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.tensor([[1, 2]]), torch.tensor([[1, 2]])).sum().backward()
    optimizer.step()
    save_checkpoint(tmp_path / "good.pt", model, optimizer, step=1)
    state = torch.load(tmp_path / "good.pt", weights_only=True)
    state["optimizer"]["state"][0]["exp_avg"] = torch.zeros(3)
    torch.save(state, tmp_path / "crafted.pt")
    ckpt = load_checkpoint(tmp_path / "crafted.pt")  # no optimizer yet: nothing to compare with
    with pytest.raises(ValueError) as err:
        ckpt.restore(torch.optim.Adam(ckpt.model.parameters()))
    assert str(err.value) == (
        f"{tmp_path / 'crafted.pt'}: its saved states cannot be restored (ValueError: the optimizer "
        f"state of parameter 0 holds exp_avg of shape (3,), but the parameter's shape is "
        f"{tuple(next(model.parameters()).shape)})"
    )
    with pytest.raises(ValueError, match=r"crafted\.pt: its saved states cannot be restored"):
        load_checkpoint(tmp_path / "crafted.pt", model, torch.optim.Adam(model.parameters()))


@pytest.mark.parametrize("cuda", [[1], [torch.zeros(3)], [torch.zeros(3, dtype=torch.uint8), "x"]])
def test_a_gpu_random_state_that_is_not_one_is_refused_on_any_machine(tmp_path, cuda):
    """Weak check 4: on a machine without a GPU the list was never looked at."""
    torch.manual_seed(0)
    save_checkpoint(
        tmp_path / "good.pt", make_model(5, 5, n_layers=1, d_model=8, d_ff=16, n_heads=2)
    )
    state = torch.load(tmp_path / "good.pt", weights_only=True)
    state["rng"]["cuda"] = cuda
    torch.save(state, tmp_path / "crafted.pt")
    with pytest.raises(ValueError) as err:
        load_checkpoint(tmp_path / "crafted.pt")
    assert str(err.value).startswith(
        f"{tmp_path / 'crafted.pt'}: its random states must be uint8 tensors, as PyTorch saves them; "
    ), err.value


def test_pytorchs_request_for_a_better_message_is_left_out(tmp_path):
    """A well-formed archive without the record torch.load reads first: PyTorch's own message, one
    line, without its "(Could this error message be improved? ...)"."""
    torch.manual_seed(0)
    save_checkpoint(
        tmp_path / "good.pt", make_model(5, 5, n_layers=1, d_model=8, d_ff=16, n_heads=2)
    )
    with (
        zipfile.ZipFile(tmp_path / "good.pt") as src,
        zipfile.ZipFile(tmp_path / "no_version.pt", "w") as dst,
    ):
        for name in src.namelist():
            if not name.endswith("/version"):
                dst.writestr(name, src.read(name))
    with pytest.raises(ValueError) as err:
        load_checkpoint(tmp_path / "no_version.pt")
    assert str(err.value) == (
        f"{tmp_path / 'no_version.pt'} could not be read as a checkpoint; RuntimeError: Expected "
        'hasRecord("version") to be true, but got false.'
    )
