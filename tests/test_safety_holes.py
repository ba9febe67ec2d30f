"""The holes that a close reading of appendices 21 to 36 found (issue 43) and the Windows gaps of issue 39
(item 3): archives whose readers disagree, snapshots read unchecked, committed models that took any
tokenizer of their size, incomplete checkpoints, permissions and the umask, stale snapshot files,
one GPU for every torchrun process, an uncapped download, folders left by a failed evaluate, and
atomic writes without `os.fchmod`."""

import json
import os
import signal
import stat
import struct
import zipfile
from pathlib import Path

import pytest
import torch
from cli_helpers import SENTENCES, TINY, fails
from filelock import FileLock

from annotated.app import main
from annotated.data import save_tokenizer, train_tokenizer
from annotated.files import atomic_path, atomic_write, sha256_of
from annotated.model import make_model
from annotated.runs import remove_stale_temporaries, write_results
from annotated.runs.folder_lock import HOLDER, LOCK, run_lock
from annotated.runs.processes import start_runtime
from annotated.training import CHECKPOINT_FORMAT, Trainer, load_checkpoint, save_checkpoint
from annotated.training.model_file import load_model

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = [ROOT / "results" / "multi30k", ROOT / "results" / "multi30k-en-de"]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture
def tiny_checkpoint(tmp_path) -> Path:
    torch.manual_seed(0)
    path = tmp_path / "tiny.pt"
    save_checkpoint(path, make_model(7, 7, n_layers=1, d_model=8, d_ff=16, n_heads=2), step=3)
    return path


def rezip(path: Path, out: Path, extra: list[tuple[str, bytes]]) -> None:
    """`path`'s members, stored as torch.save stores them, then the `extra` members after them."""
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
        for name, data in extra:
            dst.writestr(name, data)


# 1. Archives that two readers read differently


def test_a_member_listed_twice_is_refused(tiny_checkpoint, tmp_path):
    with zipfile.ZipFile(tiny_checkpoint) as z:
        pickle = next(n for n in z.namelist() if n.endswith("data.pkl"))
        decoy = z.read(pickle)
    crafted = tmp_path / "crafted.pt"
    with pytest.warns(UserWarning, match="Duplicate name"):  # zipfile itself warns the writer
        rezip(tiny_checkpoint, crafted, [(pickle, decoy)])
    with pytest.raises(ValueError) as err:
        load_checkpoint(crafted)
    assert str(err.value) == (
        f"{crafted} is not a valid archive: its member {pickle} is listed 2 times (the zip module "
        "would check one copy and torch.load read another); refused unread"
    )


def test_a_changed_byte_of_tensor_data_is_refused_though_torch_load_takes_it(tiny_checkpoint):
    data = bytearray(tiny_checkpoint.read_bytes())
    with zipfile.ZipFile(tiny_checkpoint) as z:
        member = next(i for i in z.infolist() if "/data/" in i.filename)
    name, extra = struct.unpack("<HH", data[member.header_offset + 26 : member.header_offset + 30])
    data[member.header_offset + 30 + name + extra] ^= 0xFF  # the tensor's first byte
    tiny_checkpoint.write_bytes(bytes(data))
    torch.load(tiny_checkpoint, weights_only=True)  # PyTorch's reader compares no CRC-32
    with pytest.raises(
        ValueError, match=rf"is damaged: {member.filename} does not match the checksum"
    ):
        load_checkpoint(tiny_checkpoint)


def test_a_member_without_its_header_is_refused(tiny_checkpoint, tmp_path):
    crafted = tmp_path / "overlap.pt"
    data = bytearray(tiny_checkpoint.read_bytes())
    with zipfile.ZipFile(tiny_checkpoint) as z:
        at, infos = z.start_dir, z.infolist()  # where the central directory starts
    for i, info in enumerate(infos[:2]):  # the second record: its member starts inside the first's
        assert data[at : at + 4] == b"PK\x01\x02"
        if i == 1:
            assert int.from_bytes(data[at + 42 : at + 46], "little") == info.header_offset
            data[at + 42 : at + 46] = (infos[0].header_offset + 64).to_bytes(4, "little")
        name, extra, comment = struct.unpack("<HHH", data[at + 28 : at + 34])
        at += 46 + name + extra + comment
    crafted.write_bytes(bytes(data))
    with pytest.raises(ValueError) as err:
        load_checkpoint(crafted)
    assert str(err.value) == (
        f"{crafted} is damaged: {infos[1].filename} cannot be read where the directory says (Bad "
        "magic number for file header); the file was altered after it was written (a disk or copy "
        "error, or crafted)"
    )


# 4. A dict with our format key and nothing else


def test_a_checkpoint_missing_entries_names_them(tmp_path):
    path = tmp_path / "format_only.pt"
    torch.save({"format": CHECKPOINT_FORMAT}, path)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path)
    assert str(err.value) == (
        f"{path} is not a complete checkpoint: missing 'config'; missing 'model'; missing "
        "'optimizer'; missing 'scheduler'; missing 'step'; missing 'rng'; missing 'extra'"
    )


def test_a_checkpoint_entry_of_the_wrong_type_is_named(tiny_checkpoint, tmp_path):
    state = torch.load(tiny_checkpoint, weights_only=True)
    state["step"], state["extra"] = "3", []
    path = tmp_path / "wrong_types.pt"
    torch.save(state, path)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path)
    assert str(err.value) == (
        f"{path} is not a complete checkpoint: 'step' holds str, expected int; "
        "'extra' holds list, expected dict"
    )


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda s: s.update(step=True), "its step must count updates (an int >= 0), got True"),
        (lambda s: s.update(step=-5), "its step must count updates (an int >= 0), got -5"),
        (
            lambda s: s.update(optimizer={"junk": 1}),
            "its saved states cannot be restored (KeyError",
        ),
        (
            lambda s: s["rng"].update(torch=torch.zeros(10, dtype=torch.uint8)),
            "its saved states cannot be restored (RuntimeError",
        ),
    ],
    ids=["step True", "step -5", "optimizer junk", "rng of the wrong size"],
)
def test_well_typed_but_crafted_entries_are_refused_in_one_line(tmp_path, change, says):
    """Entries of the right type but the wrong content: a ValueError naming the file, not a KeyError or
    RuntimeError from deep inside PyTorch (appendices review, section 2 item 3)."""
    torch.manual_seed(0)
    model = make_model(7, 7, n_layers=1, d_model=8, d_ff=16, n_heads=2)
    optimizer = torch.optim.Adam(model.parameters())
    save_checkpoint(tmp_path / "good.pt", model, optimizer, step=3)
    state = torch.load(tmp_path / "good.pt", weights_only=True)
    change(state)
    torch.save(state, tmp_path / "crafted.pt")
    with pytest.raises(ValueError) as err:
        load_checkpoint(tmp_path / "crafted.pt", model, optimizer)
    assert str(err.value).startswith(f"{tmp_path / 'crafted.pt'}: {says}"), err.value


# 2. Snapshots, read as checkpoints are


class Payload:  # a class that no snapshot holds: weights_only refuses to build it
    pass


def interrupted_copy_run(out: Path, monkeypatch) -> None:
    """A copy-task run stopped by Ctrl-C at update 6, whose checkpoint lists snapshot-4.pt."""
    update, done = Trainer.update, []

    def stopping(self, group):
        loss = update(self, group)
        done.append(loss)
        if len(done) == 6:
            signal.raise_signal(signal.SIGINT)
        return loss

    monkeypatch.setattr(Trainer, "update", stopping)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        args = ["train", "--task", "copy", *TINY, "--steps", "12", "--eval-every", "4"]
        code = main([*args, "--average", "3", "--eval-size", "8", "--out", str(out)])
    finally:
        signal.signal(signal.SIGINT, before)
    monkeypatch.setattr(Trainer, "update", update)
    assert code == 128 + signal.SIGINT and (out / "snapshot-4.pt").is_file()


BAD_SNAPSHOTS = {  # what a snapshot file holds (given this run's id), and what the refusal says
    "a list": (
        lambda run: [1, 2, 3],
        "is not a snapshot: expected a dict with keys ['run', 'step', 'weights'], got list",
    ),
    "an object": (
        lambda run: {"run": run, "step": 4, "weights": Payload()},
        "is not a snapshot: its pickle asks for",
    ),
    "no weights": (
        lambda run: {"run": run, "step": 4},
        "is not a complete snapshot: missing 'weights'",
    ),
    "another run": (
        lambda run: {"run": run + "-other", "step": 4, "weights": {}},
        "snapshot-4.pt belongs to another run",
    ),
}


@pytest.mark.parametrize("bad", BAD_SNAPSHOTS)
def test_a_bad_snapshot_stops_the_resume_in_one_line(capsys, tmp_path, monkeypatch, bad):
    out = tmp_path / "run"
    interrupted_copy_run(out, monkeypatch)
    capsys.readouterr()
    path = out / "snapshot-4.pt"
    content, says = BAD_SNAPSHOTS[bad]
    torch.save(content(torch.load(path, weights_only=True)["run"]), path)
    err = fails(capsys, ["train", "--resume", out])
    assert err.startswith("error: ") and says in err and "snapshot-4.pt" in err, err


def test_a_snapshot_of_another_model_is_refused(capsys, tmp_path, monkeypatch):
    out = tmp_path / "run"
    interrupted_copy_run(out, monkeypatch)
    capsys.readouterr()
    path = out / "snapshot-4.pt"
    saved = torch.load(path, weights_only=True)
    saved["weights"] = {k: torch.zeros(3) for k in saved["weights"]}  # right names, wrong shapes
    torch.save(saved, path)
    err = fails(capsys, ["train", "--resume", out])
    assert err.startswith(f"error: {path}: its weights do not fit the run's model (first: "), err


def test_stale_snapshot_temporaries_are_removed(tmp_path):
    (tmp_path / ".snapshot-4.pt.1a2b3c.tmp").write_bytes(b"half a snapshot")
    (tmp_path / "snapshot-4.pt").write_bytes(b"kept")
    assert remove_stale_temporaries(tmp_path) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot-4.pt"]


# 3. The committed models name their tokenizer


@pytest.mark.parametrize("folder", COMMITTED, ids=lambda p: p.name)
def test_the_committed_models_record_their_tokenizer(folder):
    extra = load_model(folder / "model_fp16.safetensors")[1]
    assert extra["tokenizer_sha256"] == sha256_of(folder / "tokenizer.json")
    assert extra["direction"] == ("en-de" if folder.name.endswith("en-de") else "de-en")


def test_a_committed_model_refuses_another_tokenizer_of_its_size(capsys, tmp_path):
    tokenizer = json.loads((COMMITTED[0] / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    a, b = "▁dog", "▁man"  # two subwords trade ids: the same size, other sentences
    vocab[a], vocab[b] = vocab[b], vocab[a]
    other = tmp_path / "tokenizer.json"
    other.write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    model = COMMITTED[0] / "model_fp16.safetensors"
    err = fails(capsys, ["translate", "--model", model, "--tokenizer", other, "Ein Hund."])
    assert f"{other} is not the tokenizer that the model in {model} was trained with" in err


# 7. Permissions, the umask, Windows' missing os.fchmod


def test_a_replaced_file_keeps_its_permissions_and_the_umask_is_left_alone(tmp_path, monkeypatch):
    if os.name != "posix":
        pytest.skip("Unix permissions")
    mask = os.umask(0o022)
    os.umask(mask)

    def no_umask(*args):
        raise AssertionError("the process-wide umask was changed")

    monkeypatch.setattr(os, "umask", no_umask)
    fresh = tmp_path / "fresh.json"
    atomic_write(fresh, lambda f: f.write(b"{}"))
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~mask
    kept = tmp_path / "private.pt"
    kept.write_bytes(b"old")
    kept.chmod(0o600)
    atomic_write(kept, lambda f: f.write(b"new"))
    with atomic_path(tmp_path / "private.pt") as tmp:
        tmp.write_bytes(b"newer")
    assert kept.read_bytes() == b"newer" and stat.S_IMODE(kept.stat().st_mode) == 0o600


def test_writes_need_no_fchmod_as_on_windows_before_python_3_13(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "fchmod", raising=False)
    atomic_write(tmp_path / "a.bin", lambda f: f.write(b"one"))
    atomic_write(tmp_path / "a.bin", lambda f: f.write(b"two"))  # replacing an existing file
    with atomic_path(tmp_path / "b.onnx") as tmp:
        tmp.write_bytes(b"graph")
    save_checkpoint(tmp_path / "c.pt", make_model(5, 5, n_layers=1, d_model=8, d_ff=16, n_heads=2))
    save_tokenizer(train_tokenizer(SENTENCES, vocab_size=60), tmp_path / "tokenizer.json")
    write_results(tmp_path / "results.json", {"bleu": 1.0})
    assert (tmp_path / "a.bin").read_bytes() == b"two" and (
        tmp_path / "b.onnx"
    ).read_bytes() == b"graph"
    assert load_checkpoint(tmp_path / "c.pt").step == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.bin",
        "b.onnx",
        "c.pt",
        "results.json",
        "tokenizer.json",
    ]


# 7. One GPU per torchrun process


def test_a_numbered_gpu_under_torchrun_is_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ValueError) as err:
        start_runtime("cuda:0")
    assert str(err.value) == (
        "--device cuda:0 would put all 2 processes that torchrun started on this machine on one "
        "GPU: pass --device cuda, and each takes the GPU of its LOCAL_RANK"
    )


# 7. A failed evaluate leaves no folders behind


def test_a_failed_evaluate_creates_no_folders(capsys, tmp_path):
    err = fails(
        capsys,
        [
            "evaluate",
            "--model",
            tmp_path / "missing.pt",
            "--results",
            tmp_path / "x" / "y" / "r.json",
            "--hypotheses",
            tmp_path / "h" / "i",
        ],
    )
    assert "missing.pt" in err and sorted(tmp_path.iterdir()) == []


def test_a_refused_train_removes_the_folders_its_checks_made(capsys, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    args = ["train", "--task", "copy", *TINY, "--steps", "2", "--out", out]
    with run_lock(out):  # another run holds the folder: refused after the output paths were checked
        err = fails(capsys, [*args, "--results", tmp_path / "b" / "c" / "r.json"])
    assert "is in use by another run" in err and sorted(tmp_path.iterdir()) == [out]


# Issue 39, item 3 and issue 51, item 2: the run-folder lock, one code path (filelock) on every system


def test_the_run_lock_refuses_a_second_run_naming_the_first_and_leaves_nothing(tmp_path):
    with run_lock(tmp_path):
        with pytest.raises(ValueError) as err, run_lock(tmp_path):
            raise AssertionError("two runs hold one folder")
        assert str(err.value).startswith(
            f"--out {tmp_path} is in use by another run (process {os.getpid()} on "
        )
    assert list(tmp_path.iterdir()) == []  # unlocked, the lock's file and its note removed
    with run_lock(tmp_path):  # free again
        assert (tmp_path / HOLDER).read_text().startswith(f"process {os.getpid()}")


def test_what_a_killed_run_left_does_not_hold_the_folder(tmp_path):
    (tmp_path / LOCK).write_text("")  # a run killed with kill -9: its files stay, unlocked
    (tmp_path / HOLDER).write_text("process 1 on elsewhere, since long ago")
    with run_lock(tmp_path):
        assert (tmp_path / HOLDER).read_text().startswith(f"process {os.getpid()} on ")
    assert list(tmp_path.iterdir()) == []


def test_a_holder_that_has_not_named_itself_yet_is_another_process(tmp_path):
    with FileLock(tmp_path / LOCK), pytest.raises(ValueError) as err, run_lock(tmp_path):
        raise AssertionError("two runs hold one folder")
    refused = f"--out {tmp_path} is in use by another run (another process): wait for it to end"
    assert str(err.value).startswith(refused)
