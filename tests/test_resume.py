"""Resume with dropout on (issue 32): `train --resume` puts the random generators back, so a run
stopped mid-way and resumed draws the same dropout masks as one that never stopped, bit for bit."""

import contextlib
import json
import signal

import pytest
import torch
from cli_helpers import TINY

from annotated.app import main
from annotated.training import Trainer

# dropout on: every update draws masks from the global generator, so its state must survive the stop
RUN = ["train", "--task", "copy", *TINY, "--dropout", "0.3", "--steps", "10", "--eval-every", "4"]
RUN += ["--average", "2", "--eval-size", "16", "--batch-size", "8"]


UPDATE = Trainer.update  # the real one: each run wraps it afresh


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def train(args, monkeypatch, stop_after=None):
    """Run `main(args)`; return its exit code and the exact loss of every update it made."""
    losses = []
    update = UPDATE

    def logged(self, group):
        loss = update(self, group)
        losses.append(loss)
        if len(losses) == stop_after:
            signal.raise_signal(signal.SIGINT)  # Ctrl-C while this update runs
        return loss

    monkeypatch.setattr(Trainer, "update", logged)
    # Python's own Ctrl-C handler, whatever the test runner installed (pytest-xdist's workers
    # ignore SIGINT); the command turns it into a flag read after the update
    runner_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = main([str(a) for a in args])
    finally:
        signal.signal(signal.SIGINT, runner_handler)
    return code, losses


def saved(folder):
    """The checkpoint's raw entries: weights, optimizer, schedule, step, and the RNG states."""
    return torch.load(folder / "checkpoint.pt", weights_only=True)


def assert_equal(a, b, where=""):
    """Nested dicts, lists and tensors equal exactly (tensors: same dtype, shape and bits)."""
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_equal(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    else:
        assert a == b, where


def test_an_interrupted_run_with_dropout_resumes_bit_for_bit(capsys, tmp_path, monkeypatch):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    code, straight = train([*RUN, "--out", whole], monkeypatch)
    assert code == 0 and len(straight) == 10

    code, first = train([*RUN, "--out", cut], monkeypatch, stop_after=7)
    assert code == 128 + signal.SIGINT
    assert saved(cut)["step"] == 7
    capsys.readouterr()
    torch.manual_seed(1234)  # the generators move on in between, as in a new process
    code, rest = train(["train", "--resume", cut], monkeypatch)
    assert code == 0 and "resuming at update 7" in capsys.readouterr().out

    assert first + rest == straight  # every update's loss, as exact floats
    a, b = saved(whole), saved(cut)
    for key in ("model", "optimizer", "scheduler", "step", "rng"):
        assert_equal(a[key], b[key], key)
    curves = [json.loads((d / "results.json").read_text())["train_curve"] for d in (whole, cut)]
    assert curves[0] == curves[1]


@pytest.mark.parametrize("steps, saves", [(8, [4, 8]), (10, [4, 8, 10])])
def test_the_last_update_is_saved_once(tmp_path, monkeypatch, steps, saves):
    """A run whose last update is also a --save-every update saves it once, not twice (review of the
    appendices); one that ends between two saves saves its last update at the end. (A run with a time
    budget saves its last update again, with the clock that ended it: test_run_promises.)"""
    from annotated.runs import RunFolder

    made, save = [], RunFolder.save

    def counted(self, model, optimizer, scheduler, step, *rest):
        made.append(step)
        return save(self, model, optimizer, scheduler, step, *rest)

    monkeypatch.setattr(RunFolder, "save", counted)
    args = ["train", "--task", "copy", *TINY, "--steps", steps, "--eval-every", "4"]
    args += ["--eval-size", "16", "--batch-size", "8", "--out", tmp_path]
    assert main([str(a) for a in args]) == 0
    assert made == saves
    assert saved(tmp_path)["step"] == steps


def test_a_full_disk_while_saving_stays_a_write_error(tmp_path, monkeypatch):
    """RunFolder.save adds what the checkpoint keeps to the message, and keeps the WriteError's kind."""
    from annotated import files
    from annotated.files import WriteError
    from annotated.model import make_model
    from annotated.runs import RunFolder

    def full(path, write):
        raise WriteError(f"could not write {path}: the disk is full (0.0 MiB free there)")

    @contextlib.contextmanager
    def full_path(path):
        raise WriteError(f"could not write {path}: the disk is full (0.0 MiB free there)")
        yield

    monkeypatch.setattr(files, "atomic_write", full)
    monkeypatch.setattr("annotated.training.checkpoint.atomic_path", full_path)
    folder = RunFolder(tmp_path, run_id="r", options={}, task="copy", main=True)
    tiny = make_model(5, 5, n_layers=1, d_model=8, d_ff=16, n_heads=2)
    with pytest.raises(WriteError, match="the disk is full.*no checkpoint had been saved yet"):
        folder.save(tiny, None, None, 1, {}, [])
