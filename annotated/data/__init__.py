"""Data (§5.1): special ids, the subword tokenizer, batches by length and token count, Multi30k and the copy task's sequences.

Each module is generated from a notebook (its header names which); this file, written by hand,
re-exports their public names.
"""

from annotated.data.vocab import SPECIAL_IDS, SpecialIds, strip_specials
from annotated.data.tokenizer import (
    SPECIALS,
    PAD_ID,
    BOS_ID,
    EOS_ID,
    UNK_ID,
    train_tokenizer,
    save_tokenizer,
    load_tokenizer,
    encode,
    decode,
    encode_pairs,
)
from annotated.data.batching import pad_batch, length_batches, token_batches, pad_fraction
from annotated.data.sharding import shard_batches
from annotated.data.multi30k import (
    MULTI30K_URL,
    MULTI30K_SHA256,
    MULTI30K_BYTES,
    MULTI30K_SIZES,
    MULTI30K_ENV,
    DEFAULT_CACHE,
    check_sha256,
    download_multi30k_file,
    multi30k_path,
    LANGUAGES,
    DIRECTIONS,
    Pair,
    check_direction,
    direction_name,
    load_multi30k,
)
from annotated.data.copy_task import PAD, BOS, EOS, FIRST_SYMBOL, copy_batches

__all__ = [
    "SPECIAL_IDS",
    "SpecialIds",
    "strip_specials",
    "SPECIALS",
    "PAD_ID",
    "BOS_ID",
    "EOS_ID",
    "UNK_ID",
    "train_tokenizer",
    "save_tokenizer",
    "load_tokenizer",
    "encode",
    "decode",
    "encode_pairs",
    "pad_batch",
    "length_batches",
    "token_batches",
    "pad_fraction",
    "shard_batches",
    "MULTI30K_URL",
    "MULTI30K_SHA256",
    "MULTI30K_BYTES",
    "MULTI30K_SIZES",
    "MULTI30K_ENV",
    "DEFAULT_CACHE",
    "check_sha256",
    "download_multi30k_file",
    "multi30k_path",
    "LANGUAGES",
    "DIRECTIONS",
    "Pair",
    "check_direction",
    "direction_name",
    "load_multi30k",
    "PAD",
    "BOS",
    "EOS",
    "FIRST_SYMBOL",
    "copy_batches",
]
