"""Models to share as safetensors (appendix 21, issue 51 item 1): a round trip keeps every tensor and
the tie, the committed models load without unpickling and name what they were trained for, and every
refused file gets one line that names the file and the reason."""

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from annotated.model import make_model
from annotated.training.model_file import MODEL_FORMAT, load_model, save_model

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = {  # each committed model and the task its metadata must name
    "results/multi30k/model_fp16.safetensors": "multi30k",
    "results/multi30k-en-de/model_fp16.safetensors": "multi30k",
    "results/copy/copier.safetensors": "copy",
    "results/copy/early/copier.safetensors": "copy",
}


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return make_model(10, 10, n_layers=1, d_model=16, d_ff=32, n_heads=2).eval()


@pytest.fixture
def good(tiny, tmp_path) -> Path:
    path = tmp_path / "tiny.safetensors"
    save_model(path, tiny, direction="de-en", tokenizer_sha256="0" * 64)
    return path


def header_of(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8 : 8 + length]), data[8 + length :]


def rewritten(path: Path, change) -> Path:
    """A copy of the file whose JSON header `change(header)` edits; the tensors' bytes kept."""
    header, body = header_of(path)
    change(header)
    text = json.dumps(header).encode()
    out = path.with_name("bad.safetensors")
    out.write_bytes(struct.pack("<Q", len(text)) + text + body)
    return out


def refusal(path: Path) -> str:
    with pytest.raises(ValueError) as err:
        load_model(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(path))  # one line, naming the file
    return message


def test_round_trip_keeps_every_tensor_the_tie_and_the_metadata(tiny, good):
    model, info = load_model(good)
    assert info == {"direction": "de-en", "tokenizer_sha256": "0" * 64}
    assert model.cfg == tiny.cfg and model.generator.weight is model.tgt_embed.lut.weight
    for name, tensor in tiny.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    x = torch.randint(4, 10, (2, 5))
    assert torch.equal(model.eval()(x, x), tiny(x, x))
    header, _ = header_of(good)
    assert (
        json.loads(header["__metadata__"]["config"])["d_model"] == 16
    )  # metadata values: JSON strings
    assert header["__metadata__"]["format"] == MODEL_FORMAT


def test_half_precision_is_kept_in_the_file_and_loaded_as_float32(tiny, tmp_path):
    half = make_model(10, 10, n_layers=1, d_model=16, d_ff=32, n_heads=2).half()
    save_model(tmp_path / "half.safetensors", half)
    assert {t.dtype for t in load_file(tmp_path / "half.safetensors").values()} == {torch.float16}
    model, _ = load_model(tmp_path / "half.safetensors")
    for name, tensor in half.state_dict().items():
        assert model.state_dict()[name].dtype == torch.float32
        assert torch.equal(model.state_dict()[name].half(), tensor), name


@pytest.mark.parametrize("fraction", [0.5, 0.999])
def test_a_truncated_file_is_refused(good, fraction):
    data = good.read_bytes()
    good.write_bytes(data[: int(len(data) * fraction)])
    assert "is not a safetensors model file: damaged" in refusal(good)


def test_a_file_of_eight_bytes_or_fewer_is_refused(good):
    good.write_bytes(b"\x00" * 5)
    assert "is not a safetensors model file: damaged" in refusal(good)


@pytest.mark.parametrize(
    "lie",
    [
        lambda e: e.update(
            data_offsets=[e["data_offsets"][0], e["data_offsets"][1] + 4]
        ),  # past its data
        lambda e: e.update(
            data_offsets=[0, e["data_offsets"][1] - e["data_offsets"][0]]
        ),  # overlaps another
        lambda e: e.update(dtype="F16"),  # half the bytes it spans
        lambda e: e.update(shape=[5]),  # half the elements
        lambda e: e.update(shape=[20]),  # twice the elements
    ],
    ids=["offset-past-data", "offset-overlaps", "dtype", "shape-short", "shape-long"],
)
def test_a_header_that_lies_about_offsets_dtypes_or_shapes_is_refused(good, lie):
    bad = rewritten(good, lambda h: lie(h["generator.bias"]))
    assert "is not a safetensors model file: damaged" in refusal(bad)


def test_a_consistent_header_of_another_dtype_or_shape_is_refused_before_reading_data(good):
    bad = rewritten(good, lambda h: h["generator.bias"].update(dtype="I32"))  # 10 int32: same bytes
    assert "do not fit the model its config describes" in refusal(
        bad
    ) and "generator.bias I32" in refusal(bad)
    bad = rewritten(
        good, lambda h: h["generator.bias"].update(shape=[5, 2])
    )  # same elements, other shape
    assert "generator.bias F32 (5, 2) (config: (10,))" in refusal(bad)


def test_a_missing_or_extra_tensor_is_refused(good):
    bad = rewritten(good, lambda h: h.update(extra=h.pop("generator.bias")))
    message = refusal(bad)
    assert "2 mismatches" in message and "extra" in message and "generator.bias" in message


@pytest.mark.parametrize("length", [2**40, 100_000_001])
def test_a_huge_header_is_refused_unread(good, length):
    data = good.read_bytes()
    good.write_bytes(struct.pack("<Q", length) + data[8:])  # the library caps its header at 100 MB
    assert "is not a safetensors model file: damaged" in refusal(
        good
    ) and "header too large" in refusal(good)


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda m: m.pop("format"), "is not an annotated model"),
        (lambda m: m.update(format="someone.else/1"), "is not an annotated model"),
        (lambda m: m.pop("config"), "holds an invalid model config: KeyError"),
        (lambda m: m.update(config="{"), "holds an invalid model config: JSONDecodeError"),
        (
            lambda m: m.update(config='{"src_vocab": 10}'),
            "holds an invalid model config: TypeError",
        ),
        (
            lambda m: m.update(config=m["config"].replace('"n_heads": 2', '"n_heads": 3')),
            "invalid model config",
        ),
        (
            lambda m: m.update(config=m["config"].replace('"d_ff": 32', '"d_ff": 64')),
            "do not fit the model",
        ),
        (
            lambda m: m.update(direction="de-en"),
            "holds an invalid model config: JSONDecodeError",
        ),  # not JSON
    ],
    ids=[
        "no-format",
        "other-format",
        "no-config",
        "config-not-json",
        "config-incomplete",
        "config-invalid",
        "config-other-shapes",
        "entry-not-json",
    ],
)
def test_wrong_metadata_is_refused(good, change, reason):
    assert reason in refusal(rewritten(good, lambda h: change(h["__metadata__"])))


def test_a_config_that_asks_for_far_more_memory_than_the_file_holds_is_refused(good):
    """Only the position table is not in the file: a huge max_len would allocate it on loading."""
    bad = rewritten(
        good,
        lambda h: h["__metadata__"].update(
            config=h["__metadata__"]["config"].replace('"max_len": 5000', '"max_len": 1000000000')
        ),
    )
    assert "its config (max_len=1000000000) asks for" in refusal(bad)


def test_a_file_without_metadata_is_refused(good):
    assert "is not an annotated model" in refusal(rewritten(good, lambda h: h.pop("__metadata__")))


def test_nan_weights_are_refused(tiny, tmp_path):
    model = make_model(10, 10, n_layers=1, d_model=16, d_ff=32, n_heads=2)
    with torch.no_grad():
        model.generator.bias[0] = float("nan")
    save_model(tmp_path / "nan.safetensors", model)
    assert "holds NaN or infinite weights in 1 tensors (first: generator.bias)" in refusal(
        tmp_path / "nan.safetensors"
    )


def test_a_torch_checkpoint_is_refused_as_a_model_file(tiny, tmp_path):
    torch.save(tiny.state_dict(), tmp_path / "model.safetensors")
    message = refusal(tmp_path / "model.safetensors")
    assert "is not a safetensors model file: it is a torch.save checkpoint" in message


def test_a_missing_file_and_a_model_that_is_not_a_transformer(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model file at"):
        load_model(tmp_path / "none.safetensors")
    with pytest.raises(TypeError, match="model must be a Transformer"):
        save_model(tmp_path / "x.safetensors", torch.nn.Linear(2, 2))


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_each_committed_model_loads_unpickled_and_names_its_run(name, monkeypatch):
    """No unpickler runs; the step and task are those of the run's record beside it, and a translation
    model carries the hash of the tokenizer beside it, in the direction its record names."""
    import hashlib
    import pickle

    def refuse(*args, **kwargs):
        raise AssertionError("a committed model must load without unpickling")

    for module, attribute in [(pickle, "load"), (pickle, "loads"), (torch, "load")]:
        monkeypatch.setattr(module, attribute, refuse)
    model, info = load_model(ROOT / name)
    folder = (ROOT / name).parent
    record = json.loads((folder / "results.json").read_text())
    assert info["task"] == COMMITTED[name]
    assert int(info["step"]) == record["training"]["steps"]
    assert model.cfg == type(model.cfg)(**record["config"])
    assert {t.dtype for t in load_file(ROOT / name).values()} == {
        torch.float16 if "fp16" in name else torch.float32
    }
    if COMMITTED[name] == "multi30k":
        tokenizer = hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
        assert info["tokenizer_sha256"] == tokenizer
        assert record["task"] == f"multi30k {info['direction']}"


# ---- review of appendices 21-37 (weak checks 2 and 12) -------------------------------------------


def test_a_config_whose_layers_the_file_does_not_hold_is_refused_before_any_model_is_built(
    good, monkeypatch
):
    """n_layers is counted in the header's tensor names: 2,000 layers on `meta` took 16 s."""
    import annotated.training.model_file as model_file

    def built(*args, **kwargs):
        raise AssertionError("a model was built before the layers were counted")

    monkeypatch.setattr(model_file, "Transformer", built)
    bad = rewritten(
        good,
        lambda h: h["__metadata__"].update(
            config=h["__metadata__"]["config"].replace('"n_layers": 1', '"n_layers": 2000')
        ),
    )
    assert "the config says n_layers=2000, but the file holds weights for 1 encoder layers" in (
        refusal(bad)
    )


@pytest.mark.parametrize(
    "key, value, says",
    [
        (
            "direction",
            "xx-yy",
            "its metadata's direction must be one of ['de-en', 'en-de'], got 'xx-yy'",
        ),
        ("direction", 5, "its metadata's direction must be one of ['de-en', 'en-de'], got 5"),
        ("tokenizer_sha256", 5, "its metadata's tokenizer_sha256 must be a SHA-256 in hex, got 5"),
        ("task", ["multi30k"], "its metadata's task must be a task's name, got ['multi30k']"),
        ("run", {"a": 1}, "its metadata's run must be a run's id, got {'a': 1}"),
        ("step", -1, "its metadata's step must be an int >= 0, got -1"),
        ("step", 2.5, "its metadata's step must be an int >= 0, got 2.5"),
    ],
)
def test_metadata_beyond_the_config_is_checked_on_reading_and_writing(
    good, tiny, tmp_path, key, value, says
):
    bad = rewritten(good, lambda h: h["__metadata__"].update({key: json.dumps(value)}))
    assert refusal(bad) == f"{bad}: {says}"
    with pytest.raises(ValueError) as err:
        save_model(tmp_path / "new.safetensors", tiny, **{key: value})
    assert str(err.value) == f"{tmp_path / 'new.safetensors'} not written: {says}"
    assert not (tmp_path / "new.safetensors").exists()
