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
    said = r"c\.pt not written: its pickle unpacks to 17 MiB, more than any checkpoint's config and extras \(16 MiB\)$"
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


def test_extras_up_to_the_cap_load_back(tmp_path, model):
    log = "x" * (
        16 * 2**20 - 2**14
    )  # just under the 16 MiB pickle, with the rest of the checkpoint
    save_checkpoint(tmp_path / "c.pt", model, step=1, log=log)
    assert load_checkpoint(tmp_path / "c.pt", restore_rng=False).extra == {"log": log}


# ---- review of appendices 21-37, weak check 3: one rule for writing and reading ----------------


@pytest.mark.parametrize(
    "extra, says",
    [
        (
            {"history": [torch.tensor([i]) for i in range(17_000)]},
            r"its archive lists 17,0\d\d members, more than the 16,384",
        ),
        (
            {"table": torch.zeros(20_000_000)},
            r"its tensors unpack to 76 MiB, more than the \d+ MiB that its config",
        ),
    ],
    ids=["many tensors", "a large tensor"],
)
def test_save_refuses_tensor_extras_that_load_would_refuse(tmp_path, model, extra, says):
    with pytest.raises(
        ValueError, match=rf"^{re.escape(str(tmp_path / 'c.pt'))} not written: {says}"
    ):
        save_checkpoint(tmp_path / "c.pt", model, step=1, **extra)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("step", [-1, 2.7, "3", True, np.int64(3)])
def test_save_refuses_a_step_that_is_not_a_count(tmp_path, model, step):
    with pytest.raises(ValueError) as err:
        save_checkpoint(tmp_path / "c.pt", model, step=step)
    assert str(err.value) == (
        f"{tmp_path / 'c.pt'} not written: its step must count updates (an int >= 0), got {step!r}"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_pickle_cap_is_about_fifty_times_the_largest_pickle_a_run_writes(tmp_path):
    """What the comment on _MAX_PICKLE says: the paper's base model has six layers a side (their
    number of tensors, not their size, sets the pickle's), Adam's state, and both curves at their cap
    of CURVE_POINTS rows, whatever the number of updates (review of appendices 21-37, item 5)."""
    import zipfile

    from annotated.app import CURVE_POINTS
    from annotated.training import make_optimizer
    from annotated.training.torch_file import _MAX_PICKLE

    torch.manual_seed(0)
    base = make_model(50, 50, n_layers=6, d_model=8, d_ff=16, n_heads=2, shared_vocab=True)
    optimizer = make_optimizer(base)
    base(torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2]])).sum().backward()
    optimizer.step()
    rows = range(1, CURVE_POINTS + 1)
    progress = {
        "curve": [(250 * i, 1.2345) for i in rows],
        "evals": [(250 * i, 1.2345, 3.437) for i in rows],
    }
    save_checkpoint(tmp_path / "c.pt", base, optimizer, step=10**6, progress=progress, wall=3600.0)
    with zipfile.ZipFile(tmp_path / "c.pt") as archive:
        pickled = sum(i.file_size for i in archive.infolist() if "/data/" not in i.filename)
    assert 0.25 * 2**20 < pickled < 0.35 * 2**20, pickled  # "0.3 MiB"
    assert 40 < _MAX_PICKLE / pickled < 65  # "about fifty times"
