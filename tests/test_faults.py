"""Fault injection (issue 11): every wrong input and every interruption ends with an exit code, one
line on standard error and nothing half-written on disk; an interrupted run resumes to the very end
that an uninterrupted run reaches."""

import io
import json
import math
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from cli_helpers import COPY, SENTENCES, fails, listing

import annotated.runs.folder as runs
from annotated.app import main
from annotated.data import save_tokenizer, train_tokenizer
from annotated.files import atomic_write, sha256_of
from annotated.model import make_model
from annotated.runs import write_manifest, write_results
from annotated.training import Trainer, load_checkpoint, save_checkpoint
from annotated.training.model_file import load_model, save_model

ROOT = Path(__file__).resolve().parents[1]
NO_CUDA = not torch.cuda.is_available()


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def temporaries(folder: Path) -> list[str]:
    return [p for p in listing(folder) if p.endswith(".tmp") or ".probe." in p]


# ---- A tiny Multi30k-like run folder: checkpoint, tokenizer, manifest ----------------------------


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(SENTENCES, vocab_size=80)


def make_run(folder: Path, tok, run_id="r1", **config) -> Path:
    """Write what 'train' leaves for a Multi30k run, with an untrained tiny model."""
    folder.mkdir(parents=True, exist_ok=True)
    V = tok.get_vocab_size()
    torch.manual_seed(0)
    dims = {"n_layers": 1, "d_model": 16, "d_ff": 32, "n_heads": 2, "max_len": 80, **config}
    model = make_model(V, V, shared_vocab=True, **dims)
    save_tokenizer(tok, folder / "tokenizer.json")
    use_with = {"direction": "de-en", "tokenizer_sha256": sha256_of(folder / "tokenizer.json")}
    save_checkpoint(
        folder / "checkpoint.pt", model, step=1, task="multi30k", run=run_id, **use_with
    )
    save_model(folder / "model.safetensors", model, step=1, task="multi30k", run=run_id, **use_with)
    write_manifest(folder, run_id, 1)
    return folder / "model.safetensors"


@pytest.fixture
def run_dir(tmp_path, tok):
    make_run(tmp_path / "run", tok)
    return tmp_path / "run"


def translate(capsys, monkeypatch, checkpoint, *args, stdin: bytes | None = None):
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(["translate", "--model", str(checkpoint), "--beam", "1", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- 1. Checked before the work -----------------------------------------------------------------


def test_out_that_is_a_file(capsys, tmp_path):
    (tmp_path / "taken").write_text("mine")
    err = fails(capsys, [*COPY, "--steps", "1", "--out", tmp_path / "taken"])
    assert "--out" in err and "is a file, expected a folder" in err
    assert listing(tmp_path) == ["taken"] and (tmp_path / "taken").read_text() == "mine"


def test_out_that_cannot_be_created(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    err = fails(capsys, [*COPY, "--steps", "1", "--out", tmp_path / "file" / "run"])
    assert "--out" in err and "cannot write there" in err
    assert listing(tmp_path) == ["file"]


def test_results_that_is_a_folder(capsys, tmp_path):
    (tmp_path / "results").mkdir()
    out = tmp_path / "out"
    args = [*COPY, "--steps", "1", "--out", out, "--results", tmp_path / "results"]
    err = fails(capsys, args)
    assert "--results" in err and "is a folder, expected a file name" in err
    assert listing(tmp_path) == ["results"]  # the --out folder created for the check is gone


def test_export_half_that_is_a_folder(capsys, tmp_path):
    args = ["train", "--steps", "1", "--out", tmp_path / "o", "--export-half", tmp_path]
    assert "--export-half" in fails(capsys, args)
    assert listing(tmp_path) == []


def test_unknown_test_split_before_training(capsys, tmp_path):
    err = fails(capsys, ["train", "--steps", "1", "--test-split", "bogus", "--out", tmp_path / "o"])
    assert "--test-split must be one of" in err and "'bogus'" in err
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    "device, message",
    [("banana", "--device must be cpu, cuda or cuda:N, got 'banana'"), ("cuda:x", "--device")]
    + [("cuda", "no usable CUDA GPU")] * NO_CUDA,
)
def test_bad_device(capsys, tmp_path, run_dir, device, message):
    assert message in fails(
        capsys, [*COPY, "--steps", "1", "--device", device, "--out", tmp_path / "o"]
    )
    model = run_dir / "model.safetensors"
    assert message in fails(capsys, ["translate", "--model", model, "--device", device, "x"])
    assert not (tmp_path / "o").exists()


def test_evaluate_results_checked_before_scoring(capsys, run_dir, tmp_path):
    args = ["evaluate", "--model", run_dir / "model.safetensors", "--results", tmp_path]
    assert "--results" in fails(capsys, args) and "is a folder" in fails(capsys, args)
    assert "--split must be one of" in fails(
        capsys, ["evaluate", "--model", run_dir / "model.safetensors", "--split", "nope"]
    )


def test_a_budget_that_ends_before_the_first_update(capsys, tmp_path):
    err = fails(capsys, [*COPY, "--minutes", "1e-9", "--out", tmp_path / "o"])
    assert "before the first update" in err and "raise --minutes" in err
    assert listing(tmp_path) == []  # no empty folder, no untrained model


# ---- 2. Save often, stop cleanly, resume ----------------------------------------------------


def same_weights(a: Path, b: Path) -> bool:
    load = (
        (lambda p: load_model(p)[0])
        if a.suffix == ".safetensors"
        else (lambda p: load_checkpoint(p, restore_rng=False).model)
    )
    x, y = load(a).state_dict(), load(b).state_dict()
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="SIGTERM ends a Windows process outright")
def test_sigterm_saves_and_resume_ends_where_an_uninterrupted_run_ends(capsys, tmp_path):
    """A real process, stopped by SIGTERM mid-run, then resumed: the same end, bit for bit."""
    args = [*COPY, "--steps", "24", "--eval-every", "8", "--log-every", "1", "--average", "2"]
    args += ["--eval-size", "16"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    proc = subprocess.Popen(
        [sys.executable, "-m", "annotated", *args, "--out", str(cut)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    for line in proc.stdout:
        if line.startswith("step 12 "):  # mid-run, between two evaluations
            proc.send_signal(signal.SIGTERM)
            break
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.count("\n") == 1 and err.startswith("interrupted by SIGTERM at update")
    assert f"python -m annotated train --resume {cut}" in err
    stopped = load_checkpoint(cut / "checkpoint.pt", restore_rng=False)
    assert 12 <= stopped.step < 24 and temporaries(cut) == []
    assert not (cut / "results.json").exists()  # a stopped run has no results yet
    assert main([*args, "--out", str(whole)]) == 0  # the same run without interruption
    capsys.readouterr()
    assert main(["train", "--resume", str(cut)]) == 0
    assert f"resuming at update {stopped.step}" in capsys.readouterr().out
    assert listing(cut) == listing(whole) == [
        "averaged.safetensors", "checkpoint.pt", "manifest.json", "model.safetensors", "results.json"
    ]  # fmt: skip
    assert same_weights(cut / "checkpoint.pt", whole / "checkpoint.pt")
    assert same_weights(cut / "averaged.safetensors", whole / "averaged.safetensors")
    a, b = (json.loads((d / "results.json").read_text()) for d in (whole, cut))
    assert a["train_curve"] == b["train_curve"] and a["run"] != b["run"]
    assert [e[2:] for e in a["heldout"]["curve"]] == [e[2:] for e in b["heldout"]["curve"]]
    assert a["heldout"]["exact_match_averaged"] == b["heldout"]["exact_match_averaged"]


def test_sigint_in_process_saves_once_and_stops(capsys, tmp_path, monkeypatch):
    update = Trainer.update

    def interrupted_at_7(self, group):
        loss = update(self, group)
        if len(calls) == 6:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C while update 7 runs
        calls.append(loss)
        return loss

    calls = []
    monkeypatch.setattr(Trainer, "update", interrupted_at_7)
    # Python's own Ctrl-C handler, whatever the test runner installed (pytest-xdist's workers ignore
    # SIGINT), so that the check below sees the command put back exactly what it found.
    runner_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        err = fails(
            capsys, [*COPY, "--steps", "20", "--eval-every", "5", "--out", tmp_path], code=130
        )
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers put back
    finally:
        signal.signal(signal.SIGINT, runner_handler)
    assert err.startswith("interrupted by SIGINT at update 7: saved")
    assert load_checkpoint(tmp_path / "checkpoint.pt", restore_rng=False).step == 7
    assert listing(tmp_path) == [
        "checkpoint.pt",
        "manifest.json",
        "model.safetensors",
        "snapshot-5.pt",
    ]


def test_periodic_checkpoints(tmp_path, monkeypatch):
    saved = []
    save = runs.RunFolder.save
    monkeypatch.setattr(
        runs.RunFolder, "save", lambda self, *a: (saved.append(a[3]), save(self, *a))
    )
    assert main([*COPY, "--steps", "9", "--save-every", "4", "--out", str(tmp_path)]) == 0
    assert saved == [4, 8, 9]  # every 4 updates, and the end


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--d-model", "30", "--n-heads", "4"], "d_model"),  # 30 is not divisible by 4
        (["--n-heads", "5"], "n_heads"),  # the copy model's d_model 32 is not divisible by 5
    ],
)
def test_a_refused_model_option_leaves_the_run_folder_as_it_was(capsys, tmp_path, options, named):
    out = tmp_path / "run"
    assert main([*COPY, "--steps", "2", "--out", str(out)]) == 0
    capsys.readouterr()

    def contents() -> dict:
        return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()}

    before = contents()
    assert named in fails(capsys, [*COPY, "--steps", "2", *options, "--out", out])
    assert contents() == before  # every byte, and no file rewritten with the same bytes


def test_resume_checks(capsys, tmp_path, run_dir):
    assert "no checkpoint.pt there" in fails(capsys, ["train", "--resume", tmp_path])
    assert main([*COPY, "--steps", "2", "--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    err = fails(capsys, ["train", "--resume", tmp_path / "a", "--lr-factor", "3"])
    assert "--lr-factor 3.0 differs from its 0.5" in err
    err = fails(capsys, ["train", "--resume", tmp_path / "a", "--task", "multi30k"])
    assert "--task multi30k differs from its 'copy'" in err
    assert "was not saved by 'train'" in fails(capsys, ["train", "--resume", run_dir])


# ---- 3. Safe writes -----------------------------------------------------------------------------


def test_atomic_write_leaves_the_old_file_and_no_temporary_on_failure(tmp_path):
    target = tmp_path / "results.json"
    target.write_text("old")

    def half(f):
        f.write(b"new, but only half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, half)
    assert listing(tmp_path) == ["results.json"] and target.read_text() == "old"
    with pytest.raises(IsADirectoryError):
        atomic_write(tmp_path, lambda f: None)


def test_writes_never_follow_a_planted_link(tmp_path, tok):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    for name in ("results.json", "checkpoint.pt", "tokenizer.json"):
        (tmp_path / name).symlink_to(victim)
    write_results(tmp_path / "results.json", {"a": 1})
    save_checkpoint(
        tmp_path / "checkpoint.pt", make_model(5, 5, n_layers=1, d_model=8, d_ff=8, n_heads=2)
    )
    save_tokenizer(tok, tmp_path / "tokenizer.json")
    assert victim.read_text() == "precious"
    assert not any(
        (tmp_path / n).is_symlink() for n in ("results.json", "checkpoint.pt", "tokenizer.json")
    )
    assert temporaries(tmp_path) == []


def test_a_new_run_removes_stale_temporaries(capsys, tmp_path):
    (tmp_path / ".checkpoint.pt.abc123.tmp").write_bytes(b"x" * 100)  # a killed save's
    assert main([*COPY, "--steps", "1", "--out", str(tmp_path)]) == 0
    assert "removed the temporary files" in capsys.readouterr().out
    assert temporaries(tmp_path) == []


def test_a_folder_mixing_two_runs_is_detected(capsys, monkeypatch, tmp_path, tok):
    make_run(tmp_path / "old", tok, run_id="old")
    make_run(tmp_path / "new", tok, run_id="new")
    os.replace(tmp_path / "new" / "model.safetensors", tmp_path / "old" / "model.safetensors")
    code, _, err = translate(capsys, monkeypatch, tmp_path / "old" / "model.safetensors", "x")
    assert code == 2 and "mixes files of two runs" in err and err.count("\n") == 1
    (tmp_path / "old" / "manifest.json").unlink()  # a run killed before its first manifest
    code, _, err = translate(capsys, monkeypatch, tmp_path / "old" / "model.safetensors", "x")
    assert code == 2 and "did not finish" in err and "--resume" in err


# ---- 4. Checked loads -----------------------------------------------------------------------


def damaged(path: Path) -> None:
    """Overwrite 4 KB inside the largest tensor's data, as a bad disk or copy would."""
    with zipfile.ZipFile(path) as archive:
        member = max(archive.infolist(), key=lambda i: i.file_size)
        offset = member.header_offset + 30 + len(member.filename) + 64  # past its local header
    data = bytearray(path.read_bytes())
    data[offset : offset + min(4096, member.file_size - 64)] = os.urandom(
        min(4096, member.file_size - 64)
    )
    path.write_bytes(bytes(data))


def rewrite(path: Path, change) -> None:
    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(state, path)


@pytest.mark.parametrize(
    "fault, message",
    [
        (damaged, "does not match the checksum (CRC-32)"),
        (lambda p: rewrite(p, lambda s: s["model"].clear()), "holds weights for 0 encoder layers"),
        (
            lambda p: rewrite(p, lambda s: s["model"]["generator.bias"].fill_(math.nan)),
            "NaN or infinite weights",
        ),
        (lambda p: rewrite(p, lambda s: s["config"].update(max_len=10**9)), "asks for"),
        (lambda p: rewrite(p, lambda s: s["config"].update(n_layers=100_000)), "n_layers=100000"),
        (lambda p: rewrite(p, lambda s: s["config"].update(d_model=32)), "do not fit the model"),
    ],
)
def test_damaged_checkpoints_are_refused(run_dir, fault, message):
    ckpt = run_dir / "checkpoint.pt"
    fault(ckpt)
    with pytest.raises(ValueError) as err:
        load_checkpoint(ckpt, restore_rng=False)
    said = str(err.value)
    assert "\n" not in said and message in said and str(ckpt) in said


def test_a_model_of_another_task_is_refused_by_translate(capsys, monkeypatch, run_dir):
    model, info = load_model(run_dir / "model.safetensors")
    save_model(run_dir / "model.safetensors", model, **{**info, "task": "copy"})
    write_manifest(run_dir, "r1", 1)
    code, out, err = translate(capsys, monkeypatch, run_dir / "model.safetensors", "Ein Hund.")
    assert code == 2 and out == "" and err.count("\n") == 1 and "trained on the copy task" in err


def test_wrong_tokenizers_are_refused(capsys, monkeypatch, run_dir, tmp_path):
    ckpt = run_dir / "model.safetensors"
    (tmp_path / "junk.json").write_text('{"not": "a tokenizer"}')
    code, _, err = translate(capsys, monkeypatch, ckpt, "--tokenizer", tmp_path / "junk.json", "x")
    assert code == 2 and "is not the tokenizer that the model in" in err and err.count("\n") == 1
    model, info = load_model(ckpt)  # a model that records the junk's hash: parsed, and refused
    junk_sha256 = sha256_of(tmp_path / "junk.json")
    save_model(tmp_path / "junk.safetensors", model, **{**info, "tokenizer_sha256": junk_sha256})
    junk_model = tmp_path / "junk.safetensors"
    code, _, err = translate(
        capsys, monkeypatch, junk_model, "--tokenizer", tmp_path / "junk.json", "x"
    )
    assert code == 2 and "is not a tokenizer file" in err and err.count("\n") == 1
    small = train_tokenizer(SENTENCES, vocab_size=40)
    save_tokenizer(small, tmp_path / "small.json")
    small_sha256 = sha256_of(tmp_path / "small.json")  # a model that records it, of another size
    save_model(tmp_path / "small.safetensors", model, **{**info, "tokenizer_sha256": small_sha256})
    small_model, small_json = tmp_path / "small.safetensors", tmp_path / "small.json"
    code, _, err = translate(capsys, monkeypatch, small_model, "--tokenizer", small_json, "x")
    assert code == 2 and f"has {small.get_vocab_size()} tokens" in err and "different runs" in err


# ---- 5. A run that diverges stops; results are strict JSON ------------------------------------


def test_a_diverging_run_stops_and_keeps_the_last_good_checkpoint(capsys, tmp_path, monkeypatch):
    update = Trainer.update
    calls = []

    def nan_at_7(*args):
        loss = update(*args)
        calls.append(loss)
        return math.nan if len(calls) == 7 else loss

    monkeypatch.setattr(Trainer, "update", nan_at_7)
    err = fails(capsys, [*COPY, "--steps", "20", "--save-every", "3", "--out", tmp_path], code=3)
    assert err.startswith("error: training diverged: loss nan at update 7")
    assert "keeps update 6, the last good one" in err
    assert load_checkpoint(tmp_path / "checkpoint.pt", restore_rng=False).step == 6
    assert listing(tmp_path) == [  # no results of a NaN model
        "checkpoint.pt",
        "manifest.json",
        "model.safetensors",
    ]


def test_a_huge_learning_rate_stops_cleanly(capsys, tmp_path):
    err = fails(capsys, [*COPY, "--steps", "30", "--lr-factor", "1e30", "--out", tmp_path], code=3)
    assert "training diverged" in err and "lower --lr-factor" in err
    assert not (tmp_path / "results.json").exists() and temporaries(tmp_path) == []


def test_a_decay_that_ends_before_the_peak_is_refused(capsys, tmp_path):
    out = tmp_path / "run"
    err = fails(
        capsys, [*COPY, "--steps", "5", "--warmup", "100", "--decay-to", "100", "--out", out]
    )
    assert (
        err
        == "error: --decay-to must be above --warmup (the rate falls after its peak), got 100 and 100"
    )
    assert not out.exists()  # refused before the run's folder was made


def test_results_are_strict_json(tmp_path):
    write_results(tmp_path / "r.json", {"loss": math.nan, "curve": [(1, math.inf)], "ok": 1.5})

    def refuse(name):
        raise ValueError(f"not strict JSON: {name}")

    data = json.loads((tmp_path / "r.json").read_text(), parse_constant=refuse)
    assert data == {"loss": None, "curve": [[1, None]], "ok": 1.5}


# ---- 6. One-line errors, resource limits, standard input ---------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", str(10**9)], "lower --batch-size"),
        (["--eval-size", str(10**9)], "lower --eval-size"),
    ],
)
def test_sizes_that_cannot_fit(capsys, tmp_path, args, message):
    err = fails(capsys, [*COPY, "--steps", "1", *args, "--out", tmp_path / "o"])
    assert message in err and "GiB" in err
    assert listing(tmp_path) == []


def test_max_tokens_that_cannot_fit(capsys, tmp_path):
    err = fails(
        capsys, ["train", "--steps", "1", "--max-tokens", str(10**12), "--out", tmp_path / "o"]
    )
    assert "lower --max-tokens" in err and listing(tmp_path) == []


def test_beam_wider_than_the_vocabulary(capsys, monkeypatch, run_dir):
    code, out, err = translate(
        capsys, monkeypatch, run_dir / "model.safetensors", "x", "--beam", "100000"
    )
    assert code == 2 and out == "" and "--beam must be at most the vocabulary size" in err


def test_out_of_memory_names_what_to_lower(capsys, tmp_path, monkeypatch):
    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(Trainer, "update", no_memory)
    err = fails(capsys, [*COPY, "--steps", "2", "--out", tmp_path])
    assert err.startswith("error: out of memory") and "lower --batch-size" in err


def test_unexpected_errors_are_one_line_unless_debug(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(Trainer, "update", lambda *a: 1 / 0)
    err = fails(capsys, [*COPY, "--steps", "2", "--out", tmp_path])
    assert "ZeroDivisionError" in err and "--debug" in err
    with pytest.raises(ZeroDivisionError):
        main([*COPY, "--steps", "2", "--out", str(tmp_path), "--debug"])


def test_bad_stdin_lines_are_reported_and_the_others_translated(capsys, monkeypatch, run_dir):
    long = " ".join(["Hund"] * 40)  # over the tiny model's max_len of 80 minus 51
    stdin = b"Ein Hund.\n\xff\xfe bad bytes\n\n" + long.encode() + b"\nEine Frau.\n"
    code, out, err = translate(capsys, monkeypatch, run_dir / "model.safetensors", stdin=stdin)
    assert code == 1
    lines = out.split("\n")[:-1]
    assert len(lines) == 5 and lines[1] == lines[2] == lines[3] == ""  # lined up with the input
    problems = err.splitlines()
    assert len(problems) == 2 and "Traceback" not in err
    assert problems[0].startswith("error: line 2: not UTF-8 text")
    assert problems[1].startswith("error: line 4:") and "more than the 29" in problems[1]


def test_an_empty_sentence_has_an_empty_translation(capsys, monkeypatch, run_dir):
    code, out, err = translate(capsys, monkeypatch, run_dir / "model.safetensors", "")
    assert (code, out, err) == (0, "\n", "")


# ---- 7. The library's public functions refuse bad input by name ---------------------------------


def test_library_rejects_bad_inputs_by_name():
    from annotated.decoding import beam_search, greedy_decode, length_penalty
    from annotated.model import MultiHeadAttention, PositionalEncoding, attention

    x = torch.randn(1, 2, 8)
    with pytest.raises(TypeError, match="query must be a floating-point torch.Tensor, got list"):
        attention(x.tolist(), x, x)
    with pytest.raises(TypeError, match="query, key and value must have one dtype"):
        attention(x.double(), x, x)
    # the layers trust the batches the model hands them; they check how they are built
    with pytest.raises(ValueError, match="d_model must be a positive int, got 8.0"):
        MultiHeadAttention(8.0, 2)
    with pytest.raises(ValueError, match="sequence length 11 exceeds max_len=10"):
        PositionalEncoding(8, 0.0, max_len=10)(torch.randn(1, 11, 8))
    with pytest.raises(ValueError, match="length must be >= 0"):
        length_penalty(-10, 0.6)
    model = make_model(7, 9, n_layers=1, d_model=8, d_ff=8, n_heads=2, max_len=20).eval()
    src = torch.tensor([[3, 4, 5]])
    ids = {"bos_id": 1, "eos_id": 2, "pad_id": 0}
    with pytest.raises(
        ValueError,
        match=r"pad_id must be an int in \[0, 8\] \(an id of the target vocabulary\), got 9",
    ):
        greedy_decode(model, src, None, 5, **{**ids, "pad_id": 9})
    with pytest.raises(
        ValueError, match="max_new_tokens must each be at most the model's max_len=20"
    ):
        greedy_decode(model, src, None, 10**9, **ids)
    for decode_ in (
        lambda s: greedy_decode(model, s, None, 5, **ids),
        lambda s: beam_search(model, s, None, 2, **ids),
    ):
        with pytest.raises(ValueError, match="src must hold at least one sentence, got B=0"):
            decode_(src[:0])


# ---- 8. The two test gaps: both attention paths for every flag; different vocabularies ---------


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("nan", [None, "query", "key"])
def test_both_attention_paths_agree(scale, masked, nan):
    from annotated.model import MultiHeadAttention

    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.5).eval()  # dropout is off in eval mode on both paths
    mha.scale = scale
    q, kv = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    if nan == "query":
        q[0, 1, 3] = math.nan
    elif nan == "key":
        kv[1, 2, 0] = math.nan
    mask = (
        torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0]], dtype=torch.bool)[:, None, None, :]
        if masked
        else None
    )
    fast = mha(q, kv, kv, mask)
    slow, _ = mha(q, kv, kv, mask, need_weights=True)
    torch.testing.assert_close(fast, slow, equal_nan=True)
    assert torch.equal(fast.isnan(), slow.isnan())
    if nan == "query":
        assert fast[0, 1].isnan().all() and not fast[1].isnan().any()


def test_unscaled_attention_differs_from_scaled():
    from annotated.model import MultiHeadAttention

    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.0).eval()
    q = torch.randn(1, 3, 8) * 3
    scaled = mha(q, q, q)
    mha.scale = False
    for need_weights in (False, True):  # the fast path must honour scale=False too
        out = mha(q, q, q, need_weights=need_weights)
        assert not torch.allclose(out[0] if need_weights else out, scaled)


def test_a_model_with_different_source_and_target_vocabularies():
    torch.manual_seed(0)
    model = make_model(11, 17, n_layers=1, d_model=8, d_ff=16, n_heads=2, dropout=0.0).eval()
    assert model.src_embed.lut.weight.shape == (11, 8) and model.tgt_embed.lut.weight.shape == (
        17,
        8,
    )
    src, tgt = torch.randint(1, 11, (2, 5)), torch.tensor([[1, 16, 12, 5], [15, 2, 13, 11]])
    logits = model(src, tgt, None, None)
    assert logits.shape == (2, 4, 17)
    memory = model.encode(src, None)
    with torch.no_grad():  # the encoder reads the source embedding only...
        model.tgt_embed.lut.weight.add_(1.0)
        assert torch.equal(model.encode(src, None), memory)
        changed = model(src, tgt, None, None)
        assert not torch.allclose(changed, logits)  # ...and the decoder the target one
        model.src_embed.lut.weight.add_(1.0)
        assert not torch.equal(model.encode(src, None), memory)
    with pytest.raises(ValueError, match="vocab_size=11"):
        model(tgt + 11, tgt, None, None)  # source ids >= src_vocab are refused, not looked up


def test_loss_and_batching_reject_bad_sizes():
    from annotated.data import token_batches
    from annotated.training import FastLabelSmoothingLoss

    loss = FastLabelSmoothingLoss(5, 0)
    with pytest.raises(
        ValueError, match=r"target: token ids must lie in \[0, vocab_size=5\), got ids from 1 to 7"
    ):
        loss(torch.randn(1, 2, 5), torch.tensor([[1, 7]]))
    with pytest.raises(ValueError, match="max_tokens must be a positive int, got 10.5"):
        token_batches([([1, 2], [3])], max_tokens=10.5)


def test_the_model_refuses_lists_and_masks_that_hide_everything():
    model = make_model(7, 9, n_layers=1, d_model=8, d_ff=8, n_heads=2).eval()
    src = torch.tensor([[3, 4, 5]])
    with pytest.raises(TypeError, match="src must be a torch.Tensor of token ids, got list"):
        model([[3, 4, 5]], src, None, None)
    with pytest.raises(TypeError, match="src must be a torch.Tensor of token ids, got ndarray"):
        model.encode(src.numpy())
    inverted = torch.zeros(1, 1, 1, 3, dtype=torch.bool)  # ~ of a batch without padding
    with pytest.raises(ValueError, match="src_mask hides every key from every query"):
        model(src, src, inverted, None)
