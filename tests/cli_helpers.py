"""What the command-line tests share: a tiny model's options, a few sentence pairs, one-line failures."""

from pathlib import Path

import torch

from annotated.app import main

TINY = "--n-layers 1 --d-model 16 --d-ff 32 --n-heads 2".split()  # a model that trains in a moment
COPY = ["train", "--task", "copy", *TINY]
MULTI30K = [
    "train",
    "--steps",
    "1",
    "--vocab-size",
    "300",
    "--no-test",
    *TINY,
]  # one update of Multi30k
SENTENCES = [  # German-English pairs for a tokenizer and a Multi30k-like run folder
    ("Ein Hund läuft.", "A dog runs."),
    ("Eine Frau liest ein Buch.", "A woman reads a book."),
    ("Zwei Kinder spielen im Park.", "Two children play in the park."),
    ("Ein Mann fährt Fahrrad.", "A man rides a bike."),
] * 5


def fails(capsys, args, code=2) -> str:
    """Run main(args); check the exit code and that stderr is exactly one line; return that line."""
    assert main([str(a) for a in args]) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def listing(folder: Path) -> list[str]:
    """Every file and folder under `folder`, hidden ones (a lock, temporary files) included."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def multi30k_run(out: Path, data: Path, *options: str) -> Path:
    """A finished one-update Multi30k run of the tiny model in `out`, trained on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main([*MULTI30K, *options, "--data-dir", str(data), "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(before)
    return out
