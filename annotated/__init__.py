"""annotated: the annotated, tested walkthrough of "Attention Is All You Need" (Vaswani et al., 2017).

The modules are generated from the notebooks in `notebooks/` (edit those, then run `nbdev-export`);
this file, written by hand, re-exports the public API.
"""

from annotated.attention import attention
from annotated.masks import causal_mask, padding_mask
from annotated.multi_head import MultiHeadAttention

__all__ = [
    "attention",
    "padding_mask",
    "causal_mask",
    "MultiHeadAttention",
]
