"""Padding and look-ahead masks (§3.2.3): convention bool, True = may attend."""

import pytest
import torch

from annotated.model import attention, causal_mask, padding_mask


def test_padding_mask_shape_and_values():
    tokens = torch.tensor([[5, 6, 7], [8, 0, 0]])
    mask = padding_mask(tokens, pad_id=0)
    assert mask.dtype == torch.bool and mask.shape == (2, 1, 1, 3)
    assert mask[:, 0, 0].tolist() == [[True, True, True], [True, False, False]]


def test_padding_mask_respects_any_pad_id():
    tokens = torch.tensor([[1, 2, 3]])
    assert padding_mask(tokens, pad_id=3)[0, 0, 0].tolist() == [True, True, False]


@pytest.mark.parametrize("size", [1, 2, 7])
def test_causal_mask_is_lower_triangular(size):
    mask = causal_mask(size)
    assert mask.dtype == torch.bool and mask.shape == (1, 1, size, size)
    for t in range(size):
        for s in range(size):
            assert mask[0, 0, t, s].item() == (s <= t)


def test_masks_combine_by_broadcasting():
    tokens = torch.tensor([[4, 5, 6, 7], [4, 5, 0, 0]])
    combined = padding_mask(tokens, 0) & causal_mask(4)
    assert combined.shape == (2, 1, 4, 4)
    assert combined[0, 0].equal(causal_mask(4)[0, 0])
    assert not combined[1, 0, :, 2:].any()


def test_causal_mask_hides_the_future_in_attention():
    torch.manual_seed(0)
    x = torch.randn(1, 1, 6, 8)
    out, _ = attention(x, x, x, mask=causal_mask(6))
    y = x.clone()
    y[..., 4:, :] = torch.randn(2, 8)  # change the last two positions
    out2, _ = attention(y, y, y, mask=causal_mask(6))
    torch.testing.assert_close(out[..., :4, :], out2[..., :4, :])
    assert not torch.allclose(out[..., 4:, :], out2[..., 4:, :])


def test_tiny_fill_leaks_and_proper_fill_does_not():
    """The pitfall from the notes: a fill of -1e-12 hides nothing; ours hides exactly."""
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 5, 4)
    mask = padding_mask(torch.tensor([[1, 2, 3, 0, 0]]), 0)
    scores = q @ k.transpose(-2, -1) / 2
    leaky = scores.masked_fill(~mask, -1e-12).softmax(-1)
    _, ours = attention(q, k, k, mask=mask)
    assert leaky[..., 3:].sum() > 0.05
    assert ours[..., 3:].sum() == 0


@pytest.mark.parametrize(
    ("tokens", "error", "match"),
    [
        (torch.tensor([[1.0, 2.0]]), TypeError, r"tokens must be an integer tensor.*torch.float32"),
        (torch.tensor([[True, False]]), TypeError, r"tokens must be an integer tensor.*torch.bool"),
        (
            torch.tensor([[1, 2]], dtype=torch.uint8),
            TypeError,
            r"\(torch.long or torch.int\), got torch.uint8",
        ),
        ([[1, 2]], TypeError, r"tokens must be a torch.Tensor of token ids, got list"),
        (torch.tensor([1, 2, 3]), ValueError, r"tokens must have shape \(B, length\), got \(3,\)"),
    ],
)
def test_padding_mask_rejects_bad_tokens(tokens, error, match):
    with pytest.raises(error, match=match):
        padding_mask(tokens, 0)


@pytest.mark.parametrize("size", [0, -3, 2.5, True, "4"])
def test_causal_mask_rejects_bad_size(size):
    with pytest.raises(ValueError, match=r"size must be a positive int.*got"):
        causal_mask(size)
