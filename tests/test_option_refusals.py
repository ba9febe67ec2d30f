"""`train` refuses a bad option before it writes anything, in one line that names the option."""

import dataclasses
import io
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import COPY, MULTI30K, TINY, fails, listing, multi30k_run

import annotated.app.memory as memory
from annotated.app import main
from annotated.app.memory import container_room, parameter_count
from annotated.model import Transformer, TransformerConfig
from conftest import DATA

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize(
    "args, message",
    [
        (["--label-smoothing", "1.5"], "argument --label-smoothing: must be < 1, got 1.5"),
        (["--label-smoothing", "-0.1"], "argument --label-smoothing: must be >= 0, got -0.1"),
        (["--seed", "-1"], "argument --seed: must be >= 0, got -1"),
        (["--seed", "99999999999999999999999"], "argument --seed: must be < 4294967296"),
        (["--copy-vocab", "3"], "argument --copy-vocab: must be >= 4, got 3"),
        (["--vocab-size", "3"], "argument --vocab-size: must be > 4, got 3"),
    ],
)
def test_bad_values_are_refused_by_the_parser_naming_the_option(capsys, tmp_path, args, message):
    with pytest.raises(SystemExit) as stop:
        main([*COPY, "--steps", "1", *args, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--copy-vocab", "4"],
            "--copy-vocab 4 with --min-len 5 and --seq-len 10 makes only 6 different sequences",
        ),
        (["--min-len", "12"], "--min-len 12 is above --seq-len 10"),
        (["--max-len", "8"], "--max-len 8 is below the 11 positions"),
        (
            ["--task", "multi30k", "--batch-size", "64"],
            "--batch-size is an option of the copy task, not of multi30k",
        ),
        (["--direction", "en-de"], "--direction is an option of the multi30k task, not of copy"),
        (["--test-split", "foo"], "--test-split is an option of the multi30k task, not of copy"),
        (["--d-model", "12000", "--n-heads", "8", "--d-ff", "64"], "the model (3,"),
    ],
)
def test_bad_copy_options_are_refused_before_out_is_touched(
    capsys, tmp_path, monkeypatch, args, message
):
    monkeypatch.setattr(memory, "available_memory", lambda device: 8 * 2**30)  # a machine of 8 GiB
    err = fails(
        capsys, ["train", "--task", "copy", "--steps", "1", *args, "--out", tmp_path / "out"]
    )
    assert err.startswith("error: ") and message in err, err
    assert not (tmp_path / "out").exists()


def test_the_parameters_are_counted_from_the_config():
    for changes in (
        {},
        {"shared_vocab": False, "tgt_vocab": 37},
        {"tie_output": False, "d_k": 5},
        {"learned_positions": True, "norm_first": True, "n_layers": 3},
    ):
        cfg = TransformerConfig(
            **{
                "src_vocab": 29,
                "tgt_vocab": 29,
                "shared_vocab": True,
                "d_model": 16,
                "d_ff": 24,
                "n_heads": 2,
                "n_layers": 2,
                "max_len": 40,
                **changes,
            }
        )
        with torch.device("meta"):
            params = sum(p.numel() for p in Transformer(cfg).parameters())
        assert parameter_count(dataclasses.asdict(cfg)) == params, changes


def test_a_model_too_big_for_memory_is_refused_before_out_is_touched(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda device: 8 * 2**30)
    args = [
        "train",
        "--steps",
        "1",
        "--d-model",
        "8192",
        "--max-tokens",
        "256",
        "--data-dir",
        tmp_path,
    ]
    err = fails(capsys, [*args, "--out", tmp_path / "out"])
    assert "the model (" in err and "GiB" in err and "--d-model" in err, err
    assert not (tmp_path / "out").exists()


# ---- A run that stops before its first save leaves no file -------------------------------------


@pytest.fixture
def data_dir_or_skip():
    if not (DATA / "train.de.gz").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"the Multi30k files are missing from {DATA}")
        pytest.skip(f"no Multi30k files in {DATA}")
    return DATA


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-len", "24"], "--max-len 24 is below the"),
        (["--max-tokens", "20"], "--max-tokens 20 is below the"),
    ],
)
def test_multi30k_sizes_too_small_for_the_data_leave_no_file(
    capsys, tmp_path, data_dir_or_skip, args, message
):
    command = ["train", "--steps", "1", "--vocab-size", "300", "--no-test", *TINY, *args]
    err = fails(capsys, [*command, "--data-dir", data_dir_or_skip, "--out", tmp_path / "out"])
    assert message in err, err
    assert listing(tmp_path) == []  # no tokenizer.json, no folder


@pytest.mark.slow
def test_a_run_that_fails_before_its_first_save_leaves_no_tokenizer(
    capsys, tmp_path, data_dir_or_skip, monkeypatch
):
    from annotated.app.multi30k_training import Multi30kTask

    def broken(self):
        raise ValueError("the model cannot be built")

    monkeypatch.setattr(Multi30kTask, "model", broken)
    command = [*MULTI30K, "--data-dir", data_dir_or_skip]
    assert "the model cannot be built" in fails(capsys, [*command, "--out", tmp_path / "out"])
    assert listing(tmp_path) == []


@pytest.mark.slow
def test_a_signal_while_the_tokenizer_trains_leaves_no_file(
    capsys, tmp_path, data_dir_or_skip, monkeypatch
):
    import annotated.app.multi30k_training as multi30k

    train_tokenizer = multi30k.train_tokenizer

    def stopped(*args, **kwargs):
        tok = train_tokenizer(*args, **kwargs)
        signal.raise_signal(signal.SIGTERM)  # as `kill` would, while the tokenizer is being made
        return tok

    monkeypatch.setattr(multi30k, "train_tokenizer", stopped)
    command = [*MULTI30K, "--data-dir", data_dir_or_skip]
    err = fails(capsys, [*command, "--out", tmp_path / "out"], code=128 + signal.SIGTERM)
    assert err == "interrupted by SIGTERM: nothing was saved yet"
    assert listing(tmp_path) == []


# ---- The memory of a container: the process's own cgroup -----------------------------------------


def fake_cgroup(root: Path, folder: str, files: dict) -> None:
    path = root / folder.lstrip("/")
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)


def test_container_room_reads_the_processs_own_cgroup_v2(tmp_path):
    root, proc = tmp_path / "cgroup", tmp_path / "self_cgroup"
    proc.write_text("0::/slurm/job_7/step_0\n")
    fake_cgroup(root, "/", {"memory.stat": "inactive_file 0\n"})  # the root: no limit files
    fake_cgroup(
        root,
        "/slurm/job_7",
        {
            "memory.max": str(8 * 2**30),
            "memory.current": str(2 * 2**30),
            "memory.stat": "inactive_file 0\n",
        },
    )
    fake_cgroup(
        root,
        "/slurm/job_7/step_0",
        {
            "memory.max": "max",
            "memory.current": str(2**30),
            "memory.stat": f"inactive_file {2**29}\n",
        },
    )
    assert container_room(root, proc) == 6 * 2**30  # the job's limit, less what the job uses


def test_container_room_reads_the_processs_own_cgroup_v1(tmp_path):
    root, proc = tmp_path / "cgroup", tmp_path / "self_cgroup"
    proc.write_text("12:pids:/x\n4:memory:/process_api/ab12\n1:name=systemd:/y\n")
    fake_cgroup(
        root,
        "/memory",
        {
            "memory.limit_in_bytes": str(2**62),
            "memory.usage_in_bytes": str(2**33),
            "memory.stat": "total_inactive_file 0\n",
        },
    )
    fake_cgroup(
        root,
        "/memory/process_api/ab12",
        {
            "memory.limit_in_bytes": str(3 * 2**30),
            "memory.usage_in_bytes": str(2**30),
            "memory.stat": f"total_inactive_file {2**29}\n",
        },
    )
    assert container_room(root, proc) == 3 * 2**30 - 2**29


def test_container_room_without_a_cgroup_is_unbounded(tmp_path):
    assert container_room(tmp_path / "none", tmp_path / "none_either") == float("inf")
    (tmp_path / "self_cgroup").write_text("0::/\n")
    fake_cgroup(
        tmp_path / "cgroup", "/", {"memory.max": "max", "memory.current": "5", "memory.stat": ""}
    )
    assert container_room(tmp_path / "cgroup", tmp_path / "self_cgroup") == float("inf")


# ---- translate: each line as it arrives, and a closed pipe ends it quietly ------------------------


class Lines(io.RawIOBase):
    """Standard input that hands out one line at a time and records what was printed before each."""

    def __init__(self, lines: list[bytes], printed):
        self.lines, self.printed, self.seen, self.start = list(lines), printed, [], True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self.lines:
            return 0
        if self.start:  # a new line is asked for: note what the command had printed by then
            self.seen.append(self.printed())
        part, rest = self.lines[0][: len(buffer)], self.lines[0][len(buffer) :]
        buffer[: len(part)] = part
        self.lines[0:1], self.start = ([rest] if rest else []), not rest
        return len(part)


@pytest.mark.slow
def test_translate_prints_each_line_before_it_reads_the_next(multi30k_model, capsys, monkeypatch):
    printed = []
    stdin = Lines(
        [b"Ein Hund.\n", b"Eine Frau.\n", b"Ein Mann.\n"],
        lambda: printed.append(capsys.readouterr().out) or len(printed),
    )
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(stdin, buffer_size=4)))
    assert main(["translate", "--model", str(multi30k_model), "--beam", "1"]) == 0
    printed.append(capsys.readouterr().out)
    # asked for line 2 after line 1's translation was out, for line 3 after line 2's
    assert [text.count("\n") for text in printed] == [0, 1, 1, 1], printed


@pytest.fixture(scope="module")
def multi30k_model(tmp_path_factory, data_dir):
    return multi30k_run(tmp_path_factory.mktemp("multi30k"), data_dir) / "model.safetensors"


class ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.slow
def test_translate_into_a_closed_pipe_ends_quietly(multi30k_model, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    code = main(
        ["translate", "--model", str(multi30k_model), "--beam", "1", "Ein Hund.", "Ein Mann."]
    )
    assert code == 141 and capsys.readouterr().err == ""  # as a Unix tool killed by SIGPIPE


# ---- train --resume: a checkpoint's run options and progress are checked before they are used ------


@pytest.fixture(scope="module")
def unfinished_copy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("copy")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main([*COPY, "--steps", "4", "--eval-every", "2", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(before)
    (out / "manifest.json").unlink()  # as if it stopped before writing its results
    return out


def crafted(folder: Path, tmp_path: Path, change) -> Path:
    copy = tmp_path / "run"
    copy.mkdir()
    for p in folder.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    state = torch.load(copy / "checkpoint.pt", weights_only=True)
    change(state["extra"])
    torch.save(state, copy / "checkpoint.pt")
    return copy


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda e: e.pop("progress"),
            "its progress (loss curve, evaluations, time, snapshots) is missing",
        ),
        (lambda e: e["progress"].update(curve=[1, 2]), "its progress"),
        (lambda e: e["progress"].update(wall="x"), "its progress"),
        (lambda e: e["progress"].update(evals=None), "its progress"),
        (lambda e: e.update(snapshots="abc"), "its progress"),
        (lambda e: e["args"].update(eval_every=0), "its run option --eval-every is 0"),
        (lambda e: e["args"].update(log_every="10"), "its run option --log-every is '10'"),
        (lambda e: e["args"].update(task="nope"), "its run option --task is 'nope'"),
        (lambda e: e["args"].update(seed=-1), "its run option --seed is -1"),
        (lambda e: e["args"].update(no_warmup=1), "its run option --no-warmup is 1"),
        (lambda e: e["args"].update(dropout="0.1"), "its run option --dropout is '0.1'"),
        (
            lambda e: e["args"].pop("eval_every"),
            "its run options lack 'eval_every', which 'train' always saves",
        ),
    ],
)
def test_resume_refuses_a_checkpoint_that_train_did_not_write(
    capsys, tmp_path, unfinished_copy_run, change, message
):
    folder = crafted(unfinished_copy_run, tmp_path, change)
    before = listing(folder)
    err = fails(capsys, ["train", "--resume", folder, "--steps", "6"])
    assert err.startswith(f"error: {folder / 'checkpoint.pt'}: ") and message in err, err
    assert listing(folder) == before


def test_resume_refuses_another_tasks_option(capsys, tmp_path, unfinished_copy_run):
    folder = crafted(unfinished_copy_run, tmp_path, lambda e: None)
    err = fails(capsys, ["train", "--resume", folder, "--steps", "6", "--direction", "en-de"])
    assert "--direction is an option of the multi30k task, not of copy" in err, err


def test_resume_still_continues_a_good_checkpoint(tmp_path, unfinished_copy_run):
    folder = crafted(unfinished_copy_run, tmp_path, lambda e: None)
    assert main(["train", "--resume", str(folder), "--steps", "6"]) == 0
