"""The model (§3): attention, masks, heads, positions, embeddings, norms, the encoder, the decoder and the Transformer.

Chapters 02-11 teach them and export each layer as they write it; chapter 14 adds the decoding cache,
and appendix 28 the checks at the full model's edge.

Each module is generated from a notebook (its header names which); this file, written by hand,
re-exports their public names.
"""

from annotated.model.scaled_dot_product import attention
from annotated.model.masks import padding_mask, causal_mask
from annotated.model.cache import KVCache, DecoderCache
from annotated.model.multi_head import MultiHeadAttention, split_weights
from annotated.model.positional import (
    Dropout,
    angular_frequencies,
    sinusoidal_encoding,
    relative_shift_matrix,
    PositionalEncoding,
)
from annotated.model.embeddings import Embeddings
from annotated.model.norm import LayerNorm, SublayerConnection
from annotated.model.feed_forward import PositionwiseFeedForward
from annotated.model.encoder import EncoderLayer, Encoder
from annotated.model.decoder import DecoderLayer, Decoder
from annotated.model.transformer import TransformerConfig, AttentionWeights, Transformer, make_model

__all__ = [
    "attention",
    "padding_mask",
    "causal_mask",
    "KVCache",
    "DecoderCache",
    "MultiHeadAttention",
    "split_weights",
    "Dropout",
    "angular_frequencies",
    "sinusoidal_encoding",
    "relative_shift_matrix",
    "PositionalEncoding",
    "Embeddings",
    "LayerNorm",
    "SublayerConnection",
    "PositionwiseFeedForward",
    "EncoderLayer",
    "Encoder",
    "DecoderLayer",
    "Decoder",
    "TransformerConfig",
    "AttentionWeights",
    "Transformer",
    "make_model",
]
