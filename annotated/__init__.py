"""annotated: the annotated, tested walkthrough of "Attention Is All You Need" (Vaswani et al., 2017).

The package is split by role, lower roles first: `validation` and `files` (helpers every role may use),
`model`, `data`, `training`, `decoding` (and evaluation), `check` (the graders) and `app` (run
configurations, tasks, inference, export and the command line). A role imports only from roles below it.
The modules are generated from the notebooks in `notebooks/` (edit those, then run `make export`);
this file and each role's `__init__.py`, written by hand, re-export the public API.
"""

import importlib.abc
import sys

from annotated import check
from annotated.data import load_multi30k, load_tokenizer, token_batches, train_tokenizer
from annotated.data.vocab import SPECIAL_IDS, SpecialIds, strip_specials
from annotated.decoding import (
    COPY_MODEL,
    beam_search,
    copy_model,
    corpus_bleu,
    exact_match,
    greedy_decode,
    length_penalty,
    simple_greedy_decode,
    tokenized_bleu,
)
from annotated.data.copy_task import copy_batches
from annotated.app.config import PRESETS, RunConfig
from annotated.app.tasks import TASKS, Task
from annotated.model import (
    Decoder,
    DecoderLayer,
    Embeddings,
    Encoder,
    EncoderLayer,
    LayerNorm,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    SublayerConnection,
    Transformer,
    TransformerConfig,
    angular_frequencies,
    attention,
    causal_mask,
    make_model,
    padding_mask,
    relative_shift_matrix,
    sinusoidal_encoding,
)
from annotated.training import (
    Batch,
    LabelSmoothingLoss,
    Snapshots,
    Trainer,
    average_weights,
    load_checkpoint,
    make_optimizer,
    noam_lr,
    noam_scheduler,
    save_checkpoint,
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


# Modules of the flat layout (before the package was split by role) and where their code lives now.
MOVED = {
    "attention": "annotated.model.attention",
    "masks": "annotated.model.masks",
    "multi_head": "annotated.model.multi_head (the cache: annotated.model.cache)",
    "positional": "annotated.model.positional (Dropout: annotated.model.dropout)",
    "embeddings": "annotated.model.embeddings",
    "norm": "annotated.model.norm",
    "feed_forward": "annotated.model.feed_forward",
    "encoder": "annotated.model.encoder",
    "decoder": "annotated.model.decoder",
    "checkpoint": "annotated.training.checkpoint (atomic_write: annotated.files)",
    "copy_task": "annotated.data.copy_task and annotated.decoding.copy_task",
    "evaluation": "annotated.decoding.evaluation",
    "multi30k": "annotated.data.multi30k",
    "checks": "annotated.validation",
    "grading": "annotated.check.framework and annotated.check.command",
    "check_model": "annotated.check.layer_checks and annotated.check.model_checks",
    "check_training": "annotated.check.training_checks",
    "check_decoding": "annotated.check.decoding_checks",
    "runs": "annotated.training.runs and annotated.training.processes",
    "tasks": "annotated.app.tasks, annotated.app.config and annotated.app.run",
    "inference": "annotated.app.inference",
    "onnx_export": "annotated.app.onnx_export and annotated.app.onnx_graphs",
    "cli": "annotated.app.cli and annotated.app.parser",
}


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Answer `import annotated.multi_head` and the like with where that module lives now."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.partition(".")
        if package == "annotated" and name in MOVED:
            raise ModuleNotFoundError(
                f"{fullname} was split by role: import from {MOVED[name]} (or from annotated)",
                name=fullname,
            )
        return None


sys.meta_path.append(_MovedFinder())
