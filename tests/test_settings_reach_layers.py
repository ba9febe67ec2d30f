"""Every setting reaches its layer (issue 32): each field of TransformerConfig, through make_model, and
each constructor argument of the model's pieces changes the modules it should, read off the built
modules and, where it is cheap, seen in what they compute.

A new field or argument fails `test_every_setting_is_checked` until a check below covers it.
"""

import dataclasses
import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated.model import (
    Decoder,
    DecoderLayer,
    Embeddings,
    Encoder,
    EncoderLayer,
    LayerNorm,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    SublayerConnection,
    TransformerConfig,
    make_model,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

# every flag the other way from the paper's default, and sizes that no default shares
ODD = dict(
    src_vocab=11, tgt_vocab=17, n_layers=3, d_model=24, d_ff=40, n_heads=3, d_k=5, dropout=0.3,
    max_len=20, norm_first=True, learned_positions=True, position_init="sinusoid",
    scale_attention=False, tie_output=False, shared_vocab=False, embedding_init="normal",
)  # fmt: skip
# the paper's flags, at a small size
PAPER = dict(src_vocab=13, tgt_vocab=13, n_layers=2, d_model=16, d_ff=32, n_heads=2, dropout=0.2)
PAPER |= dict(max_len=30, shared_vocab=True)


def of(model, kind):
    return [m for m in model.modules() if isinstance(m, kind)]


def std_near(table, expected):
    return abs(table.detach().std().item() - expected) < 0.25 * expected


# ---- TransformerConfig -> make_model: one check per field, true for any config -----------------


def check_vocabularies(model, cfg):
    assert model.src_embed.lut.weight.shape[0] == model.src_embed.vocab_size == cfg.src_vocab
    assert model.tgt_embed.lut.weight.shape[0] == model.tgt_embed.vocab_size == cfg.tgt_vocab
    assert model.generator.out_features == cfg.tgt_vocab
    src = torch.randint(0, cfg.src_vocab, (2, 5))
    assert model(src, src[:, :4] % cfg.tgt_vocab).shape == (2, 4, cfg.tgt_vocab)


def check_n_layers(model, cfg):
    assert len(model.encoder.layers) == len(model.decoder.layers) == cfg.n_layers
    for stack in (model.encoder.layers, model.decoder.layers):  # copies, not one layer N times
        assert len({p.data_ptr() for layer in stack for p in layer.parameters()}) == sum(
            1 for layer in stack for _ in layer.parameters()
        )
    _, weights = model(*tokens(cfg), need_weights=True)
    assert len(weights.encoder) == len(weights.decoder) == len(weights.cross) == cfg.n_layers


def check_d_model(model, cfg):
    d = cfg.d_model
    for m in (model.src_embed, model.tgt_embed):
        assert m.d_model == m.lut.embedding_dim == d
    for m in (model.src_pos, model.tgt_pos):
        assert (m.embedding.weight if m.learned else m.pe).shape[-1] == d
    for norm in of(model, LayerNorm):
        assert norm.weight.shape == norm.bias.shape == (d,)
    for mha in of(model, MultiHeadAttention):
        assert mha.d_model == mha.W_q.in_features == mha.W_o.out_features == d
    for ff in of(model, PositionwiseFeedForward):
        assert ff.w_1.in_features == ff.w_2.out_features == d
    assert model.encode(tokens(cfg)[0]).shape[-1] == d


def check_d_ff(model, cfg):
    ffs = of(model, PositionwiseFeedForward)
    assert len(ffs) == 2 * cfg.n_layers
    for ff in ffs:
        assert ff.w_1.out_features == ff.w_2.in_features == cfg.d_ff


def check_heads(model, cfg):  # n_heads and d_k
    d_k = cfg.d_k or cfg.d_model // cfg.n_heads
    mhas = of(model, MultiHeadAttention)
    assert len(mhas) == 3 * cfg.n_layers
    for mha in mhas:
        assert (mha.n_heads, mha.d_k, mha.d_v) == (cfg.n_heads, d_k, cfg.d_model // cfg.n_heads)
        assert mha.W_q.out_features == mha.W_k.out_features == cfg.n_heads * d_k
    src, tgt = tokens(cfg)
    _, weights = model(src, tgt, need_weights=True)
    for w in (*weights.encoder, *weights.decoder, *weights.cross):
        assert w.shape[:2] == (src.size(0), cfg.n_heads)


def check_dropout(model, cfg):
    drops = of(model, nn.Dropout)  # 2 positions; per layer: attention, feed-forward, sub-layers
    assert len(drops) == 2 + cfg.n_layers * (1 + 1 + 2) + cfg.n_layers * (2 + 1 + 3)
    assert all(m.p == cfg.dropout for m in drops)
    # seen at work: in training, every dropout zeroes about p of what it is given, scales the rest
    seen = {}

    def record(module, args, out):
        x = args[0]
        real = x != 0
        kept = real & (out != 0)
        torch.testing.assert_close(out[kept], x[kept] / (1 - cfg.dropout))
        seen[module] = 1 - kept.sum().item() / real.sum().item()

    hooks = [m.register_forward_hook(record) for m in drops]
    torch.manual_seed(0)
    src, tgt = tokens(cfg, B=8)
    model.train()(src, tgt, need_weights=True)  # the explicit attention path calls its dropout
    model.eval()
    for hook in hooks:
        hook.remove()
    assert len(seen) == len(drops)
    for share in seen.values():
        assert abs(share - cfg.dropout) < 0.1


def check_max_len(model, cfg):
    for pos in (model.src_pos, model.tgt_pos):
        table = pos.embedding.weight if pos.learned else pos.pe
        assert pos.max_len == table.shape[0] == cfg.max_len
    model.encode(torch.ones(1, cfg.max_len, dtype=torch.long))  # the longest it covers
    with pytest.raises(ValueError, match=f"max_len={cfg.max_len}"):
        model.encode(torch.ones(1, cfg.max_len + 1, dtype=torch.long))


def check_norm_first(model, cfg):
    subs = of(model, SublayerConnection)
    assert len(subs) == 5 * cfg.n_layers
    assert all(s.norm_first == cfg.norm_first for s in subs)
    for layer in (*model.encoder.layers, *model.decoder.layers):
        assert layer.norm_first == cfg.norm_first
    for stack in (model.encoder, model.decoder):  # pre-LN normalises the stack's output once more
        assert isinstance(stack.norm, LayerNorm if cfg.norm_first else nn.Identity)


def check_positions(model, cfg):  # learned_positions and position_init
    for pos in (model.src_pos, model.tgt_pos):
        assert pos.learned == cfg.learned_positions
        assert hasattr(pos, "embedding") == cfg.learned_positions
        names = {n for n, _ in pos.named_parameters()}
        assert names == ({"embedding.weight"} if cfg.learned_positions else set())
        if cfg.learned_positions:
            sinusoid, xavier = 0.5**0.5, math.sqrt(2 / (cfg.max_len + cfg.d_model))
            expected = sinusoid if cfg.position_init == "sinusoid" else xavier
            assert std_near(pos.embedding.weight, expected)


def check_scale_attention(model, cfg):
    assert all(mha.scale == cfg.scale_attention for mha in of(model, MultiHeadAttention))


def check_tie_output(model, cfg):
    assert (model.generator.weight is model.tgt_embed.lut.weight) == cfg.tie_output


def check_shared_vocab(model, cfg):
    assert (model.src_embed is model.tgt_embed) == cfg.shared_vocab


def check_embedding_init(model, cfg):
    for emb in (model.src_embed, model.tgt_embed):
        V, d = emb.lut.weight.shape
        normal, xavier = d**-0.5, math.sqrt(2 / (V + d))
        assert std_near(emb.lut.weight, normal if cfg.embedding_init == "normal" else xavier)


CONFIG_CHECKS = {
    "src_vocab": check_vocabularies,
    "tgt_vocab": check_vocabularies,
    "n_layers": check_n_layers,
    "d_model": check_d_model,
    "d_ff": check_d_ff,
    "n_heads": check_heads,
    "d_k": check_heads,
    "dropout": check_dropout,
    "max_len": check_max_len,
    "norm_first": check_norm_first,
    "learned_positions": check_positions,
    "position_init": check_positions,
    "scale_attention": check_scale_attention,
    "tie_output": check_tie_output,
    "shared_vocab": check_shared_vocab,
    "embedding_init": check_embedding_init,
}


def tokens(cfg, B=2, S=6, T=5):
    gen = torch.Generator().manual_seed(1)
    src = torch.randint(0, cfg.src_vocab, (B, S), generator=gen)
    return src, torch.randint(0, cfg.tgt_vocab, (B, T), generator=gen)


@pytest.mark.parametrize("options", [ODD, PAPER], ids=["every-flag-flipped", "paper"])
def test_every_config_field_reaches_its_modules(options):
    torch.manual_seed(0)
    model = make_model(**options).eval()
    cfg = model.cfg
    assert cfg == TransformerConfig(**options)
    for check in dict.fromkeys(CONFIG_CHECKS.values()):  # each check once
        check(model, cfg)


def test_the_two_configs_set_every_field_both_ways():
    """Each field differs between the two configs (or from the default), so each check can fail."""
    for f in dataclasses.fields(TransformerConfig):
        assert ODD[f.name] != PAPER.get(f.name, f.default), f.name


# ---- The pieces: each constructor argument, on its own ------------------------------------------


def x_small(d=8, spread=0.05):
    """Inputs whose variance is small, so that LayerNorm's eps changes its output visibly."""
    return torch.randn(2, 3, d, generator=torch.Generator().manual_seed(0)) * spread


@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_layer_norm_eps_and_width(eps):
    norm = LayerNorm(8, eps)
    assert (norm.eps, norm.weight.shape, norm.bias.shape) == (eps, (8,), (8,))
    x = x_small()
    torch.testing.assert_close(norm(x), F.layer_norm(x, (8,), eps=eps))


@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_connection_passes_dropout_and_placement(norm_first):
    block = SublayerConnection(8, dropout=0.3, norm_first=norm_first).eval()
    block.norm.eps = 0.1
    assert block.norm.weight.shape == (8,)
    assert block.dropout.p == 0.3 and block.norm_first == norm_first
    x, sub = x_small(), nn.Linear(8, 8)
    norm = lambda y: F.layer_norm(y, (8,), eps=0.1)  # noqa: E731
    expected = x + sub(norm(x)) if norm_first else norm(x + sub(x))
    torch.testing.assert_close(block(x, sub), expected)
    assert not torch.allclose(expected, F.layer_norm(x + sub(x), (8,)))  # eps shows here


@pytest.mark.parametrize(
    ("bias", "scale", "d_k", "fused"), [(True, True, None, True), (False, False, 3, False)]
)
def test_multi_head_attention_arguments(bias, scale, d_k, fused):
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2, dropout=0.3, bias=bias, scale=scale, d_k=d_k, fused=fused).eval()
    dk = d_k or 4
    assert (mha.n_heads, mha.d_k, mha.dropout.p, mha.scale, mha.fused) == (2, dk, 0.3, scale, fused)
    for W in (mha.W_q, mha.W_k, mha.W_v, mha.W_o):
        assert (W.bias is not None) == bias
    assert mha.W_q.out_features == mha.W_k.out_features == 2 * dk
    x = x_small(spread=1.0)
    _, weights = mha(x, x, x, need_weights=True)  # (B, H, T, T)
    q = mha.W_q(x).view(2, 3, 2, dk).transpose(1, 2)  # (B, H, T, dk)
    k = mha.W_k(x).view(2, 3, 2, dk).transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / (math.sqrt(dk) if scale else 1.0)
    torch.testing.assert_close(weights, scores.softmax(-1))
    # fused=False: the output is Eq. 1 by chapter 02's formula even without the weights, bit for bit
    assert torch.equal(mha(x, x, x), mha(x, x, x, need_weights=True)[0]) == (not fused)


def test_feed_forward_arguments():
    torch.manual_seed(0)
    ff = PositionwiseFeedForward(8, 20, dropout=0.3).eval()
    assert (ff.w_1.weight.shape, ff.w_2.weight.shape, ff.dropout.p) == ((20, 8), (8, 20), 0.3)
    x = x_small(spread=1.0)
    torch.testing.assert_close(ff(x), ff.w_2(torch.relu(ff.w_1(x))))


@pytest.mark.parametrize("kind", [EncoderLayer, DecoderLayer])
@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_arguments_reach_their_sublayers(kind, norm_first):
    layer = kind(12, 3, 20, dropout=0.3, norm_first=norm_first, scale_attention=False, d_k=2)
    mhas, subs = of(layer, MultiHeadAttention), of(layer, SublayerConnection)
    assert len(mhas) == (1 if kind is EncoderLayer else 2) and len(subs) == len(mhas) + 1
    for mha in mhas:
        assert (mha.d_model, mha.n_heads, mha.d_k, mha.scale, mha.dropout.p) == (
            12,
            3,
            2,
            False,
            0.3,
        )
    assert (layer.feed_forward.w_1.out_features, layer.feed_forward.dropout.p) == (20, 0.3)
    for sub in subs:
        assert (sub.norm.weight.numel(), sub.dropout.p, sub.norm_first) == (12, 0.3, norm_first)
    stack = (Encoder if kind is EncoderLayer else Decoder)(layer, 4)
    assert len(stack.layers) == 4
    assert isinstance(stack.norm, LayerNorm if norm_first else nn.Identity)


@pytest.mark.parametrize("learned", [False, True])
def test_positional_encoding_arguments(learned):
    pos = PositionalEncoding(6, dropout=0.3, max_len=9, learned=learned).eval()
    table = pos.embedding.weight if learned else pos.pe
    assert table.shape == (9, 6) and pos.dropout.p == 0.3 and pos.learned == learned
    x = torch.zeros(1, 9, 6)
    torch.testing.assert_close(pos(x), table[None].detach())


def test_embeddings_arguments():
    emb = Embeddings(7, 9)
    assert emb.lut.weight.shape == (7, 9)
    ids = torch.arange(7)[None]
    torch.testing.assert_close(emb(ids), emb.lut.weight[None].detach() * 3.0)  # sqrt(9)


PIECE_ARGS = {  # every constructor argument, and the test that checks it
    LayerNorm: {"d_model", "eps"},
    SublayerConnection: {"d_model", "dropout", "norm_first"},
    MultiHeadAttention: {"d_model", "n_heads", "dropout", "bias", "scale", "d_k", "fused"},
    PositionwiseFeedForward: {"d_model", "d_ff", "dropout"},
    EncoderLayer: {"d_model", "n_heads", "d_ff", "dropout", "norm_first", "scale_attention", "d_k"},
    DecoderLayer: {"d_model", "n_heads", "d_ff", "dropout", "norm_first", "scale_attention", "d_k"},
    Encoder: {"layer", "n_layers"},
    Decoder: {"layer", "n_layers"},
    PositionalEncoding: {"d_model", "dropout", "max_len", "learned"},
    Embeddings: {"vocab_size", "d_model"},
}


def test_every_setting_is_checked():
    assert {f.name for f in dataclasses.fields(TransformerConfig)} == set(CONFIG_CHECKS)
    for piece, args in PIECE_ARGS.items():
        assert set(inspect.signature(piece).parameters) == args, piece.__name__
