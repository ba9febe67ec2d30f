"""Both directions of Multi30k: a run records its direction, and what reads the model follows it."""

import json
import os
from pathlib import Path

import pytest
import torch
from cli_helpers import MULTI30K, TINY, fails, multi30k_run

from annotated.app import main
from annotated.app.inference import load_for_inference
from annotated.data.multi30k import direction_name, load_multi30k
from annotated.training.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "multi30k"
GERMAN_ENGLISH = (
    ROOT / "results" / "multi30k" / "model_fp16.safetensors"
)  # saved before the option existed


def need_data() -> None:
    if not (DATA / "train.en.gz").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"the Multi30k files are missing from {DATA}")
        pytest.skip(f"no Multi30k files in {DATA}")


@pytest.fixture(scope="module")
def en_de_run(tmp_path_factory):
    need_data()
    return multi30k_run(tmp_path_factory.mktemp("en-de"), DATA, "--direction", "en-de")


def test_a_split_in_either_direction():
    need_data()
    de_en, en_de = load_multi30k("val", DATA), load_multi30k("val", DATA, direction="en-de")
    assert [(p.tgt, p.src) for p in de_en] == [tuple(p) for p in en_de]
    assert en_de[0].src.startswith("A group of men")  # English first
    assert direction_name("en-de") == "English->German"
    with pytest.raises(
        ValueError, match=r"direction must be one of \['de-en', 'en-de'\], got direction='de-fr'"
    ):
        load_multi30k("val", DATA, direction="de-fr")


@pytest.mark.slow
def test_the_run_records_its_direction(en_de_run):
    results = json.loads((en_de_run / "results.json").read_text())
    assert results["task"] == "multi30k en-de" and results["training"]["direction"] == "en-de"
    ckpt = load_checkpoint(en_de_run / "checkpoint.pt", restore_rng=False)
    assert ckpt.extra["direction"] == "en-de"
    assert (
        load_for_inference(
            str(en_de_run / "model.safetensors"), None, torch.device("cpu")
        ).direction
        == "en-de"
    )


def test_evaluate_scores_the_direction_it_was_trained_for(en_de_run, capsys):
    report, hyps = en_de_run / "eval.json", en_de_run / "hypotheses"
    command = [
        "evaluate",
        "--model",
        en_de_run / "model.safetensors",
        "--split",
        "val",
        "--limit",
        "2",
    ]
    assert (
        main(
            [
                str(a)
                for a in (
                    *command,
                    "--beam",
                    "1",
                    "--data-dir",
                    DATA,
                    "--results",
                    report,
                    "--hypotheses",
                    hyps,
                )
            ]
        )
        == 0
    )
    capsys.readouterr()
    result = json.loads(report.read_text())
    english = [p.src for p in load_multi30k("val", DATA, direction="en-de")[:2]]
    assert result["direction"] == "en-de"
    assert [
        s["source"] for s in result["greedy"]["samples"]
    ] == english  # read English, wrote German
    assert sorted(p.name for p in hyps.iterdir()) == ["val.greedy.de"]


@pytest.mark.parametrize("command", ["translate", "evaluate", "export-onnx"])
def test_a_flag_that_contradicts_the_checkpoint_is_refused(en_de_run, capsys, tmp_path, command):
    extra = {
        "translate": ["Ein Hund."],
        "evaluate": ["--limit", "1"],
        "export-onnx": ["--out", tmp_path / "x"],
    }
    args = [
        command,
        "--model",
        en_de_run / "model.safetensors",
        "--direction",
        "de-en",
        *extra[command],
    ]
    line = fails(capsys, args)
    assert line == (
        f"error: --direction de-en asks for German->English, but the model in "
        f"{en_de_run / 'model.safetensors'} translates English->German (en-de)"
    )
    assert not (tmp_path / "x").exists()


def test_a_checkpoint_saved_before_the_option_translates_german_to_english(capsys):
    assert load_for_inference(str(GERMAN_ENGLISH), None, torch.device("cpu")).direction == "de-en"
    line = fails(capsys, ["translate", "--model", GERMAN_ENGLISH, "--direction", "en-de", "A dog."])
    assert "asks for English->German" in line and "translates German->English (de-en)" in line


@pytest.mark.parametrize("command", ["train", "translate", "evaluate", "export-onnx"])
def test_a_bad_direction_is_one_line(capsys, command):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--direction", "fr-en"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "argument --direction: invalid choice: 'fr-en' (choose from 'de-en', 'en-de')" in err


@pytest.mark.slow
def test_either_direction_trains_the_same_tokenizer(en_de_run, tmp_path, capsys):
    """The shared vocabulary is learned from both sides: a German->English run's tokenizer serves too."""
    other = tmp_path / "de-en"
    args = ["train", "--steps", "1", "--vocab-size", "300", "--no-test", *TINY]
    assert main([*args, "--data-dir", str(DATA), "--out", str(other)]) == 0
    assert (en_de_run / "tokenizer.json").read_bytes() == (other / "tokenizer.json").read_bytes()
    capsys.readouterr()
    command = [
        "translate",
        "--model",
        en_de_run / "model.safetensors",
        "--tokenizer",
        other / "tokenizer.json",
    ]
    assert main([str(a) for a in (*command, "--beam", "1", "A dog.")]) == 0


@pytest.mark.slow
def test_resuming_a_checkpoint_without_its_direction_is_refused(tmp_path, capsys):
    need_data()
    out = tmp_path / "old"
    args = [*MULTI30K, "--data-dir", str(DATA)]
    assert main([*args, "--out", str(out)]) == 0
    ckpt = torch.load(out / "checkpoint.pt", weights_only=False)
    del ckpt["extra"]["args"]["direction"]  # 'train' always saves it: a damaged or crafted file
    torch.save(ckpt, out / "checkpoint.pt")
    capsys.readouterr()
    line = fails(capsys, ["train", "--resume", out, "--steps", "2", "--direction", "en-de"])
    assert line == (
        f"error: {out / 'checkpoint.pt'}: its run options lack 'direction', which 'train' always "
        "saves (a damaged or crafted file)"
    )
