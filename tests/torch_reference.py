"""Copy our modules' weights into PyTorch's own, name by name, for the equivalence tests.

PyTorch packs W_q, W_k, W_v into one `in_proj_weight` (3D, D) and calls W^O `out_proj`; its layers call
W_1, W_2 `linear1`, `linear2` and the sub-layers' norms `norm1..3`.
"""

import torch
from torch import nn


def torch_attn_mask(mask, query, key, n_heads: int):
    """Our mask (bool, broadcastable to (B, H, T, S), True = may attend) as nn.MultiheadAttention's
    bool attn_mask: (B * H, T, S), True = hide."""
    B, T, S = query.size(0), query.size(1), key.size(1)
    return ~mask.expand(B, n_heads, T, S).reshape(-1, T, S)


def copy_attention(ours, theirs: nn.MultiheadAttention) -> None:
    """W_q, W_k, W_v stacked into in_proj_weight (3D, D); W_o into out_proj; biases when both have them."""
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        if theirs.in_proj_bias is not None:
            theirs.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
        theirs.out_proj.load_state_dict(ours.W_o.state_dict())


def copy_encoder_layer(ours, theirs: nn.TransformerEncoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    theirs.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
    theirs.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
    theirs.norm1.load_state_dict(ours.sublayers[0].norm.state_dict())
    theirs.norm2.load_state_dict(ours.sublayers[1].norm.state_dict())


def copy_decoder_layer(ours, theirs: nn.TransformerDecoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_attention(ours.cross_attn, theirs.multihead_attn)
    theirs.linear1.load_state_dict(ours.feed_forward.w_1.state_dict())
    theirs.linear2.load_state_dict(ours.feed_forward.w_2.state_dict())
    for i, norm in enumerate((theirs.norm1, theirs.norm2, theirs.norm3)):
        norm.load_state_dict(ours.sublayers[i].norm.state_dict())


def copy_stack(ours, theirs, copy_layer) -> None:
    """Copy an Encoder/Decoder into nn.TransformerEncoder/Decoder (final norm included if both have one)."""
    for a, b in zip(ours.layers, theirs.layers, strict=True):
        copy_layer(a, b)
    if (
        isinstance(ours.norm, nn.Module)
        and theirs.norm is not None
        and hasattr(ours.norm, "weight")
    ):
        theirs.norm.load_state_dict(ours.norm.state_dict())


def randomize(module: nn.Module, std: float = 0.3, seed: int = 0) -> nn.Module:
    """Random weights everywhere (gains and biases too), so that every parameter is exercised."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return module
