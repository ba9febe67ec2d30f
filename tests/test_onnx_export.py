"""Tests for annotated.onnx_export: the ONNX files translate as the PyTorch model does."""

import json

import numpy as np
import pytest
import torch

from annotated.app import (
    OnnxTranslator,
    export_copy,
    export_translator,
    load_for_inference,
    main,
)
from annotated.data import BOS_ID, encode
from annotated.decoding import next_token_logits, translate_ids
from annotated.files import sha256_of
from annotated.model import causal_mask

pytest.importorskip("onnxruntime")

CHECKPOINT = "results/multi30k/model_fp16.pt"
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

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("translator")
    config = export_translator(CHECKPOINT, None, out)
    return out, config


@pytest.fixture(scope="module")
def python_model():
    return load_for_inference(CHECKPOINT, None, torch.device("cpu"))


@pytest.fixture(scope="module")
def runner(exported):
    out, config = exported
    return OnnxTranslator(out / config["files"]["encoder"], out / config["files"]["decoder_step"])


def test_greedy_equals_pytorch(runner, python_model):
    model, tok = python_model
    for sentence in SENTENCES:
        ids = encode(tok, sentence)
        expected = translate_ids(model, [ids], 1, 0.0, torch.device("cpu"))[0]
        assert runner.greedy(ids)[0] == expected, sentence


def test_cross_attention_equals_pytorch(runner, python_model):
    model, tok = python_model
    for sentence in SENTENCES[:3]:
        src = torch.tensor([encode(tok, sentence)])  # (1, S)
        tokens, attention = runner.greedy(src[0].tolist())  # attention: (T, N, H, S)
        ys = torch.tensor([[BOS_ID, *tokens]])  # (1, T)
        copy = export_copy(model)
        with torch.no_grad():
            memory = copy.encode(src)  # (1, S, D)
            _, _, cross = copy.decode(memory, None, ys, causal_mask(ys.size(1)), need_weights=True)
        for n, weights in enumerate(cross):
            theirs = weights[0].numpy()  # (H, T, S)
            np.testing.assert_allclose(attention[:, n].transpose(1, 0, 2), theirs, atol=1e-5)


def test_decoder_step_serves_a_beam_of_four(runner, python_model):
    """B = 4 different prefixes of one source, as in beam search: the logits of each row."""
    model, tok = python_model
    src = encode(tok, SENTENCES[1])
    memory = {k: np.repeat(v, 4, axis=1) for k, v in runner.encode(src).items()}  # (N, 4, H, S, Dk)
    ys = torch.tensor(
        [[BOS_ID, 5, 9], [BOS_ID, 17, 9], [BOS_ID, 5, 40], [BOS_ID, 300, 2]]
    )  # (4, 3)
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


def test_page_config(exported, python_model):
    out, config = exported
    model, _ = python_model
    assert json.loads((out / "translator.json").read_text()) == config
    assert config["vocab_size"] == model.cfg.tgt_vocab and config["n_layers"] == model.cfg.n_layers
    assert config["special_ids"] == {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}
    assert config["checkpoint_sha256"] == sha256_of(CHECKPOINT)
    assert sha256_of(out / "tokenizer.json") == config["tokenizer_sha256"]


def test_long_source_is_refused_by_the_position_table(runner):
    with pytest.raises(Exception, match="(?i)slice|index|shape|dimension|broadcast"):
        runner.greedy(list(range(4, 4 + 300)), limit=1)  # longer than the 256 positions exported


def test_export_copy_rejects_bad_lengths(python_model):
    model, _ = python_model
    with pytest.raises(ValueError, match="max_source must be a positive int, got 0"):
        export_copy(model, 0)


def test_command_names_a_missing_checkpoint(tmp_path, capsys):
    missing = tmp_path / "nothing.pt"
    assert main(["export-onnx", "--checkpoint", str(missing), "--out", str(tmp_path)]) == 2
    assert f"checkpoint file not found: {missing}" in capsys.readouterr().err
