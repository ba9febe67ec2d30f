"""The command line: help for every option, one-line errors, and end-to-end runs."""

import argparse
import json
import os
import shlex
import subprocess
import sys
from dataclasses import asdict, fields
from itertools import islice
from pathlib import Path

import pytest
import torch
from cli_helpers import TINY
from cli_helpers import multi30k_run as run_multi30k

import annotated.app.cli as cli
from annotated.app import build_parser, main, with_task_defaults
from annotated.data import token_batches
from annotated.model import TransformerConfig
from annotated.training import load_checkpoint
from annotated.training.model_file import load_model
from conftest import DATA

ROOT = Path(__file__).resolve().parents[1]


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
        (["evaluate"], "the following arguments are required: --model"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_usage_errors_are_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "--help" in err


def float_options() -> list[tuple[str, str]]:
    """(subcommand, option) for every option whose type reads "0.5" as a float."""
    found = []
    for name, parser in parsers().items():
        for action in parser._actions:
            try:
                reads = callable(action.type) and isinstance(action.type("0.5"), float)
            except (ValueError, TypeError, argparse.ArgumentTypeError):
                reads = False  # an int option
            if reads and action.option_strings:
                found.append((name, action.option_strings[0]))
    return found


def test_the_float_options_are_found():
    found = {option for _, option in float_options()}
    assert {"--minutes", "--lr-factor", "--label-smoothing", "--dropout", "--alpha"} <= found


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "NaN", "1e400"])
@pytest.mark.parametrize("command, option", float_options())
def test_float_options_refuse_infinity_and_nan_by_name(capsys, command, option, value):
    with pytest.raises(SystemExit) as exit_info:
        main([command, f"{option}={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument {option}: " in err and value in err, err


@pytest.mark.parametrize("command", ["train", "evaluate", "translate"])
def test_alpha_must_be_at_least_0(capsys, command):
    with pytest.raises(SystemExit):
        main([command, "--alpha", "-0.5"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "argument --alpha: must be >= 0, got -0.5" in err, err
    given = [command, "--alpha", "0"] + ["--model", "model.pt"] * (command != "train")
    assert build_parser().parse_args(given).alpha == 0.0


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--task", "copy"], "train needs a budget: --steps N, --minutes M"),
        (["train", "--steps", "1", "--data-dir", "{tmp}"], "train.de.gz not found in data_dir"),
        (["evaluate", "--model", "{tmp}/missing.pt"], "model file not found"),
        (["translate", "--model", "{tmp}/bad.pt", "x"], "is not a safetensors model file"),
        (["train", "--task", "copy", "--steps", "1", "--copy-vocab", "4"], "--copy-vocab 4 with"),
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


@pytest.mark.parametrize("absent", ["onnx", "onnxruntime"])
def test_export_onnx_without_its_extra_names_the_install(capsys, monkeypatch, tmp_path, absent):
    import annotated.app.onnx_export as onnx_export

    find_spec = onnx_export.importlib.util.find_spec
    monkeypatch.setattr(
        onnx_export.importlib.util,
        "find_spec",
        lambda name: None if name == absent else find_spec(name),
    )
    out = tmp_path / "out"
    assert (
        main(["export-onnx", "--model", str(tmp_path / "model.safetensors"), "--out", str(out)])
        == 2
    )
    err = capsys.readouterr().err
    assert err == (
        f"error: export-onnx needs {absent}, which the package installs only on request: "
        "pip install 'annotated-transformer[onnx]'\n"
    )
    assert not out.exists()  # refused before any work


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--steps", "1", "--wrong"], "unrecognized arguments: --wrong"),
        (["evaluate", "--model", "missing.pt"], "error: model file not found"),
    ],
)
def test_errors_from_the_real_command(args, message):
    done = run_cli(*args)
    assert done.returncode == 2
    assert message in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


# ---- End to end ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_train_copy_end_to_end(tmp_path):
    done = run_cli("train", "--task", "copy", "--steps", "2", "--out", tmp_path, *TINY)
    assert done.returncode == 0, done.stderr
    assert "held-out exact match" in done.stdout and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "averaged.safetensors",
        "checkpoint.pt",
        "manifest.json",
        "model.safetensors",
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
    assert training["no_warmup"] is False and training["decay_to"] is None  # the schedule of §5.3
    assert heldout["sequences"] == 200 and 0.0 <= heldout["exact_match"] <= 1.0
    assert {"exact_match_averaged", "averaged_snapshots", "curve"} <= set(heldout)
    assert [s for s, _ in results["train_curve"]] == [1, 2]
    ckpt = load_checkpoint(tmp_path / "checkpoint.pt", restore_rng=False)
    assert ckpt.step == 2 and ckpt.extra["task"] == "copy"
    assert ckpt.optimizer_state is not None  # resumable


@pytest.fixture(scope="module")
def multi30k_run(tmp_path_factory, data_dir):
    return run_multi30k(tmp_path_factory.mktemp("multi30k"), data_dir)


@pytest.mark.slow
def test_train_multi30k_writes_checkpoint_tokenizer_results(multi30k_run):
    names = sorted(p.name for p in multi30k_run.iterdir())
    assert names == [
        "checkpoint.pt",
        "manifest.json",
        "model.safetensors",
        "results.json",
        "tokenizer.json",
    ]
    results = json.loads((multi30k_run / "results.json").read_text())
    assert results["training"]["steps"] == 1 and results["training"]["warmup"] == 4000
    assert results["val"]["perplexity"] > 1 and "test" not in results


@pytest.mark.slow
def test_multi30k_defaults_and_weight_averaging(multi30k_run, tmp_path):
    first = json.loads((multi30k_run / "results.json").read_text())
    assert first["config"]["embedding_init"] == "normal"  # the task's default
    assert first["val"]["weights"] == "final" and "averaged_perplexity" not in first["val"]
    args = ["train", "--steps", "4", "--eval-every", "2", "--average", "2", "--vocab-size", "300"]
    assert main([*args, "--no-test", *TINY, "--data-dir", str(DATA), "--out", str(tmp_path)]) == 0
    val = json.loads((tmp_path / "results.json").read_text())["val"]
    _, averaged = load_model(tmp_path / "averaged.safetensors")
    assert averaged["snapshots"] == 2 and averaged["step"] == 4
    better = min(("final", "averaged"), key=lambda k: val[f"{k}_perplexity"])
    assert val["weights"] == better and val["perplexity"] == val[f"{better}_perplexity"]
    assert val["averaged_snapshots"] == (2 if better == "averaged" else 1)


def test_evaluate_a_saved_model(multi30k_run, capsys):
    report = multi30k_run / "eval.json"
    args = ["--split", "val", "--limit", "3", "--beam", "2", "--data-dir", str(DATA)]
    ckpt = str(multi30k_run / "model.safetensors")
    hyps = multi30k_run / "hypotheses"
    command = ["evaluate", "--model", ckpt, *args, "--results", str(report)]
    assert main([*command, "--hypotheses", str(hyps)]) == 0
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == [
        "beam 1",
        "beam 2",
    ]
    result = json.loads(report.read_text())
    assert result["split"] == "val" and {"greedy", "beam"} <= set(result)
    assert len(result["greedy"]["samples"]) == 3 and result["beam"]["beam"] == 2
    for name, key in (("greedy", "greedy"), ("beam2", "beam")):
        lines = (hyps / f"val.{name}.en").read_text().split("\n")
        assert len(lines) == 4 and lines[-1] == ""  # three sentences, each ending in a newline
        assert lines[:3] == [s["translation"] for s in result[key]["samples"]]
        assert 0 <= result[key]["chrf"] <= 100 and "nc:6" in result[key]["chrf_signature"]


@pytest.mark.slow
def test_translate_from_arguments_and_stdin(multi30k_run):
    ckpt = multi30k_run / "model.safetensors"
    done = run_cli("translate", "--model", ckpt, "--beam", "1", stdin="Ein Hund.\n\nEin Mann.\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")[:-1]
    assert len(lines) == 3 and lines[0] and lines[1] == "" and lines[2]  # one per input line


# ---- The option -> RunConfig mapping and presets ---------------------------------

# An option of each kind `train` takes: the model's, the run's and each task's.
TRAIN_OPTIONS = {
    "--task": "copy", "--out": "x", "--results": "x.json", "--steps": "3", "--minutes": "1.5",
    "--n-layers": "1", "--d-model": "16", "--d-ff": "32", "--n-heads": "2", "--dropout": "0.2",
    "--norm-first": None, "--learned-positions": None, "--no-scale-attention": None,
    "--embedding-init": "normal", "--label-smoothing": "0.2", "--warmup": "7", "--lr-factor": "2",
    "--eval-every": "5", "--log-every": "6", "--average": "3", "--save-every": "4", "--seed": "9",
    "--device": "cpu", "--max-tokens": "512", "--vocab-size": "300", "--beam": "2", "--alpha": "0.5",
    "--test-split": "val", "--no-test": None, "--export-half": "h.pt", "--data-dir": "d",
    "--seq-len": "8", "--min-len": "2", "--copy-vocab": "9", "--batch-size": "16", "--eval-size": "20",
}  # fmt: skip


def train_config(*args):
    from annotated.app import run_config

    return run_config(vars(build_parser().parse_args(["train", *args])))


def test_train_options_reach_the_config():
    argv = [a for flag, value in TRAIN_OPTIONS.items() for a in (flag, value) if a is not None]
    cfg = train_config(*argv)
    run_options = cfg.run_options
    assert (run_options.task, run_options.steps, run_options.minutes, run_options.results) == (
        "copy",
        3,
        1.5,
        "x.json",
    )
    assert cfg.model.overrides() == {
        "n_layers": 1, "d_model": 16, "d_ff": 32, "n_heads": 2, "dropout": 0.2,
        "norm_first": True, "learned_positions": True, "scale_attention": False,
        "embedding_init": "normal",
    }  # fmt: skip
    assert (
        run_options.warmup,
        run_options.lr_factor,
        run_options.eval_every,
        run_options.save_every,
    ) == (
        7,
        2.0,
        5,
        4,
    )
    assert vars(cfg.task) == {
        "seq_len": 8, "min_len": 2, "copy_vocab": 9, "batch_size": 16, "eval_size": 20,
    }  # fmt: skip
    assert with_task_defaults(cfg) == cfg  # nothing left for the task to fill in
    other = train_config(
        *argv, "--task", "multi30k"
    ).task  # the same options, read by the other task
    assert (other.max_tokens, other.vocab_size, other.beam, other.alpha) == (512, 300, 2, 0.5)
    assert (other.test_split, other.no_test, other.export_half, other.data_dir) == (
        "val",
        True,
        "h.pt",
        "d",
    )


def test_every_run_option_is_an_option_whose_default_is_the_dataclass_one(monkeypatch):
    from annotated.app import TASKS, RunOptions

    train = parsers()["train"]
    options = {a.dest: a for a in train._actions}
    for f in fields(RunOptions):
        assert f.name in options, f"RunOptions.{f.name} has no option"
        assert options[f.name].default == f.default, f.name
    for task in TASKS.values():  # each task's own options too, defaults from its own dataclass
        for f in fields(task.Options):
            assert options[f.name].default == f.default, f"{task.name}: {f.name}"
    # the dataclass is the one source: a changed default there changes the parser and its help
    monkeypatch.setattr(
        RunOptions,
        "__dataclass_fields__",
        {
            **RunOptions.__dataclass_fields__,
            "seed": replace_default(RunOptions.__dataclass_fields__["seed"], 7),
        },
    )
    train = parsers()["train"]
    assert train.parse_args(["--steps", "1"]).seed == 7
    assert "random seed (default 7)" in " ".join(train.format_help().split())


def replace_default(field, default):
    from copy import copy

    changed = copy(field)
    changed.default = default
    return changed


def test_every_model_field_is_an_option_and_the_defaults_are_the_papers():
    from annotated.app import MODEL_FIELDS, ModelOptions
    from annotated.model import TransformerConfig

    decided = {"src_vocab", "tgt_vocab", "shared_vocab"}  # by the task's data
    assert {f.name for f in MODEL_FIELDS} == {f.name for f in fields(TransformerConfig)} - decided
    # ModelOptions writes the same fields out, each optional: it cannot drift from the model's own
    assert [f.name for f in fields(ModelOptions)] == [f.name for f in MODEL_FIELDS]
    assert all(f.default is None for f in fields(ModelOptions))
    text = parsers()["train"].format_help()
    for f in MODEL_FIELDS:
        name = f.name.replace("_", "-")
        assert f"--{name}" in text or f"--no-{name}" in text, f.name
    cfg = train_config("--steps", "1")
    assert cfg.model.overrides() == {}  # no option given: the paper's model
    filled = with_task_defaults(cfg)
    assert filled.model.embedding_init == "normal"
    assert (filled.run_options.warmup, filled.run_options.save_every) == (4000, 200)
    assert train_config("--no-scale-attention").model.scale_attention is False
    assert train_config("--no-tie-output").model.overrides() == {"tie_output": False}
    narrow = train_config("--d-k", "4", "--learned-positions", "--position-init", "sinusoid")
    assert narrow.model.overrides() == {
        "d_k": 4,
        "learned_positions": True,
        "position_init": "sinusoid",
    }
    assert train_config("--no-warmup").run_options.no_warmup and not cfg.run_options.no_warmup
    assert train_config("--decay-to", "900").run_options.decay_to == 900
    assert cfg.run_options.decay_to is None


def test_the_cpu_preset_is_the_recorded_recipe_and_given_options_win(monkeypatch):
    from annotated.app import PRESETS

    record = json.loads((ROOT / "results" / "multi30k" / "results.json").read_text())
    seen = {}
    monkeypatch.setattr(cli, "cmd_train", lambda args: seen.update(vars(args)) or 0)
    assert main(["train", "--preset", "multi30k-cpu-60min", "--max-tokens", "2048"]) == 0
    cfg = run_config_of(seen)
    assert cfg.task.max_tokens == 2048  # given beside the preset: wins
    run_options = cfg.run_options
    assert run_options.minutes == 60 and run_options.warmup == 500 and run_options.lr_factor == 1.0
    assert cfg.model.norm_first
    model = TransformerConfig(8000, 8000, shared_vocab=True, **cfg.model.overrides())
    # the model of results/multi30k; fields added since it was recorded take their defaults
    assert asdict(model) == asdict(TransformerConfig(**record["config"]))
    recorded = shlex.split(record["command"])
    for key in ("warmup", "lr_factor", "eval_every", "log_every", "average"):
        flag = "--" + key.replace("_", "-")
        assert str(PRESETS["multi30k-cpu-60min"][key]) == recorded[recorded.index(flag) + 1]
    assert recorded[recorded.index("--max-tokens") + 1] == "1024"  # the preset's own value
    assert PRESETS["multi30k-cpu-60min"]["max_tokens"] == 1024
    plain = run_config_of(vars(build_parser().parse_args(["train"])))
    assert (
        plain.model.d_model is None and plain.run_options.minutes is None
    )  # without a preset: the paper's defaults


def run_config_of(options):
    from annotated.app import run_config

    return run_config(options)


def test_task_choices_come_from_the_registry(monkeypatch):
    from annotated.app import task_registry

    class Reverse(task_registry.CopyTask):
        name = "reverse"

    monkeypatch.setitem(task_registry.TASKS, "reverse", Reverse)
    monkeypatch.setattr(cli, "TASKS", task_registry.TASKS)
    assert build_parser().parse_args(["train", "--task", "reverse"]).task == "reverse"
    help_text = " ".join(parsers()["train"].format_help().split())
    assert "{multi30k,copy,reverse}" in help_text and "100 for copy, 100 for reverse" in help_text


def test_multi30k_batches_are_equal_per_rank_and_resume_mid_epoch():
    from annotated.app import Multi30kTask
    from annotated.runs import Runtime

    gen = torch.Generator().manual_seed(0)
    examples = [
        (torch.randint(4, 50, (n,), generator=gen).tolist(), [5] * (n % 7 + 1))
        for n in torch.randint(1, 12, (101,), generator=gen).tolist()
    ]
    cfg = train_config("--max-tokens", "40", "--seed", "3")

    def epoch(rank, world_size, start=0, progress=None):
        task = Multi30kTask(cfg, Runtime(rank, world_size))
        task.train_ex = examples
        stream = task.batches(start, progress or {})
        count = len(list(token_batches(examples, 40, seed=3))) // world_size
        return [(b.src.tolist(), b.tgt.tolist()) for b in islice(stream, count - start)], task

    one, task = epoch(0, 1)
    assert task.progress() == {"epoch": 0, "position": len(one)}
    shares = [epoch(r, 3)[0] for r in range(3)]
    assert len({len(s) for s in shares}) == 1  # the same number on every rank: no hang
    assert all(share == one[r::3][: len(share)] for r, share in enumerate(shares))
    rest, _ = epoch(0, 1, start=5, progress={"epoch": 0, "position": 5})
    assert rest == one[5:]  # a run resumed at update 5 continues with batch 6
