"""MultiHeadAttention (§3.2.2) proven equal to torch.nn.MultiheadAttention on copied weights."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from annotated.model import MultiHeadAttention, attention, causal_mask, padding_mask

from torch_reference import copy_attention


def make_pair(d_model: int, n_heads: int, seed: int = 0, bias: bool = True):
    """Our layer and PyTorch's, in eval mode, dropout 0, sharing the same weights."""
    torch.manual_seed(seed)
    ours = MultiHeadAttention(d_model, n_heads, dropout=0.0, bias=bias).eval()
    theirs = nn.MultiheadAttention(
        d_model, n_heads, dropout=0.0, bias=bias, batch_first=True
    ).eval()
    copy_attention(ours, theirs)
    return ours, theirs


@pytest.fixture(autouse=True)
def no_fast_path():
    """Keep nn.MultiheadAttention on its reference (math) path."""
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(before)


def run_theirs(theirs, q, k, v, **kw):
    return theirs(q, k, v, need_weights=False, **kw)[0]


def run_ours(ours, q, k, v, need_weights: bool, **kw):
    """Our layer's output through the fused kernel, or through Eq. 1 when the weights are asked for."""
    out = ours(q, k, v, need_weights=need_weights, **kw)
    return out[0] if need_weights else out


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_equals_torch_without_mask(need_weights, bias):
    ours, theirs = make_pair(32, 4, bias=bias)
    q, kv = torch.randn(3, 5, 32), torch.randn(3, 7, 32)  # cross-attention: T=5, S=7
    torch.testing.assert_close(
        run_ours(ours, q, kv, kv, need_weights), run_theirs(theirs, q, kv, kv)
    )


@pytest.mark.parametrize("need_weights", [False, True])
def test_equals_torch_with_padding_mask(need_weights):
    ours, theirs = make_pair(32, 8)
    tokens = torch.tensor([[3, 4, 5, 6, 7, 8], [3, 4, 5, 0, 0, 0], [9, 0, 0, 0, 0, 0]])
    x = torch.randn(3, 6, 32)
    mask = padding_mask(tokens, 0)  # (B, 1, 1, S), True = attend
    expected = run_theirs(theirs, x, x, x, key_padding_mask=~mask[:, 0, 0])  # theirs: True = ignore
    torch.testing.assert_close(run_ours(ours, x, x, x, need_weights, mask=mask), expected)


@pytest.mark.parametrize("need_weights", [False, True])
def test_equals_torch_with_causal_mask(need_weights):
    ours, theirs = make_pair(16, 2)
    x = torch.randn(2, 9, 16)
    expected = run_theirs(theirs, x, x, x, attn_mask=~causal_mask(9)[0, 0])
    torch.testing.assert_close(run_ours(ours, x, x, x, need_weights, mask=causal_mask(9)), expected)


@pytest.mark.parametrize("need_weights", [False, True])
def test_is_causal_equals_torch_with_causal_mask(need_weights):
    """is_causal=True (the fused kernel's own causal mask) against PyTorch given the mask tensor."""
    ours, theirs = make_pair(16, 2)
    x = torch.randn(2, 9, 16)
    expected = run_theirs(theirs, x, x, x, attn_mask=~causal_mask(9)[0, 0])
    torch.testing.assert_close(run_ours(ours, x, x, x, need_weights, is_causal=True), expected)
    torch.testing.assert_close(ours(x, x, x, is_causal=True), ours(x, x, x, mask=causal_mask(9)))


def test_returned_weights_match_torch_average_and_shape():
    ours, theirs = make_pair(16, 4)
    x = torch.randn(2, 5, 16)
    _, weights = ours(x, x, x, mask=causal_mask(5), need_weights=True)
    assert weights.shape == (2, 4, 5, 5)
    _, their_weights = theirs(x, x, x, attn_mask=~causal_mask(5)[0, 0], average_attn_weights=False)
    torch.testing.assert_close(weights, their_weights)


@settings(max_examples=20, deadline=None)
@given(
    batch=st.integers(1, 3),
    t=st.integers(1, 8),
    s=st.integers(1, 8),
    n_heads=st.sampled_from([1, 2, 4]),
    d_k=st.integers(1, 6),
    seed=st.integers(0, 1000),
)
def test_equals_torch_over_random_shapes(batch, t, s, n_heads, d_k, seed):
    d_model = n_heads * d_k
    ours, theirs = make_pair(d_model, n_heads, seed=seed)
    q, kv = torch.randn(batch, t, d_model), torch.randn(batch, s, d_model)
    lengths = torch.randint(1, s + 1, (batch,))
    mask = (torch.arange(s)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
    expected = run_theirs(theirs, q, kv, kv, key_padding_mask=~mask[:, 0, 0])
    torch.testing.assert_close(ours(q, kv, kv, mask=mask), expected)
    torch.testing.assert_close(ours(q, kv, kv, mask=mask, need_weights=True)[0], expected)


def test_equals_h_separate_single_head_attentions():
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 3, dropout=0.0).eval()
    x = torch.randn(2, 5, 24)
    heads = []
    for i in range(3):
        rows = slice(i * 8, (i + 1) * 8)
        q = x @ mha.W_q.weight[rows].T + mha.W_q.bias[rows]
        k = x @ mha.W_k.weight[rows].T + mha.W_k.bias[rows]
        v = x @ mha.W_v.weight[rows].T + mha.W_v.bias[rows]
        heads.append(attention(q, k, v)[0])
    torch.testing.assert_close(mha(x, x, x), mha.W_o(torch.cat(heads, dim=-1)))


@pytest.mark.parametrize("need_weights", [False, True])
def test_narrower_queries_and_keys_follow_the_formula(need_weights):
    """Table 3 (B): d_k below d_model / h for queries and keys; values keep d_v = d_model / h."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 3, dropout=0.0, d_k=2).eval()
    assert (mha.d_k, mha.d_v) == (2, 8)
    assert mha.W_q.weight.shape == mha.W_k.weight.shape == (6, 24) and mha.W_v.weight.shape == (
        24,
        24,
    )
    x, mask = torch.randn(2, 5, 24), torch.ones(5, 5, dtype=torch.bool).tril()
    heads = []
    for i in range(3):
        qk, v_rows = slice(i * 2, (i + 1) * 2), slice(i * 8, (i + 1) * 8)
        q = x @ mha.W_q.weight[qk].T + mha.W_q.bias[qk]  # (B, T, 2)
        k = x @ mha.W_k.weight[qk].T + mha.W_k.bias[qk]
        v = x @ mha.W_v.weight[v_rows].T + mha.W_v.bias[v_rows]  # (B, T, 8)
        heads.append(attention(q, k, v, mask)[0])  # scaled by sqrt(2), the heads' own d_k
    out = mha(x, x, x, mask=mask, need_weights=need_weights)
    out = out[0] if need_weights else out
    torch.testing.assert_close(out, mha.W_o(torch.cat(heads, dim=-1)))
    default = MultiHeadAttention(24, 3, d_k=None)
    assert default.d_k == default.d_v == 8


@pytest.mark.parametrize("d_k", [0, -1, 2.0, True])
def test_d_k_must_be_a_positive_int(d_k):
    with pytest.raises(
        ValueError, match=rf"d_k must be a positive int, or None .* got d_k={d_k!r}"
    ):
        MultiHeadAttention(24, 3, d_k=d_k)


class ViewOnlyHeads(MultiHeadAttention):
    """The common bug: split heads with a bare view, without the transpose."""

    def split_heads(self, x):
        B, T, _ = x.shape
        return x.view(B, self.n_heads, T, self.d_k)

    def merge_heads(self, x):
        B, _, T, _ = x.shape
        return x.reshape(B, T, self.d_model)


def test_equality_check_catches_view_without_transpose():
    ours, theirs = make_pair(32, 4)
    buggy = ViewOnlyHeads(32, 4, dropout=0.0).eval()
    buggy.load_state_dict(ours.state_dict())
    x = torch.randn(2, 6, 32)
    expected = run_theirs(theirs, x, x, x)
    torch.testing.assert_close(ours(x, x, x), expected)
    assert (buggy(x, x, x) - expected).abs().max() > 1e-2  # same shapes, wrong numbers


def test_causality_future_keys_cannot_change_earlier_outputs():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.0).eval()
    x = torch.randn(2, 8, 16)
    y = x.clone()
    y[:, 5:] = torch.randn(2, 3, 16)
    out_x, out_y = mha(x, x, x, mask=causal_mask(8)), mha(y, y, y, mask=causal_mask(8))
    torch.testing.assert_close(out_x[:, :5], out_y[:, :5])
    assert not torch.allclose(out_x[:, 5:], out_y[:, 5:])


@pytest.mark.parametrize("need_weights", [False, True])
def test_pad_keys_and_values_cannot_change_outputs(need_weights):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.0).eval()
    tokens = torch.tensor([[5, 6, 7, 0, 0]])
    q, kv = torch.randn(1, 3, 16), torch.randn(1, 5, 16)
    kv2 = kv.clone()
    kv2[:, 3:] = 100 * torch.randn(1, 2, 16)
    mask = padding_mask(tokens, 0)
    torch.testing.assert_close(
        run_ours(mha, q, kv, kv, need_weights, mask=mask),
        run_ours(mha, q, kv2, kv2, need_weights, mask=mask),
    )


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_row_is_finite(need_weights):
    mha = MultiHeadAttention(8, 2, dropout=0.0).eval()
    x = torch.randn(1, 3, 8, requires_grad=True)
    mask = torch.zeros(1, 1, 3, 3, dtype=torch.bool)
    mask[..., 0, :] = True  # only query 0 may look at anything
    out = run_ours(mha, x, x, x, need_weights, mask=mask)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_dropout_is_active_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2, dropout=0.5)
    x = torch.randn(2, 6, 16)
    assert not torch.allclose(mha(x, x, x), mha(x, x, x))  # training: two different dropout draws
    mha.eval()
    torch.testing.assert_close(mha(x, x, x), mha(x, x, x))


def test_gradients_reach_every_parameter():
    mha = MultiHeadAttention(16, 4, dropout=0.0)
    x = torch.randn(2, 5, 16)
    mha(x, x, x, mask=causal_mask(5)).pow(2).sum().backward()
    for name, p in mha.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


@pytest.mark.parametrize(("d_model", "n_heads"), [(10, 3), (8, 0), (6, 4)])
def test_d_model_must_be_divisible_by_n_heads(d_model, n_heads):
    with pytest.raises(
        ValueError,
        match=rf"d_model must be divisible by n_heads, got d_model={d_model} and n_heads={n_heads}",
    ):
        MultiHeadAttention(d_model, n_heads)


# ---- Inputs refused by name (the layer is public: the README calls it) ---------------------------


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize(
    ("mask", "error", "match"),
    [
        (
            torch.ones(2, 1, 1, 5),
            TypeError,
            r"mask must have dtype torch\.bool.*got torch\.float32",
        ),
        (
            torch.zeros(2, 1, 1, 5),
            TypeError,
            r"mask must have dtype torch\.bool.*got torch\.float32",
        ),
        (
            torch.ones(2, 1, 1, 5, dtype=torch.long),
            TypeError,
            r"mask must have dtype.*torch\.int64",
        ),
        (
            torch.ones(2, 1, 1, 4, dtype=torch.bool),
            ValueError,
            r"mask of shape \(2, 1, 1, 4\) cannot",
        ),
    ],
)
def test_a_mask_that_is_not_bool_or_does_not_fit_is_refused(
    mask, error, match, need_weights, training, fused, is_causal
):
    """On every path: the kernel or attention, with or without the weights and is_causal, in either mode."""
    mha = MultiHeadAttention(32, 4, fused=fused).train(training)
    x = torch.randn(2, 5, 32)
    with pytest.raises(error, match=match):
        mha(x, x, x, mask=mask, need_weights=need_weights, is_causal=is_causal)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("need_weights", [False, True])
def test_a_mask_beside_is_causal_is_refused(need_weights, fused):
    """is_causal=True stands for the causal mask: a mask tensor as well is refused on both paths alike."""
    mha = MultiHeadAttention(32, 4, fused=fused).eval()
    x = torch.randn(2, 5, 32)
    with pytest.raises(
        ValueError, match=r"^is_causal=True stands for the causal mask, so mask must be None$"
    ):
        mha(x, x, x, mask=causal_mask(5), need_weights=need_weights, is_causal=True)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("which", ["query", "key", "value"])
def test_an_input_whose_width_is_not_d_model_is_refused_by_name(which, need_weights):
    mha = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 5, 32)
    given = {"query": x, "key": x, "value": x, which: torch.randn(2, 5, 16)}
    with pytest.raises(
        ValueError, match=rf"^{which} must have shape \(B, L, d_model=32\), got \(2, 5, 16\)$"
    ):
        mha(**given, need_weights=need_weights)


def test_a_bool_mask_reaches_the_kernel_unchanged():
    """The check reads only the mask's dtype and shape: the output is the kernel's, bit for bit."""
    mha = MultiHeadAttention(32, 4, dropout=0.0).eval()
    x, mask = (
        torch.randn(2, 5, 32),
        padding_mask(torch.tensor([[4, 8, 3, 9, 2], [7, 5, 1, 0, 0]]), 0),
    )
    q, k, v = (mha.split_heads(w(x)) for w in (mha.W_q, mha.W_k, mha.W_v))  # (B, H, T, Dk) each
    kernel = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, Dv)
    assert torch.equal(mha(x, x, x, mask=mask), mha.W_o(mha.merge_heads(kernel)))


def test_fused_false_attends_with_chapter_02s_attention():
    """fused=False: the output is attention's (chapter 02), bit for bit, and it equals the kernel's."""
    mha = MultiHeadAttention(32, 4, dropout=0.0, fused=False).eval()
    x, mask = (
        torch.randn(2, 5, 32),
        padding_mask(torch.tensor([[4, 8, 3, 9, 2], [7, 5, 1, 0, 0]]), 0) & causal_mask(5),
    )
    q, k, v = (mha.split_heads(w(x)) for w in (mha.W_q, mha.W_k, mha.W_v))  # (B, H, T, Dk) each
    heads, _ = attention(q, k, v, mask)  # (B, H, T, Dv)
    assert torch.equal(mha(x, x, x, mask=mask), mha.W_o(mha.merge_heads(heads)))
    mha.fused = True
    torch.testing.assert_close(mha(x, x, x, mask=mask), mha.W_o(mha.merge_heads(heads)))


@pytest.mark.parametrize("need_weights", [False, True])
def test_a_query_holding_nan_gives_nan_in_its_row_only(need_weights):
    """The kernel returns 0 for a NaN query row where Eq. 1 gives NaN: the layer keeps the NaN."""
    mha = MultiHeadAttention(32, 4, dropout=0.0).eval()
    x = torch.randn(2, 5, 32)
    broken = x.clone()
    broken[1, 2, 0] = float("nan")
    out = run_ours(mha, broken, x, x, need_weights)
    assert out[1, 2].isnan().all() and int(out.isnan().sum()) == out[1, 2].numel()
