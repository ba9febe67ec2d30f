"""DecoderLayer and Decoder (§3.1) against nn.TransformerDecoderLayer / nn.TransformerDecoder."""

import pytest
import torch
from torch import nn

from annotated.model import Decoder, DecoderLayer, causal_mask, padding_mask

from torch_reference import copy_decoder_layer, copy_stack, randomize

pytestmark = pytest.mark.usefixtures("no_fast_path")
SRC = torch.tensor([[5, 3, 8, 6, 2], [7, 4, 1, 0, 0]])
TGT = torch.tensor([[9, 4, 6, 2], [3, 8, 0, 0]])
SRC_MASK = padding_mask(SRC, 0)  # (B, 1, 1, S)
TGT_MASK = padding_mask(TGT, 0) & causal_mask(4)  # (B, 1, T, T)
REAL = padding_mask(TGT, 0)[:, 0, 0]  # (B, T)


def torch_kwargs():
    return {
        "tgt_mask": ~causal_mask(4)[0, 0],
        "tgt_key_padding_mask": ~REAL,
        "memory_key_padding_mask": ~SRC_MASK[:, 0, 0],
    }


def torch_layer(norm_first):
    return nn.TransformerDecoderLayer(
        32, 4, 64, dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first
    ).eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_equals_torch(norm_first):
    ours = randomize(DecoderLayer(32, 4, 64, dropout=0.0, norm_first=norm_first)).eval()
    theirs = torch_layer(norm_first)
    copy_decoder_layer(ours, theirs)
    y, memory = torch.randn(2, 4, 32), torch.randn(2, 5, 32)
    got, expected = ours(y, memory, SRC_MASK, TGT_MASK), theirs(y, memory, **torch_kwargs())
    torch.testing.assert_close(got[REAL], expected[REAL])
    torch.testing.assert_close(ours(y, memory, None, None), theirs(y, memory))
    print(f"layer norm_first={norm_first}: max |diff| = {(got - expected)[REAL].abs().max():.2e}")


@pytest.mark.parametrize("norm_first", [False, True])
def test_stack_equals_torch(norm_first):
    ours = randomize(
        Decoder(DecoderLayer(32, 4, 64, dropout=0.0, norm_first=norm_first), 3), std=0.2
    )
    ours.eval()
    theirs = nn.TransformerDecoder(
        torch_layer(norm_first), 3, norm=nn.LayerNorm(32) if norm_first else None
    ).eval()
    copy_stack(ours, theirs, copy_decoder_layer)
    y, memory = torch.randn(2, 4, 32), torch.randn(2, 5, 32)
    got, expected = ours(y, memory, SRC_MASK, TGT_MASK), theirs(y, memory, **torch_kwargs())
    torch.testing.assert_close(got[REAL], expected[REAL])
    print(f"stack norm_first={norm_first}: max |diff| = {(got - expected)[REAL].abs().max():.2e}")


def test_causality():
    torch.manual_seed(0)
    dec = Decoder(DecoderLayer(32, 4, 64, dropout=0.0), 2).eval()
    y, memory = torch.randn(2, 6, 32), torch.randn(2, 5, 32)
    for t in range(5):
        y2 = y.clone()
        y2[:, t + 1 :] = torch.randn(2, 5 - t, 32)
        a, b = dec(y, memory, SRC_MASK, causal_mask(6)), dec(y2, memory, SRC_MASK, causal_mask(6))
        torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1])


def test_source_padding_cannot_change_outputs():
    torch.manual_seed(0)
    dec = Decoder(DecoderLayer(32, 4, 64, dropout=0.0), 2).eval()
    y, memory = torch.randn(2, 4, 32), torch.randn(2, 5, 32)
    memory2 = memory.clone()
    memory2[1, 3:] = 40 * torch.randn(2, 32)  # the pad positions of sentence 2
    torch.testing.assert_close(
        dec(y, memory, SRC_MASK, TGT_MASK)[REAL], dec(y, memory2, SRC_MASK, TGT_MASK)[REAL]
    )


def test_cross_attention_reads_the_memory():
    torch.manual_seed(0)
    dec = Decoder(DecoderLayer(32, 4, 64, dropout=0.0), 1).eval()
    y = torch.randn(1, 4, 32)
    a, b = dec(y, torch.randn(1, 5, 32)), dec(y, torch.randn(1, 5, 32))
    assert (a - b).abs().max() > 1e-2


def test_gradients_reach_every_parameter():
    dec = Decoder(DecoderLayer(16, 2, 32, dropout=0.0), 2)
    dec(torch.randn(2, 4, 16), torch.randn(2, 5, 16), None, causal_mask(4)).pow(2).sum().backward()
    for name, p in dec.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_n_layers_must_be_positive():
    with pytest.raises(ValueError, match="n_layers must be a positive int, got 0"):
        Decoder(DecoderLayer(16, 2, 32), 0)
