"""Tests for annotated.embeddings: the scaled look-up table of §3.4."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from annotated.model import Embeddings, make_model
from annotated.model.input_checks import is_plain_cpu_tensor


@settings(max_examples=20, deadline=None)
@given(
    vocab_size=st.integers(1, 50),
    d_model=st.integers(1, 64),
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
)
def test_lookup_times_sqrt_d_model(vocab_size, d_model, shape):
    torch.manual_seed(0)
    emb = Embeddings(vocab_size, d_model)
    tokens = torch.randint(0, vocab_size, shape)
    out = emb(tokens)
    assert out.shape == (*shape, d_model)
    assert_close(out, emb.lut.weight[tokens] * math.sqrt(d_model))
    assert_close(out, nn.functional.embedding(tokens, emb.lut.weight) * math.sqrt(d_model))


def test_int32_ids_and_boundary_ids_are_accepted():
    emb = Embeddings(10, 4)
    ids = torch.tensor([[0, 9]], dtype=torch.int32)
    assert_close(emb(ids), emb(ids.long()))


def test_empty_batch_is_fine():
    assert Embeddings(10, 4)(torch.empty(0, 3, dtype=torch.long)).shape == (0, 3, 4)


def test_gradient_reaches_only_used_rows_scaled():
    emb = Embeddings(10, 9)
    emb(torch.tensor([[2, 5, 2]])).sum().backward()
    grad = emb.lut.weight.grad
    assert_close(grad[2], torch.full((9,), 2 * 3.0))  # used twice, times sqrt(9)
    assert_close(grad[5], torch.full((9,), 3.0))
    assert grad[[0, 1, 3, 4, 6, 7, 8, 9]].abs().sum() == 0


def test_weight_can_be_tied_to_the_output_projection():
    emb = Embeddings(12, 8)
    generator = nn.Linear(8, 12, bias=False)
    generator.weight = emb.lut.weight
    h = torch.randn(2, 3, 8)
    assert_close(generator(h), h @ emb.lut.weight.T)
    assert len(list(nn.ModuleList([emb, generator]).parameters())) == 1


def edge_model():
    """The full model: the ids are checked where they enter it, the embedding layer trusts them."""
    return make_model(10, 10, n_layers=1, d_model=8, d_ff=16, n_heads=2).eval()


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([[0, 10]], r"src: token ids must lie in \[0, vocab_size=10\), got ids from 0 to 10"),
        ([[-1, 3]], r"src: token ids must lie in \[0, vocab_size=10\), got ids from -1 to 3"),
    ],
)
def test_out_of_range_ids_raise_at_the_models_edge(ids, message):
    with pytest.raises(ValueError, match=message):
        edge_model().encode(torch.tensor(ids))
    memory = edge_model().encode(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match=message.replace("src", "tgt")):
        edge_model().decode(memory, None, torch.tensor(ids), None)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.uint8])
def test_non_integer_ids_raise_at_the_models_edge(dtype):
    with pytest.raises(TypeError, match=rf"src must be an integer tensor.*{dtype}"):
        edge_model().encode(torch.zeros(1, 3, dtype=dtype))


def test_ids_are_read_only_where_that_costs_no_wait():
    """Off the CPU the range check would wait for the device: the model skips it there.

    A tensor on the `meta` device has no values, so reading one (min/max) would raise."""
    emb = Embeddings(10, 4).to("meta")
    out = emb(torch.zeros(2, 3, dtype=torch.long, device="meta"))
    assert out.shape == (2, 3, 4)
    assert is_plain_cpu_tensor(torch.zeros(1)) and not is_plain_cpu_tensor(
        torch.zeros(1, device="meta")
    )
