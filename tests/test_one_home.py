"""One home per name: a class or function of the package's API is defined in one notebook only.

The chapter that teaches a piece exports it, and later chapters build on it under new names (a subclass or a
function that calls it, as appendix 33's `CheckedBatch` and `train_step_at_scale` build on chapter 12's `Batch`
and `train_step`; tests/test_one_definition.py holds that nothing is rebound). Exercise
answers (`My...` classes and `my_...` functions, and the solutions standing in for them), the graders'
independent references (appendices 23-27) and the experiments' local helpers (chapters 18-20) are
not the package's code and are not counted.
"""

import ast
import json
import re
from collections import defaultdict
from pathlib import Path

import annotated
from annotated import app, check, data, decoding, model, training

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
GRADERS_AND_EXPERIMENTS = ("18_", "19_", "20_", "23_", "24_", "25_", "26_", "27_")


def api_names() -> set[str]:
    names = set(annotated.__all__)
    for role in (app, check, data, decoding, model, training):
        names |= set(role.__all__)
    return names


def definitions() -> dict[str, set[str]]:
    """Every top-level class and function of the notebooks' code cells: name -> notebooks."""
    homes: dict[str, set[str]] = defaultdict(set)
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        if path.name.startswith(GRADERS_AND_EXPERIMENTS):
            continue
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or "@check.solution" in source:
                continue
            lines = [  # an IPython magic becomes a pass, as IPython runs it in its place
                line[: len(line) - len(line.lstrip())] + "pass"
                if line.lstrip().startswith(("%", "!"))
                else line
                for line in source.splitlines()
            ]
            for node in ast.parse("\n".join(lines)).body:
                if isinstance(node, ast.ClassDef | ast.FunctionDef):
                    if not node.name.lower().startswith("my"):
                        homes[node.name].add(path.name)
    return homes


def test_no_api_name_has_two_homes():
    api, homes = api_names(), definitions()
    twice = {name: files for name, files in homes.items() if name in api and len(files) > 1}
    assert twice == {}, f"names defined in more than one notebook: {twice}"
    # the counter sees the definitions it must: the API's classes and functions, each in one notebook
    taught = {
        "Batch",
        "LabelSmoothingLoss",
        "train_step",
        "CheckedBatch",
        "train_step_at_scale",
        "Trainer",
    }
    assert taught <= api & set(homes)
    assert homes["train_step"] == {"12_training.ipynb"}  # appendix 33 calls it: no second def
    assert homes["train_step_at_scale"] == {"33_training_engineering.ipynb"}


def test_a_second_definition_would_be_found(tmp_path, monkeypatch):
    """The counter finds a name that two notebooks define, so the test above can fail."""
    cell = {"cell_type": "code", "source": ["def train_step(model):\n", "    pass\n"]}
    for name in ("12_training.ipynb", "33_training_engineering.ipynb"):
        (tmp_path / name).write_text(json.dumps({"cells": [cell]}))
    monkeypatch.setitem(globals(), "NOTEBOOKS", tmp_path)  # definitions() reads these two
    assert definitions() == {"train_step": {"12_training.ipynb", "33_training_engineering.ipynb"}}


def test_the_model_is_what_the_chapters_write():
    homes = definitions()
    for name, chapter in [
        ("MultiHeadAttention", "04_multi_head_attention.ipynb"),
        ("split_weights", "04_multi_head_attention.ipynb"),
        (
            "Dropout",
            "05_positional_encoding.ipynb",
        ),  # §5.4's first dropout: on the positional encoding's sum
        ("PositionalEncoding", "05_positional_encoding.ipynb"),
        ("Embeddings", "06_embeddings.ipynb"),
        ("LayerNorm", "07_add_and_norm.ipynb"),
        ("SublayerConnection", "07_add_and_norm.ipynb"),
        ("PositionwiseFeedForward", "08_feed_forward.ipynb"),
        ("EncoderLayer", "09_encoder.ipynb"),
        ("Encoder", "09_encoder.ipynb"),
        ("DecoderLayer", "10_decoder.ipynb"),
        ("Decoder", "10_decoder.ipynb"),
        ("Transformer", "11_model.ipynb"),
    ]:
        assert homes[name] == {chapter}, name
        assert getattr(model, name).__module__.startswith("annotated.model."), name
        source = Path(model.__file__).parent / (
            getattr(model, name).__module__.split(".")[-1] + ".py"
        )
        assert f"File to edit: ../../notebooks/{chapter}" in source.read_text(), name
        cells = set(re.findall(r"^# %% \.\./\.\./notebooks/(\S+)", source.read_text(), flags=re.M))
        assert cells == {chapter}, (
            f"{source.name} is written by {sorted(cells)}, not by {chapter} alone"
        )


def test_the_attention_that_runs_is_the_one_chapter_04_writes():
    """No later notebook gives MultiHeadAttention another attend: the method is the class's own."""
    attend = model.MultiHeadAttention.attend
    assert attend is model.MultiHeadAttention.__dict__["attend"]
    assert (attend.__module__, attend.__qualname__) == (
        "annotated.model.multi_head",
        "MultiHeadAttention.attend",
    )
