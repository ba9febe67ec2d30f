"""check.encoder_layer and check.decoder_layer see how a layer is wired (issue 40, item 1): correct
layers written independently pass, each wiring mistake fails with a message that names it, and a
structure the check cannot read fails rather than passes."""

import pytest
import torch
from torch import nn

from annotated import DecoderLayer, Encoder, EncoderLayer, make_model, sinusoidal_encoding
from annotated.check import decoder_layer, encoder_layer, model


def mask_for_torch(mask):
    return None if mask is None else ~mask[:, 0, 0]  # ours: True = may attend; PyTorch's: pad


class TorchEncoder(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d_model, n_heads, d_ff, dropout, batch_first=True, norm_first=norm_first
        )

    def forward(self, x, mask=None):
        return self.layer(x, src_key_padding_mask=mask_for_torch(mask))


class TorchDecoder(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(
            d_model, n_heads, d_ff, dropout, batch_first=True, norm_first=norm_first
        )

    def forward(self, x, memory, src_mask, tgt_mask):
        return self.layer(
            x, memory, tgt_mask=~tgt_mask[0, 0], memory_key_padding_mask=mask_for_torch(src_mask)
        )


class OwnNames(nn.Module):
    """Written without the package: nn.MultiheadAttention, an nn.Sequential FFN, a list of norms."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.mix = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.lns = nn.ModuleList([nn.LayerNorm(d_model), nn.LayerNorm(d_model)])
        self.drop = nn.Dropout(dropout)  # on each sub-layer's output, before the sum (§5.4)

    def forward(self, x, mask=None):
        pad = mask_for_torch(mask)
        x = self.lns[0](
            x + self.drop(self.mix(x, x, x, key_padding_mask=pad, need_weights=False)[0])
        )
        return self.lns[1](x + self.drop(self.mlp(x)))


class InlineAttention(nn.Module):
    """A correct layer whose attention is written inline: no module the check can watch."""

    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.qkv = nn.Parameter(torch.randn(3, d_model, d_model) / d_model**0.5)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.lns = nn.ModuleList([nn.LayerNorm(d_model), nn.LayerNorm(d_model)])

    def forward(self, x, mask=None):
        q, k, v = (x @ w for w in self.qkv)
        scores = (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~mask[:, 0], -1e9)
        x = self.lns[0](x + scores.softmax(-1) @ v)
        return self.lns[1](x + self.mlp(x))


def wiring_message(report):
    return next(r for r in report.results if r.name == "sublayers_wired")


@pytest.mark.parametrize("factory", [EncoderLayer, TorchEncoder, OwnNames])
def test_correct_encoder_layers_written_independently_pass(factory):
    report = encoder_layer(factory)
    assert report, str(report)


@pytest.mark.parametrize("factory", [DecoderLayer, TorchDecoder])
def test_correct_decoder_layers_written_independently_pass(factory):
    assert decoder_layer(factory), str(decoder_layer(factory))


def test_pre_ln_layers_pass_when_pre_ln_is_asked_for_and_fail_otherwise():
    def pre(cls):
        return lambda d, h, f: cls(d, h, f, norm_first=True)

    for cls in (EncoderLayer, TorchEncoder):
        assert encoder_layer(pre(cls), norm_first=True)
        assert "pre-LN" in wiring_message(encoder_layer(pre(cls))).message
    assert decoder_layer(pre(TorchDecoder), norm_first=True)
    assert not decoder_layer(pre(DecoderLayer))
    # the post-LN layer, asked for as pre-LN
    assert (
        "pre-LN is x + Sublayer(LayerNorm(x))"
        in wiring_message(encoder_layer(EncoderLayer, norm_first=True)).message
    )


def test_a_pre_ln_stack_needs_its_final_layernorm():
    def stack(d, h, f):
        return Encoder(EncoderLayer(d, h, f, norm_first=True), n_layers=2)

    assert encoder_layer(stack, norm_first=True, final_norm=True)
    unfinished = encoder_layer(lambda d, h, f: stack(d, h, f).layers, norm_first=True)
    assert not unfinished  # an nn.ModuleList is not even callable: no pass either way
    report = encoder_layer(stack, norm_first=True)  # graded as one layer: the output is normalised
    assert "normalises its output" in wiring_message(report).message


def test_an_unreadable_structure_fails_and_says_what_was_found():
    report = encoder_layer(InlineAttention)
    result = wiring_message(report)
    assert not report and not result.passed
    assert "no self-attention found" in result.message and "(mlp)" in result.message


@pytest.mark.parametrize(
    "wrong, said",
    [
        ("nores", "no residual connection"),
        ("ffn_first", "feed-forward network -> self-attention"),
        ("pre", "as in pre-LN"),
        ("no_norm", "with no LayerNorm after it"),
    ],
)
def test_wiring_mistakes_in_an_encoder_layer_are_named(wrong, said):
    class Mistaken(OwnNames):
        def forward(self, x, mask=None):
            pad = mask_for_torch(mask)

            def attend(y):
                return self.mix(y, y, y, key_padding_mask=pad, need_weights=False)[0]

            (n1, n2), d = self.lns, self.drop
            if wrong == "nores":
                return n2(d(self.mlp(n1(d(attend(x))))))
            if wrong == "ffn_first":
                x = n1(x + d(self.mlp(x)))
                return n2(x + d(attend(x)))
            if wrong == "pre":
                x = x + d(attend(n1(x)))
                return x + d(self.mlp(n2(x)))
            x = x + d(attend(x))  # no LayerNorm after the first residual
            return n2(x + d(self.mlp(x)))

    report = encoder_layer(Mistaken)
    also = {
        "nores": ["sublayer_outputs_dropped_at_rate"],  # no stream to carry the dropped entries
        "pre": ["output_is_layer_normalised"],
        "no_norm": ["gradients_reach_every_parameter"],
    }
    also = also.get(wrong, [])  # pre-LN's output is not normalised; the unused norm learns nothing
    assert report.failed == ["sublayers_wired", *also], str(report)
    assert said in wiring_message(report).message, str(report)


@pytest.mark.parametrize(
    "name, said",
    [
        ("DecoderNoResiduals", "alone: no residual connection"),
        ("DecoderCrossFirst", "encoder-decoder attention -> masked self-attention"),
        ("DecoderQueriesFromInput", "receives the layer's input x"),
        ("ContextFromTarget", "no attention takes its keys and values from the memory"),
        ("MemoryWithPositions", "takes its keys from a tensor that is not the memory"),
    ],
)
def test_wiring_mistakes_in_a_decoder_layer_are_named(name, said):
    import test_check_gallery

    report = decoder_layer(getattr(test_check_gallery, name))
    assert said in wiring_message(report).message, str(report)


class TorchTransformer(nn.Module):
    """A whole model around nn.Transformer, written without the package's layers."""

    def __init__(self, src_vocab, tgt_vocab, d_model=32, norm_first=False):
        super().__init__()
        self.d_model = d_model
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.body = nn.Transformer(
            d_model, 4, 2, 2, 64, 0.0, batch_first=True, norm_first=norm_first
        )
        self.out = nn.Linear(d_model, tgt_vocab)

    def embed(self, table, tokens):
        pe = sinusoidal_encoding(tokens.size(1), self.d_model)
        return table(tokens) * self.d_model**0.5 + pe

    def forward(self, src, tgt, src_mask, tgt_mask):
        pad = ~src_mask[:, 0, 0]
        states = self.body(
            self.embed(self.src_embed, src),
            self.embed(self.tgt_embed, tgt),
            tgt_mask=~tgt_mask[0, 0],
            src_key_padding_mask=pad,
            memory_key_padding_mask=pad,
        )
        return self.out(states)


def test_correct_models_written_independently_pass_and_pre_ln_only_when_asked():
    assert model(lambda s, t: make_model(s, t, d_model=32, d_ff=64, n_layers=2, n_heads=4))
    assert model(TorchTransformer)
    pre = model(lambda s, t: TorchTransformer(s, t, norm_first=True))
    assert "pre-LN" in wiring_message(pre).message
    assert model(lambda s, t: TorchTransformer(s, t, norm_first=True), norm_first=True)
