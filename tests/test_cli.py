"""The command line: help for every option, one-line errors, and end-to-end runs."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from annotated.cli import build_parser, main
from annotated.training import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ANNOTATED_MULTI30K_DIR") or ROOT.parent / "shared/data/multi30k")
TINY = "--n-layers 1 --d-model 16 --d-ff 32 --n-heads 2".split()


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def run_cli(*args, stdin=None):
    """`python -m annotated ARGS` in a fresh process, on one thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    command = [sys.executable, "-m", "annotated", *map(str, args)]
    return subprocess.run(
        command, cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, timeout=120
    )


def parsers():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {"python -m annotated": parser, **sub.choices}


# ---- Help ---------------------------------------------------------------------------------------


def test_every_subcommand_and_option_has_help():
    found = parsers()
    assert set(found) == {
        "python -m annotated",
        "train",
        "evaluate",
        "translate",
        "check",
        "export-onnx",
    }
    for name, parser in found.items():
        text = parser.format_help()
        for action in parser._actions:
            assert action.help and action.help != argparse.SUPPRESS, (name, action.dest)
            for flag in action.option_strings:
                assert flag in text, (name, flag)
        assert parser.description or name != "python -m annotated"
    sub = next(a for a in found["python -m annotated"]._actions if a.choices)
    assert all(choice.help for choice in sub._choices_actions)  # the subcommands' one-liners


def test_help_names_the_task_dependent_defaults():
    text = " ".join(parsers()["train"].format_help().split())
    assert "default 4000 for multi30k, 100 for copy" in text
    assert "copy task: 32" in text  # --d-model of the copy task's small model


# ---- Errors: one line on stderr, a non-zero exit, no traceback -------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--bogus"], "unrecognized arguments: --bogus"),
        (["train", "--steps", "0"], "argument --steps: must be > 0, got 0"),
        (["train", "--steps", "two"], "argument --steps: invalid int value: 'two'"),
        (["train", "--task", "nope"], "argument --task: invalid choice: 'nope'"),
        (["evaluate"], "the following arguments are required: --checkpoint"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_usage_errors_are_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "--help" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--task", "copy"], "train needs a budget: --steps N, --minutes M"),
        (["train", "--steps", "1", "--data-dir", "{tmp}"], "train.de.gz not found in data_dir"),
        (["evaluate", "--checkpoint", "{tmp}/missing.pt"], "checkpoint file not found"),
        (["translate", "--checkpoint", "{tmp}/bad.pt", "x"], "is not a checkpoint"),
        (["train", "--task", "copy", "--steps", "1", "--copy-vocab", "3"], "vocab_size must be"),
    ],
)
def test_run_errors_are_one_line(capsys, tmp_path, args, message):
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    (tmp_path / "tokenizer.json").write_text("{}")
    args = [a.format(tmp=tmp_path) for a in args] + ["--out", str(tmp_path / "out")] * (
        args[:1] == ["train"]
    )
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--steps", "1", "--wrong"], "unrecognized arguments: --wrong"),
        (["evaluate", "--checkpoint", "missing.pt"], "error: checkpoint file not found"),
    ],
)
def test_errors_from_the_real_command(args, message):
    done = run_cli(*args)
    assert done.returncode == 2
    assert message in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


# ---- End to end ---------------------------------------------------------------------------------


def test_train_copy_end_to_end(tmp_path):
    done = run_cli("train", "--task", "copy", "--steps", "2", "--out", tmp_path, *TINY)
    assert done.returncode == 0, done.stderr
    assert "held-out exact match" in done.stdout and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "averaged.pt",
        "checkpoint.pt",
        "manifest.json",
        "results.json",
    ]
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results) == {
        "task",
        "run",
        "command",
        "commit",
        "hardware",
        "torch",
        "config",
        "training",
        "heldout",
        "train_curve",
    }
    assert results["task"] == "copy" and results["command"].startswith("python -m annotated train")
    assert results["config"]["d_model"] == 16 and results["config"]["shared_vocab"]
    training, heldout = results["training"], results["heldout"]
    assert training["steps"] == 2 and training["processes"] == 1
    assert training["warmup"] == 100 and training["lr_factor"] == 0.5  # the copy task's defaults
    assert heldout["sequences"] == 200 and 0.0 <= heldout["exact_match"] <= 1.0
    assert {"exact_match_averaged", "averaged_snapshots", "curve"} <= set(heldout)
    assert [s for s, _ in results["train_curve"]] == [1, 2]
    ckpt = load_checkpoint(tmp_path / "checkpoint.pt", restore_rng=False)
    assert ckpt.step == 2 and ckpt.extra["task"] == "copy"
    assert ckpt.optimizer_state is not None  # resumable


@pytest.fixture(scope="module")
def multi30k_run(tmp_path_factory):
    if not (DATA / "train.de.gz").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"the Multi30k files are missing from {DATA}")
        pytest.skip(f"no Multi30k files in {DATA}")
    out = tmp_path_factory.mktemp("multi30k")
    args = ["train", "--steps", "1", "--vocab-size", "300", "--no-test", *TINY]
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # module-scoped: set up before the per-test fixture
    try:
        assert main([*args, "--data-dir", str(DATA), "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(before)
    return out


def test_train_multi30k_writes_checkpoint_tokenizer_results(multi30k_run):
    names = sorted(p.name for p in multi30k_run.iterdir())
    assert names == ["checkpoint.pt", "manifest.json", "results.json", "tokenizer.json"]
    results = json.loads((multi30k_run / "results.json").read_text())
    assert results["training"]["steps"] == 1 and results["training"]["warmup"] == 4000
    assert results["val"]["perplexity"] > 1 and "test" not in results


def test_multi30k_defaults_and_weight_averaging(multi30k_run, tmp_path):
    first = json.loads((multi30k_run / "results.json").read_text())
    assert first["config"]["embedding_init"] == "normal"  # the task's default
    assert first["val"]["weights"] == "final" and "averaged_perplexity" not in first["val"]
    args = ["train", "--steps", "4", "--eval-every", "2", "--average", "2", "--vocab-size", "300"]
    assert main([*args, "--no-test", *TINY, "--data-dir", str(DATA), "--out", str(tmp_path)]) == 0
    val = json.loads((tmp_path / "results.json").read_text())["val"]
    averaged = load_checkpoint(tmp_path / "averaged.pt", restore_rng=False)
    assert averaged.extra["snapshots"] == 2 and averaged.step == 4
    better = min(("final", "averaged"), key=lambda k: val[f"{k}_perplexity"])
    assert val["weights"] == better and val["perplexity"] == val[f"{better}_perplexity"]
    assert val["averaged_snapshots"] == (2 if better == "averaged" else 1)


def test_evaluate_a_saved_model(multi30k_run, capsys):
    report = multi30k_run / "eval.json"
    args = ["--split", "val", "--limit", "3", "--beam", "2", "--data-dir", str(DATA)]
    ckpt = str(multi30k_run / "checkpoint.pt")
    assert main(["evaluate", "--checkpoint", ckpt, *args, "--results", str(report)]) == 0
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == [
        "beam 1",
        "beam 2",
    ]
    result = json.loads(report.read_text())
    assert result["split"] == "val" and {"greedy", "beam"} <= set(result)
    assert len(result["greedy"]["samples"]) == 3 and result["beam"]["beam"] == 2


def test_translate_from_arguments_and_stdin(multi30k_run):
    ckpt = multi30k_run / "checkpoint.pt"
    done = run_cli(
        "translate", "--checkpoint", ckpt, "--beam", "1", stdin="Ein Hund.\n\nEin Mann.\n"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")[:-1]
    assert len(lines) == 3 and lines[0] and lines[1] == "" and lines[2]  # one per input line
