"""The full Transformer (§3): body equal to nn.Transformer, properties, configuration, bad input."""

import dataclasses

import pytest
import torch
from torch import nn

from annotated.model import (
    DecoderCache,
    MultiHeadAttention,
    TransformerConfig,
    causal_mask,
    make_model,
    padding_mask,
)

from torch_reference import copy_decoder_layer, copy_encoder_layer, copy_stack, randomize

SMALL = {"n_layers": 2, "d_model": 32, "d_ff": 64, "n_heads": 4, "dropout": 0.0}
SRC = torch.tensor([[1, 5, 7, 3, 2], [1, 4, 9, 2, 0]])
TGT = torch.tensor([[1, 5, 7, 3], [1, 4, 9, 0]])


def masks(src, tgt, pad=0):
    return padding_mask(src, pad), padding_mask(tgt, pad) & causal_mask(tgt.size(1))


def small_model(seed=0, **overrides):
    torch.manual_seed(seed)
    return make_model(11, 11, **{**SMALL, **overrides}).eval()


@pytest.mark.usefixtures("no_fast_path")
@pytest.mark.parametrize("norm_first", [False, True])
def test_body_equals_nn_transformer(norm_first):
    model = small_model(norm_first=norm_first)
    randomize(model.encoder, std=0.2, seed=1), randomize(model.decoder, std=0.2, seed=2)
    ref = nn.Transformer(
        32, 4, 2, 2, 64, dropout=0.0, batch_first=True, norm_first=norm_first
    ).eval()
    if not norm_first:  # the paper's post-LN stacks end without an extra LayerNorm
        ref.encoder.norm, ref.decoder.norm = None, None
    copy_stack(model.encoder, ref.encoder, copy_encoder_layer)
    copy_stack(model.decoder, ref.decoder, copy_decoder_layer)
    src_mask, tgt_mask = masks(SRC, TGT)
    x_src, x_tgt = model.src_pos(model.src_embed(SRC)), model.tgt_pos(model.tgt_embed(TGT))
    ours = model.decoder(x_tgt, model.encoder(x_src, src_mask), src_mask, tgt_mask)
    theirs = ref(
        x_src,
        x_tgt,
        tgt_mask=~causal_mask(4)[0, 0],
        src_key_padding_mask=~src_mask[:, 0, 0],
        memory_key_padding_mask=~src_mask[:, 0, 0],
        tgt_key_padding_mask=~padding_mask(TGT, 0)[:, 0, 0],
    )
    real = padding_mask(TGT, 0)[:, 0, 0]
    torch.testing.assert_close(ours[real], theirs[real])
    print(f"norm_first={norm_first}: max |diff| = {(ours - theirs)[real].abs().max():.2e}")


def test_forward_is_encode_then_decode_then_generator():
    model = small_model()
    src_mask, tgt_mask = masks(SRC, TGT)
    memory = model.encode(SRC, src_mask)
    expected = model.generator(model.decode(memory, src_mask, TGT, tgt_mask))
    torch.testing.assert_close(model(SRC, TGT, src_mask, tgt_mask), expected)
    assert expected.shape == (2, 4, 11)


@pytest.mark.parametrize("norm_first", [False, True])
def test_causality(norm_first):
    model = small_model(norm_first=norm_first)
    src_mask, _ = masks(SRC, TGT)
    tgt = torch.randint(1, 11, (2, 7))
    base = model(SRC, tgt, src_mask, causal_mask(7))
    for t in range(6):
        changed = tgt.clone()
        changed[:, t + 1 :] = torch.randint(1, 11, (2, 6 - t))
        torch.testing.assert_close(
            model(SRC, changed, src_mask, causal_mask(7))[:, : t + 1], base[:, : t + 1]
        )


def test_padding_invariance():
    model = small_model()
    src_mask, tgt_mask = masks(SRC, TGT)
    base = model(SRC, TGT, src_mask, tgt_mask)
    real = padding_mask(TGT, 0)[:, 0, 0]
    # more padding
    longer = torch.cat([SRC, torch.zeros(2, 4, dtype=torch.long)], 1)
    got = model(longer, TGT, padding_mask(longer, 0), tgt_mask)
    torch.testing.assert_close(got[real], base[real])
    # other tokens under the padding mask (ids the mask declares pad)
    src2 = SRC.clone()
    src2[1, 4] = 7
    got = model(src2, TGT, src_mask, tgt_mask)  # same mask: position 4 of sentence 2 still hidden
    torch.testing.assert_close(got[real], base[real])


def test_batch_independence():
    model = small_model()
    src_mask, tgt_mask = masks(SRC, TGT)
    full = model(SRC, TGT, src_mask, tgt_mask)
    for b in range(2):
        one = model(SRC[b : b + 1], TGT[b : b + 1], src_mask[b : b + 1], tgt_mask[b : b + 1])
        torch.testing.assert_close(one, full[b : b + 1])


def test_seeded_model_is_reproducible():
    src_mask, tgt_mask = masks(SRC, TGT)
    a = small_model(seed=3)(SRC, TGT, src_mask, tgt_mask)
    b = small_model(seed=3)(SRC, TGT, src_mask, tgt_mask)
    assert torch.equal(a, b)


@pytest.mark.parametrize("overrides", [{}, {"norm_first": True}, {"learned_positions": True}])
def test_gradients_reach_every_parameter(overrides):
    model = small_model(**overrides).train()
    src_mask, tgt_mask = masks(SRC, TGT)
    model(SRC, TGT, src_mask, tgt_mask).logsumexp(-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_weight_tying():
    model = small_model(shared_vocab=True)
    assert model.generator.weight is model.tgt_embed.lut.weight is model.src_embed.lut.weight
    untied = make_model(11, 13, **SMALL, tie_output=False)
    assert untied.generator.weight is not untied.tgt_embed.lut.weight
    separate = make_model(11, 13, **SMALL)
    assert separate.generator.weight is separate.tgt_embed.lut.weight
    assert separate.src_embed is not separate.tgt_embed


@pytest.mark.parametrize("shared_vocab", [False, True])
def test_normal_embedding_init_gives_unit_rms_after_the_factor(shared_vocab):
    """N(0, 1/d): tokens x sqrt(d) have RMS 1 whatever V; the other weights are still Xavier."""
    torch.manual_seed(0)
    normal = make_model(4000, 4000, n_layers=1, d_model=64, shared_vocab=shared_vocab,
                        embedding_init="normal")  # fmt: skip
    torch.manual_seed(0)
    xavier = make_model(4000, 4000, n_layers=1, d_model=64, shared_vocab=shared_vocab)
    for model in (normal, xavier):
        assert model.generator.weight is model.tgt_embed.lut.weight  # init does not untie
    for embed in (normal.src_embed, normal.tgt_embed):
        rms = (embed.lut.weight * 64**0.5).pow(2).mean().sqrt().item()
        assert abs(rms - 1.0) < 0.02
    xavier_rms = (xavier.src_embed.lut.weight * 64**0.5).pow(2).mean().sqrt().item()
    assert abs(xavier_rms - (2 * 64 / (4000 + 64)) ** 0.5) < 0.01
    torch.testing.assert_close(
        normal.encoder.layers[0].self_attn.W_q.weight, xavier.encoder.layers[0].self_attn.W_q.weight
    )


@pytest.mark.parametrize("max_len", [64, 5000])
def test_learned_positions_can_start_at_the_sinusoids_scale(max_len):
    """Table 3 (E) compared fairly: N(0, 1/2) has the sinusoids' RMS 1/sqrt(2), whatever max_len."""
    torch.manual_seed(0)
    fair = make_model(50, 50, n_layers=1, d_model=64, max_len=max_len, learned_positions=True,
                      position_init="sinusoid")  # fmt: skip
    torch.manual_seed(0)
    xavier = make_model(50, 50, n_layers=1, d_model=64, max_len=max_len, learned_positions=True)
    sinusoid_rms = fair.src_pos.embedding.weight.new_tensor(0.5).sqrt().item()
    for table in (fair.src_pos.embedding.weight, fair.tgt_pos.embedding.weight):
        assert abs(table.pow(2).mean().sqrt().item() - sinusoid_rms) < 0.03
    xavier_rms = xavier.src_pos.embedding.weight.pow(2).mean().sqrt().item()
    assert (
        abs(xavier_rms - (2 / (max_len + 64)) ** 0.5) < 0.01
    )  # Xavier: small, and smaller with max_len
    torch.testing.assert_close(  # the other weights start where they did
        fair.encoder.layers[0].self_attn.W_q.weight, xavier.encoder.layers[0].self_attn.W_q.weight
    )


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"position_init": "sinusoid"},
            "position_init must be 'xavier', or 'sinusoid' with learned",
        ),
        ({"position_init": "zeros", "learned_positions": True}, "got position_init='zeros'"),
        ({"d_k": 0}, "d_k must be a positive int, got 0"),
    ],
)
def test_bad_position_init_and_d_k_are_refused(overrides, match):
    with pytest.raises(ValueError, match=match):
        TransformerConfig(10, 10, **overrides)


def test_config_defaults_are_the_base_model():
    cfg = TransformerConfig(100, 100)
    assert cfg.d_k is None and cfg.position_init == "xavier"  # d_k = d_model / h = 64
    assert (cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.dropout) == (6, 512, 2048, 8, 0.1)
    assert not cfg.norm_first and not cfg.learned_positions and cfg.tie_output
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 256
    assert dataclasses.replace(cfg, d_model=256).d_model == 256


def test_parameter_counts_match_the_formula():
    with torch.device("meta"):
        base = make_model(37_000, 37_000, shared_vocab=True)
    d, f, v, n = 512, 2048, 37_000, 6
    attn, ffn, norm = 4 * d * d + 4 * d, 2 * d * f + f + d, 2 * d
    expected = v * d + n * (attn + ffn + 2 * norm) + n * (2 * attn + ffn + 3 * norm) + v
    assert sum(p.numel() for p in base.parameters()) == expected


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (
            {"d_model": 30, "n_heads": 4},
            r"d_model must be divisible by n_heads, got d_model=30 and n_heads=4",
        ),
        ({"n_layers": 0}, r"n_layers must be a positive int, got 0"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
        ({"d_ff": 2.5}, r"d_ff must be a positive int, got 2.5"),
        ({"embedding_init": "zeros"}, r"embedding_init must be 'xavier' or 'normal', got 'zeros'"),
    ],
)
def test_bad_config_is_rejected(overrides, match):
    with pytest.raises(ValueError, match=match):
        make_model(11, 11, **{**SMALL, **overrides})


def test_shared_vocab_needs_equal_sizes():
    with pytest.raises(
        ValueError,
        match=r"shared_vocab=True needs src_vocab == tgt_vocab, got src_vocab=11 and tgt_vocab=12",
    ):
        make_model(11, 12, shared_vocab=True)


def test_bad_input_is_rejected():
    model = small_model(max_len=8)
    src_mask, tgt_mask = masks(SRC, TGT)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, vocab_size=11\)"):
        model(SRC + 10, TGT, src_mask, tgt_mask)
    with pytest.raises(ValueError, match=r"src and tgt must have the same batch size, got 2 and 1"):
        model(SRC, TGT[:1], src_mask, tgt_mask[:1])
    with pytest.raises(TypeError, match=r"src_mask must have dtype torch.bool.*got torch.float32"):
        model(SRC, TGT, src_mask.float(), tgt_mask)
    with pytest.raises(ValueError, match=r"src_mask of shape \(2, 1, 1, 4\) cannot broadcast"):
        model(SRC, TGT, src_mask[..., :4], tgt_mask)
    with pytest.raises(ValueError, match=r"tgt_mask of shape \(1, 1, 5, 5\) cannot broadcast"):
        model(SRC, TGT, src_mask, causal_mask(5))
    with pytest.raises(TypeError, match=r"src must be an integer tensor.*torch.float32"):
        model(SRC.float(), TGT, src_mask, tgt_mask)
    with pytest.raises(ValueError, match=r"tgt must have shape \(B, length\), got \(4,\)"):
        model(SRC, TGT[0], src_mask, tgt_mask)
    with pytest.raises(ValueError, match=r"tgt_is_causal=True replaces tgt_mask"):
        model(SRC, TGT, src_mask, tgt_mask, tgt_is_causal=True)
    long_src = torch.ones(2, 9, dtype=torch.long)
    with pytest.raises(ValueError, match=r"sequence length 9 exceeds max_len=8"):
        model(long_src, TGT, padding_mask(long_src, 0), tgt_mask)


@pytest.mark.parametrize(("norm_first", "d_k"), [(False, None), (True, None), (False, 3)])
def test_step_by_step_decoding_with_cache_equals_full_decoding(norm_first, d_k):
    model = small_model(norm_first=norm_first, d_k=d_k)  # d_k = 3: Table 3 (B)'s narrow heads
    src_mask = padding_mask(SRC, 0)
    tgt = torch.randint(1, 11, (2, 6))
    memory = model.encode(SRC, src_mask)
    full = model.decode(memory, src_mask, tgt, causal_mask(6))  # (B, T, D)
    cache = DecoderCache()
    steps = [model.decode(memory, src_mask, tgt[:, t : t + 1], None, cache) for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    self_kv, cross_kv = cache.layers[0]
    assert cache.length == 6 and len(cache.layers) == 2
    assert self_kv.k.shape == (2, 4, 6, d_k or 8)  # (B, H, T so far, Dk)
    assert cross_kv.k.shape == (2, 4, 5, d_k or 8)  # the memory, projected once
    assert cross_kv.v.shape == (2, 4, 5, 8)  # values: d_v = d_model / h whatever d_k


def test_cache_respects_the_positional_encoding_limit():
    model = small_model(max_len=3)
    memory = model.encode(SRC[:, :3])
    cache = DecoderCache()
    for t in range(3):
        model.decode(memory, None, TGT[:, t : t + 1], None, cache)
    with pytest.raises(ValueError, match=r"sequence length 4 exceeds max_len=3"):
        model.decode(memory, None, TGT[:, :1], None, cache)


@pytest.mark.parametrize("norm_first", [False, True])
def test_tgt_is_causal_equals_the_padding_and_causal_mask_at_real_positions(norm_first):
    model = small_model(norm_first=norm_first)
    src_mask, tgt_mask = masks(SRC, TGT)
    fused = model(SRC, TGT, src_mask, tgt_is_causal=True)  # the kernel's own causal mask
    real = TGT != 0  # (B, T): the target is padded on the right only
    torch.testing.assert_close(fused[real], model(SRC, TGT, src_mask, tgt_mask)[real])
    exact = model(SRC, TGT, src_mask, causal_mask(4))  # no padding: the very same mask
    torch.testing.assert_close(fused, exact)
    cache = DecoderCache()
    model.decode(model.encode(SRC, src_mask), src_mask, TGT[:, :1], None, cache)
    with pytest.raises(ValueError, match=r"tgt_is_causal=True needs an empty cache, got 1 cached"):
        model.decode(
            model.encode(SRC, src_mask), src_mask, TGT[:, 1:], None, cache, tgt_is_causal=True
        )


def test_attention_weights_are_returned_on_request():
    model = small_model()
    src_mask, tgt_mask = masks(SRC, TGT)
    logits, weights = model(SRC, TGT, src_mask, tgt_mask, need_weights=True)
    torch.testing.assert_close(logits, model(SRC, TGT, src_mask, tgt_mask))
    assert [w.shape for w in weights.encoder] == [(2, 4, 5, 5)] * 2  # N x (B, H, S, S)
    assert [w.shape for w in weights.decoder] == [(2, 4, 4, 4)] * 2  # N x (B, H, T, T)
    assert [w.shape for w in weights.cross] == [(2, 4, 4, 5)] * 2  # N x (B, H, T, S)
    for w in weights.encoder + weights.cross:  # nothing on the source pad of sentence 2
        assert (w[1, ..., 4] == 0).all()
    assert all((w.triu(1) == 0).all() for w in weights.decoder)  # causal


def test_scale_attention_reaches_every_attention_layer():
    """The configuration flows down through the constructors, no walk over the modules afterwards."""
    for scale in (True, False):
        model = make_model(11, 11, **SMALL, scale_attention=scale)
        layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
        assert len(layers) == 3 * SMALL["n_layers"] and all(m.scale is scale for m in layers)


def test_masks_are_checked_once_at_the_edge_and_the_layers_trust_them(monkeypatch):
    from importlib import import_module

    check_mask = import_module("annotated.model.scaled_dot_product").check_mask

    calls = []

    def counting(mask, shape, name="mask"):
        calls.append(name)
        return check_mask(mask, shape, name)

    for module in ("annotated.model.input_checks", "annotated.model.scaled_dot_product"):
        monkeypatch.setattr(import_module(module), "check_mask", counting)
    model = make_model(11, 11, n_layers=3, d_model=16, d_ff=32, n_heads=2, dropout=0.0)
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 7, 6], [1, 9, 0]])
    src_mask, tgt_mask = padding_mask(src, 0), padding_mask(tgt, 0) & causal_mask(3)
    model(src, tgt, src_mask, tgt_mask)
    assert sorted(calls) == [
        "src_mask",
        "tgt_mask",
    ]  # each once: encode the source's, decode the target's
    # decode alone with a source mask for another memory: the cross-attention layer refuses it
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 1, 3\) cannot broadcast"):
        model.decode(model.encode(src, src_mask), src_mask[:, :, :, :3], tgt, tgt_mask)
