"""annotated: the annotated, tested walkthrough of "Attention Is All You Need" (Vaswani et al., 2017).

The modules are generated from the notebooks in `notebooks/` (edit those, then run `nbdev-export`);
this file, written by hand, re-exports the public API.
"""

from annotated import check
from annotated.attention import attention
from annotated.checkpoint import load_checkpoint, save_checkpoint
from annotated.copy_task import COPY_MODEL, copy_batches, copy_model, exact_match, simple_greedy_decode
from annotated.data import load_tokenizer, token_batches, train_tokenizer
from annotated.decoder import Decoder, DecoderLayer
from annotated.decoding import beam_search, greedy_decode, length_penalty
from annotated.embeddings import Embeddings
from annotated.encoder import Encoder, EncoderLayer
from annotated.evaluation import corpus_bleu, tokenized_bleu
from annotated.feed_forward import PositionwiseFeedForward
from annotated.masks import causal_mask, padding_mask
from annotated.model import Transformer, TransformerConfig, make_model
from annotated.multi30k import load_multi30k
from annotated.multi_head import MultiHeadAttention
from annotated.norm import LayerNorm, SublayerConnection
from annotated.positional import (
    PositionalEncoding,
    angular_frequencies,
    relative_shift_matrix,
    sinusoidal_encoding,
)
from annotated.tasks import PRESETS, TASKS, RunConfig, Task
from annotated.training import (
    SPECIAL_IDS,
    Batch,
    LabelSmoothingLoss,
    Snapshots,
    SpecialIds,
    Trainer,
    average_weights,
    make_optimizer,
    noam_lr,
    noam_scheduler,
    strip_specials,
    train_step,
)

__all__ = [
    # attention (notebooks 02-04)
    "attention",
    "padding_mask",
    "causal_mask",
    "MultiHeadAttention",
    # the rest of the model (notebooks 05-11)
    "sinusoidal_encoding",
    "angular_frequencies",
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
    "Transformer",
    "make_model",
    # training (notebook 12)
    "Batch",
    "LabelSmoothingLoss",
    "noam_lr",
    "noam_scheduler",
    "make_optimizer",
    "train_step",
    "Trainer",
    "average_weights",
    "Snapshots",
    "SpecialIds",
    "SPECIAL_IDS",
    "strip_specials",
    # checkpoints (notebook 12b)
    "save_checkpoint",
    "load_checkpoint",
    # the copy task (notebook 13)
    "copy_batches",
    "copy_model",
    "exact_match",
    "simple_greedy_decode",
    "COPY_MODEL",
    # decoding (notebook 14)
    "greedy_decode",
    "beam_search",
    "length_penalty",
    # data (notebook 15; the download and checksums: notebook 27) and evaluation (notebook 15b)
    "load_multi30k",
    "train_tokenizer",
    "load_tokenizer",
    "token_batches",
    "corpus_bleu",
    "tokenized_bleu",
    # tasks, run configurations and presets (notebook 23)
    "Task",
    "TASKS",
    "RunConfig",
    "PRESETS",
    # figures
    "attention_chart",
    # grading a learner's own pieces (notebook 17)
    "check",
]


def __getattr__(name: str):
    """`attention_chart` is imported on first use: altair takes about 2 s to import, and most uses of
    the package (the command line, the tests, most notebooks) draw no chart."""
    if name == "attention_chart":
        from annotated.viz import attention_chart

        return attention_chart
    raise AttributeError(f"module 'annotated' has no attribute {name!r}")
