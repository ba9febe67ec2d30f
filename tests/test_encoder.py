"""EncoderLayer and Encoder (§3.1) against nn.TransformerEncoderLayer / nn.TransformerEncoder."""

import pytest
import torch
from torch import nn

from annotated.model import Encoder, EncoderLayer, padding_mask

from torch_reference import copy_encoder_layer, copy_stack, randomize

pytestmark = pytest.mark.usefixtures("no_fast_path")
TOKENS = torch.tensor([[5, 3, 8, 6, 2, 9], [7, 4, 1, 0, 0, 0], [2, 2, 0, 0, 0, 0]])
MASK = padding_mask(TOKENS, 0)  # (B, 1, 1, S)
REAL = MASK[:, 0, 0]  # (B, S)


def torch_layer(norm_first):
    return nn.TransformerEncoderLayer(
        32, 4, 64, dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first
    ).eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_layer_equals_torch(norm_first):
    ours = randomize(EncoderLayer(32, 4, 64, dropout=0.0, norm_first=norm_first)).eval()
    theirs = torch_layer(norm_first)
    copy_encoder_layer(ours, theirs)
    x = torch.randn(3, 6, 32)
    torch.testing.assert_close(ours(x), theirs(x))  # no mask: every position
    got, expected = ours(x, MASK), theirs(x, src_key_padding_mask=~REAL)
    torch.testing.assert_close(got[REAL], expected[REAL])
    print(f"layer norm_first={norm_first}: max |diff| = {(got - expected)[REAL].abs().max():.2e}")


@pytest.mark.parametrize("norm_first", [False, True])
def test_stack_equals_torch(norm_first):
    ours = randomize(
        Encoder(EncoderLayer(32, 4, 64, dropout=0.0, norm_first=norm_first), 3), std=0.2
    )
    ours.eval()
    theirs = nn.TransformerEncoder(
        torch_layer(norm_first),
        3,
        norm=nn.LayerNorm(32) if norm_first else None,
        enable_nested_tensor=False,
    ).eval()
    copy_stack(ours, theirs, copy_encoder_layer)
    x = torch.randn(3, 6, 32)
    got, expected = ours(x, MASK), theirs(x, src_key_padding_mask=~REAL)
    torch.testing.assert_close(got[REAL], expected[REAL])
    torch.testing.assert_close(ours(x), theirs(x))
    print(f"stack norm_first={norm_first}: max |diff| = {(got - expected)[REAL].abs().max():.2e}")


def test_layers_are_independent_copies():
    enc = Encoder(EncoderLayer(16, 2, 32), 4)
    assert len(enc.layers) == 4
    ptrs = {layer.feed_forward.w_1.weight.data_ptr() for layer in enc.layers}
    assert len(ptrs) == 4
    assert isinstance(enc.norm, nn.Identity)  # post-LN: no final norm
    assert not isinstance(Encoder(EncoderLayer(16, 2, 32, norm_first=True), 2).norm, nn.Identity)


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_cannot_change_real_positions(norm_first):
    torch.manual_seed(0)
    enc = Encoder(EncoderLayer(32, 4, 64, dropout=0.0, norm_first=norm_first), 2).eval()
    x = torch.randn(1, 3, 32)
    alone = enc(x)
    padded = torch.cat([x, 30 * torch.randn(1, 4, 32)], dim=1)
    mask = padding_mask(torch.tensor([[1, 1, 1, 0, 0, 0, 0]]), 0)
    torch.testing.assert_close(enc(padded, mask)[:, :3], alone)


def test_batch_independence():
    torch.manual_seed(0)
    enc = Encoder(EncoderLayer(32, 4, 64, dropout=0.0), 2).eval()
    x = torch.randn(3, 6, 32)
    full = enc(x, MASK)
    for b in range(3):
        torch.testing.assert_close(enc(x[b : b + 1], MASK[b : b + 1]), full[b : b + 1])


def test_gradients_reach_every_parameter():
    enc = Encoder(EncoderLayer(16, 2, 32, dropout=0.0), 2)
    enc(torch.randn(2, 5, 16)).pow(2).sum().backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_n_layers_must_be_positive():
    with pytest.raises(ValueError, match="n_layers must be a positive int, got 0"):
        Encoder(EncoderLayer(16, 2, 32), 0)
