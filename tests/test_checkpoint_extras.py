"""save_checkpoint refuses, naming the entry, what load_checkpoint would refuse (issue 51, item 4):
a file the run wrote itself is never called foreign when it is read back."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from annotated.model import make_model
from annotated.training import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def model():
    return make_model(11, 11, n_layers=1, d_model=16, d_ff=32, n_heads=2)


@pytest.mark.parametrize(
    "value, entry, kind",
    [
        (Path("x"), "extra['where']", r"\w*Path"),
        (np.float64(1.5), "extra['where']", "float64"),
        ({"deep": [Path("y")]}, "extra['where']['deep'][0]", r"\w*Path"),
        ({Path("k"): 1}, "a key of extra['where']", r"\w*Path"),
    ],
)
def test_save_refuses_what_load_would_refuse(tmp_path, model, value, entry, kind):
    path = tmp_path / "c.pt"
    said = rf"^{re.escape(entry)} holds {kind}; .*tensors, None, .*not written$"
    with pytest.raises(ValueError, match=said):
        save_checkpoint(path, model, step=1, where=value)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a temporary file
    torch.save({"extra": value} if not isinstance(value, dict) else value, tmp_path / "raw.pt")
    with pytest.raises(Exception, match="Weights only load failed"):  # what the loader would meet
        torch.load(tmp_path / "raw.pt", weights_only=True)


def test_save_refuses_extras_past_the_loaders_pickle_cap(tmp_path, model):
    path = tmp_path / "c.pt"
    said = r"c\.pt not written: its extras pickle to 17\.0 MiB, more than half the 16 MiB pickle"
    with pytest.raises(ValueError, match=said):
        save_checkpoint(path, model, step=1, log="x" * 17 * 2**20)
    assert list(tmp_path.iterdir()) == []


def test_what_save_accepts_loads_back(tmp_path, model):
    extra = {
        "a": 1,
        "b": 1.5,
        "c": "s",
        "d": None,
        "e": [1, (2, 3.0)],
        "f": {"g": True, 3: "k"},
        "t": torch.arange(3),
    }
    save_checkpoint(tmp_path / "c.pt", model, step=1, **extra)
    back = load_checkpoint(tmp_path / "c.pt", restore_rng=False).extra
    assert torch.equal(back.pop("t"), extra.pop("t")) and back == extra


def test_extras_up_to_half_the_cap_load_back(tmp_path, model):
    log = "x" * (8 * 2**20 - 2**10)  # just under half the 16 MiB pickle: the rest fits beside it
    save_checkpoint(tmp_path / "c.pt", model, step=1, log=log)
    assert load_checkpoint(tmp_path / "c.pt", restore_rng=False).extra == {"log": log}
