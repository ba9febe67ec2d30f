"""Resume with dropout on (issue 32): `train --resume` puts the random generators back, so a run
stopped mid-way and resumed draws the same dropout masks as one that never stopped, bit for bit."""

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
