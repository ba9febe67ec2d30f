"""Tests for annotated.onnx_export: the ONNX files translate as the PyTorch model does.

The trained checkpoint's export is slow; a tiny random model's export checks what that checkpoint
cannot show: the longest output the page allows, and float32 weights that float16 would round (the
trained model's weights are all float16 values, so any storage keeps them exact)."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import annotated.app.onnx_export as onnx_export
from annotated.app import (
    OnnxTranslator,
    export_copy,
    export_translator,
    load_for_inference,
    main,
)
from annotated.data import BOS, PAD, encode, save_tokenizer, train_tokenizer
from annotated.decoding import next_token_logits, translate_ids
from annotated.files import sha256_of
from annotated.model import causal_mask, make_model
from annotated.training.model_file import save_model

pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

CHECKPOINT = "results/multi30k/model_fp16.safetensors"
SENTENCES = [  # Multi30k-like captions, and a few that are not
    "Zwei Hunde spielen im Schnee.",
    "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
    "Eine Frau in einem roten Kleid fährt Fahrrad auf einer belebten Straße.",
    "Kinder spielen Fußball auf einer Wiese neben einem See.",
    "Ein kleines Mädchen isst ein Eis.",
    "Drei Männer stehen vor einem Gebäude und unterhalten sich.",
    "Ein Hund 🐕 läuft.",
    "Straßenbahn",
]

slow = pytest.mark.slow  # the trained checkpoint's export


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("translator")
    config = export_translator(CHECKPOINT, None, out)
    return out, config


@pytest.fixture(scope="module")
def python_model():
    return load_for_inference(CHECKPOINT, None, torch.device("cpu"))[:2]  # model, tokenizer


@pytest.fixture(scope="module")
def runner(exported):
    out, config = exported
    return OnnxTranslator(out / config["files"]["encoder"], out / config["files"]["decoder_step"])


@slow
def test_greedy_equals_pytorch(runner, python_model):
    model, tok = python_model
    for sentence in SENTENCES:
        ids = encode(tok, sentence)
        expected = translate_ids(model, [ids], 1, 0.0, torch.device("cpu"))[0]
        assert runner.greedy(ids)[0] == expected, sentence


@slow
def test_cross_attention_equals_pytorch(runner, python_model):
    model, tok = python_model
    for sentence in SENTENCES[:3]:
        src = torch.tensor([encode(tok, sentence)])  # (1, S)
        tokens, attention = runner.greedy(src[0].tolist())  # attention: (T, N, H, S)
        ys = torch.tensor([[BOS, *tokens]])  # (1, T)
        copy = export_copy(model)
        with torch.no_grad():
            memory = copy.encode(src)  # (1, S, D)
            _, _, cross = copy.decode(memory, None, ys, causal_mask(ys.size(1)), need_weights=True)
        for n, weights in enumerate(cross):
            theirs = weights[0].numpy()  # (H, T, S)
            np.testing.assert_allclose(attention[:, n].transpose(1, 0, 2), theirs, atol=1e-5)


@slow
def test_decoder_step_serves_a_beam_of_four(runner, python_model):
    """B = 4 different prefixes of one source, as in beam search: the logits of each row."""
    model, tok = python_model
    src = encode(tok, SENTENCES[1])
    memory = {k: np.repeat(v, 4, axis=1) for k, v in runner.encode(src).items()}  # (N, 4, H, S, Dk)
    ys = torch.tensor([[BOS, 5, 9], [BOS, 17, 9], [BOS, 5, 40], [BOS, 300, 2]])  # (4, 3)
    N, _, H, _, Dk = memory["cross_k"].shape
    cache = {name: np.zeros((N, 4, H, 0, Dk), np.float32) for name in ("self_k", "self_v")}
    for t in range(ys.size(1)):
        token = ys[:, t : t + 1].numpy()
        logits, cache["self_k"], cache["self_v"], weights = runner.decoder_step.run(
            None, {"token": token, **memory, **cache}
        )
    with torch.no_grad():
        src_t = torch.tensor([src] * 4)
        expected = next_token_logits(model, model.encode(src_t), None, ys)  # (4, V)
    np.testing.assert_allclose(logits, expected.numpy(), atol=1e-4)
    assert weights.shape == (N, 4, H, len(src))


@slow
def test_files_hold_the_weights_exactly_and_fit_the_budget(exported, python_model):
    import onnx
    from onnx import numpy_helper

    out, config = exported
    model, _ = python_model
    graph = onnx.load(str(out / config["files"]["decoder_step"])).graph
    weights = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    table = weights["model.src_embed.lut.weight_fp16"]  # the shared embedding, stored in float16
    assert table.dtype == np.float16
    assert np.array_equal(table.astype(np.float32), model.src_embed.lut.weight.detach().numpy())
    size = sum((out / name).stat().st_size for name in config["files"].values())
    assert size < 20e6


@slow
def test_page_config(exported, python_model):
    out, config = exported
    model, _ = python_model
    assert json.loads((out / "translator.json").read_text()) == config
    assert config["vocab_size"] == model.cfg.tgt_vocab and config["n_layers"] == model.cfg.n_layers
    assert config["special_ids"] == {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}
    assert config["model_sha256"] == sha256_of(CHECKPOINT)
    assert sha256_of(out / "tokenizer.json") == config["tokenizer_sha256"]


@slow
def test_long_source_is_refused_by_the_position_table(runner):
    with pytest.raises(Exception, match="(?i)slice|index|shape|dimension|broadcast"):
        runner.greedy(list(range(4, 4 + 300)), limit=1)  # longer than the 256 positions exported


@slow
def test_export_copy_rejects_bad_lengths(python_model):
    model, _ = python_model
    with pytest.raises(ValueError, match="max_source must be a positive int, got 0"):
        export_copy(model, 0)


def test_command_names_a_missing_model_file(tmp_path, capsys):
    missing = tmp_path / "nothing.pt"
    assert main(["export-onnx", "--model", str(missing), "--out", str(tmp_path)]) == 2
    assert f"model file not found: {missing}" in capsys.readouterr().err


# ---- A tiny random model: the longest output, and float16 only where it is exact -------------------

TINY_PAIRS = [
    ("Ein Hund läuft.", "A dog runs."),
    ("Eine Frau liest ein Buch.", "A woman reads."),
] * 5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Export a tiny random model; keep each ONNX file as it was before its float16 storage."""
    folder = tmp_path_factory.mktemp("tiny")
    tok = train_tokenizer(TINY_PAIRS, vocab_size=80)
    V = tok.get_vocab_size()
    torch.manual_seed(0)
    model = make_model(V, V, shared_vocab=True, n_layers=1, d_model=32, d_ff=64, n_heads=2)
    with torch.no_grad():  # float16 values in the encoder, float32 ones that it rounds elsewhere
        for p in model.encoder.parameters():
            p.copy_(p.half().float())
    save_tokenizer(tok, folder / "tokenizer.json")
    use_with = {
        "task": "multi30k",
        "direction": "de-en",
        "tokenizer_sha256": sha256_of(folder / "tokenizer.json"),
    }
    save_model(folder / "model.safetensors", model, **use_with)
    before, store = {}, onnx_export.store_exact_float16

    def keep_a_copy(path, *args, **kwargs):
        outputs = tuple(o.name for o in onnx.load(str(path)).graph.output)
        before[outputs] = shutil.copyfile(path, folder / f"before-{len(before)}.onnx")
        return store(path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(onnx_export, "store_exact_float16", keep_a_copy)
        config = export_translator(folder / "model.safetensors", None, folder / "out")
    files = {name: folder / "out" / file for name, file in config["files"].items()}
    return model.eval(), config, files, before


def test_an_out_that_is_a_file_is_refused_naming_out(tiny, tmp_path, capsys):
    """`--out ok.py` with ok.py a file: one line that names --out, and the file left as it was."""
    model_file = tiny[2]["encoder"].parent.parent / "model.safetensors"  # the tiny run's folder
    taken = tmp_path / "ok.py"
    taken.write_text("print('mine')\n")
    assert main(["export-onnx", "--model", str(model_file), "--out", str(taken)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: --out {taken} is a file, expected a folder\n"
    assert taken.read_text() == "print('mine')\n"


def test_the_longest_output_the_page_allows(tiny):
    """A source as long as the page accepts, decoded to its limit (source length + extra tokens)."""
    model, config, files, _ = tiny
    runner = OnnxTranslator(files["encoder"], files["decoder_step"])
    S = config["max_source_tokens"]
    limit = S + config["extra_target_tokens"]  # what translator.js allows
    gen = torch.Generator().manual_seed(0)
    src = torch.randint(4, config["vocab_size"], (1, S), generator=gen)  # (1, S)
    memory = runner.encode(src[0].tolist())
    N, _, H, _, Dk = memory["cross_k"].shape
    cache = {name: np.zeros((N, 1, H, 0, Dk), np.float32) for name in ("self_k", "self_v")}
    ys, steps = [BOS], []
    for _ in range(limit):  # the page's greedy steps, as if EOS never came
        logits, cache["self_k"], cache["self_v"], _ = runner.decoder_step.run(
            None, {"token": np.array([ys[-1:]]), **memory, **cache}
        )
        logits[:, PAD] = -np.inf
        ys.append(int(logits[0].argmax()))
        steps.append(logits[0])
    with torch.no_grad():  # every step's logits at once, from the PyTorch model
        prefix = torch.tensor([ys[:-1]])  # (1, limit)
        states = model.decode(model.encode(src), None, prefix, causal_mask(limit))
        expected = model.generator(states)[0].numpy()  # (limit, V)
    expected[:, PAD] = -np.inf
    np.testing.assert_allclose(np.stack(steps), expected, atol=1e-4)
    assert cache["self_k"].shape[3] == limit  # one position per step


def test_float16_storage_never_changes_a_weight(tiny):
    """Every float32 tensor is either kept in float32 or stored in float16 that rounds back exactly."""
    from onnx import numpy_helper

    _, _, files, before = tiny
    converted, rounded = [], []
    for path in files.values():
        graph = onnx.load(str(path)).graph
        ref = before[tuple(o.name for o in graph.output)].as_posix()
        stored = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        casts = {n.input[0]: n.output[0] for n in graph.node if n.op_type == "Cast"}
        for init in onnx.load(ref).graph.initializer:
            w = numpy_helper.to_array(init)
            if init.name in stored:  # kept as it was
                assert stored[init.name].dtype == w.dtype, init.name
                assert np.array_equal(stored[init.name], w), init.name
                if w.dtype == np.float32 and not np.array_equal(w.astype(np.float16), w):
                    rounded.append(w.size)
                continue
            half = stored[f"{init.name}_fp16"]  # stored in float16, cast back before any use
            assert half.dtype == np.float16 and casts[f"{init.name}_fp16"] == init.name
            assert np.array_equal(half.astype(np.float32), w), init.name
            converted.append(w.size)
        assert set(stored) <= {i.name for i in onnx.load(ref).graph.initializer} | set(casts)
    # both kinds occur, and a kept tensor is as large as a converted one: a storage that ignored
    # rounding would have converted it
    assert converted and rounded and max(rounded) >= min(converted)


def test_float16_storage_leaves_the_outputs_bit_for_bit(tiny):
    import onnxruntime as ort

    _, config, files, before = tiny
    src = np.arange(4, 11, dtype=np.int64)[None]  # (1, 7)
    runs = []
    for graphs in (
        [files["encoder"], files["decoder_step"]],
        [
            before[("cross_k", "cross_v")],
            before[("logits", "new_self_k", "new_self_v", "cross_weights")],
        ],
    ):
        encoder, step = (
            ort.InferenceSession(str(g), providers=["CPUExecutionProvider"]) for g in graphs
        )
        cross_k, cross_v = encoder.run(None, {"src": src})
        N, _, H, _, Dk = cross_k.shape
        past = np.zeros((N, 1, H, 0, Dk), np.float32)
        token = np.array([[BOS]], dtype=np.int64)
        inputs = {
            "token": token,
            "cross_k": cross_k,
            "cross_v": cross_v,
            "self_k": past,
            "self_v": past,
        }
        runs.append([cross_k, cross_v, *step.run(None, inputs)])
    for a, b in zip(*runs, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)


# ---- An export stopped between its renames (issue 43, item 5) --------------------------------------


def test_an_export_stopped_between_its_renames_is_caught(tiny, tmp_path, monkeypatch):
    """The four files are renamed one by one: a kill after the encoder's leaves a new encoder beside
    the previous export's decoder and translator.json, whose SHA-256 of each graph tells them apart."""
    _, config, files, _ = tiny
    folder, out = files["encoder"].parents[1], tmp_path / "out"
    shutil.copytree(folder / "out", out)  # the previous export
    assert config["sha256"] == {name: sha256_of(out / name) for name in config["files"].values()}
    assert onnx_export.check_export(out) == config
    torch.manual_seed(1)  # another model of the same shape: every graph differs
    V = config["vocab_size"]
    other = make_model(V, V, shared_vocab=True, n_layers=1, d_model=32, d_ff=64, n_heads=2)
    shutil.copyfile(folder / "tokenizer.json", tmp_path / "tokenizer.json")
    use_with = {
        "task": "multi30k",
        "direction": "de-en",
        "tokenizer_sha256": sha256_of(tmp_path / "tokenizer.json"),
    }
    save_model(tmp_path / "model.safetensors", other, **use_with)
    replace, renamed = os.replace, []

    def killed_after_the_first(src, dst):
        if renamed:
            raise KeyboardInterrupt
        replace(src, dst)
        renamed.append(Path(dst).name)

    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(os, "replace", killed_after_the_first)
        export_translator(tmp_path / "model.safetensors", None, out)
    assert renamed == ["encoder.onnx"]
    assert sorted(p.name for p in out.iterdir()) == sorted(  # no temporary file is left
        ["encoder.onnx", "decoder_step.onnx", "tokenizer.json", "translator.json"]
    )
    with pytest.raises(ValueError) as err:
        onnx_export.check_export(out)
    assert str(err.value) == (
        f"{out / 'encoder.onnx'} is not the file that {out / 'translator.json'} lists: the folder "
        "mixes two exports (one was stopped between its renames); export again"
    )
    config = export_translator(tmp_path / "model.safetensors", None, out)  # exported again: whole
    assert onnx_export.check_export(out) == config
