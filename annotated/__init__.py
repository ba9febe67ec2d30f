"""annotated: the annotated, tested walkthrough of "Attention Is All You Need" (Vaswani et al., 2017).

The package is split by role, lower roles first: `validation` and `files` (helpers every role may use),
`model`, `data`, `training` (the paper's), `runs` (processes, signals and run folders of a long run),
`decoding` (and evaluation), `check` (the graders) and `app` (run configurations, tasks, inference,
export and the command line). A role imports only from roles below it.
The modules are generated from the notebooks in `notebooks/` (edit those, then run `make export`);
this file and each role's `__init__.py`, written by hand, re-export the public API.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__all__ = [
    # attention (chapters 02-04; the layer the model runs: appendix 35)
    "attention",
    "padding_mask",
    "causal_mask",
    "MultiHeadAttention",
    # the rest of the model (chapters 05-11; the layers the model runs: appendices 28 and 35)
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
    # training (chapter 12; the package's batch, loss, schedule, averaging, step and loop: appendix 33)
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
    # checkpoints (appendix 21)
    "save_checkpoint",
    "load_checkpoint",
    # the copy task (chapter 13)
    "copy_batches",
    "copy_model",
    "exact_match",
    "simple_greedy_decode",
    "COPY_MODEL",
    # decoding (chapters 14 and 15)
    "greedy_decode",
    "beam_search",
    "length_penalty",
    # data (chapter 16; the download and checksums: appendix 29) and evaluation (chapter 17)
    "load_multi30k",
    "train_tokenizer",
    "load_tokenizer",
    "token_batches",
    "corpus_bleu",
    "tokenized_bleu",
    # tasks, run configurations and presets (appendix 31)
    "Task",
    "TASKS",
    "RunConfig",
    "PRESETS",
    # figures
    "attention_chart",
    # grading a learner's own pieces (appendix 24)
    "check",
    # the book's recorded files, wherever a notebook runs (appendix 37)
    "book_path",
]


# Where each public name lives. The roles are imported on first use, so `import annotated` stays light
# (the command line starts fast, and nbdev's export, which imports annotated._export, runs even while a
# generated module is broken). altair alone takes about 2 s to import, for `attention_chart`.
_HOME = {
    "annotated.model": "attention padding_mask causal_mask MultiHeadAttention sinusoidal_encoding "
    "angular_frequencies relative_shift_matrix PositionalEncoding Embeddings LayerNorm SublayerConnection "
    "PositionwiseFeedForward EncoderLayer Encoder DecoderLayer Decoder TransformerConfig Transformer "
    "make_model",
    "annotated.training": "Batch LabelSmoothingLoss noam_lr noam_scheduler make_optimizer train_step "
    "Trainer average_weights Snapshots save_checkpoint load_checkpoint",
    "annotated.data": "SpecialIds SPECIAL_IDS strip_specials copy_batches load_multi30k train_tokenizer "
    "load_tokenizer token_batches",
    "annotated.decoding": "copy_model exact_match simple_greedy_decode COPY_MODEL greedy_decode "
    "beam_search length_penalty corpus_bleu tokenized_bleu",
    "annotated.app": "Task TASKS RunConfig PRESETS",
    "annotated.viz": "attention_chart",
    "annotated.book_files": "book_path",
}
_SUBMODULES = (
    "validation", "files", "book_files", "viz", "model", "data", "training", "runs", "decoding", "check", "app"
)
_MODULE_OF = {name: module for module, names in _HOME.items() for name in names.split()}


def __getattr__(name: str):
    """Import a public name from its role on first use (see _HOME)."""
    if name in _SUBMODULES:  # `annotated.model.Transformer` after a bare `import annotated`
        return importlib.import_module(f"annotated.{name}")
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'annotated' has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# Modules of the flat layout (before the package was split by role) and where their code lives now.
MOVED = {
    "attention": "annotated.model.scaled_dot_product",
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
    "tasks": "annotated.app.tasks (each task: annotated.app.copy_task, annotated.app.multi30k_task), annotated.app.config and annotated.app.run",
    "inference": "annotated.app.inference",
    "onnx_export": "annotated.app.onnx_export and annotated.app.onnx_graphs",
    "cli": "annotated.app.cli and annotated.app.parser",
}


# Modules that moved whole, to another role: the old path still imports, with a warning naming the new one.
RENAMED = {
    "annotated.training.runs": "annotated.runs",  # split into runs.records and runs.folder
    "annotated.training.processes": "annotated.runs.processes",
    "annotated.training.interrupts": "annotated.runs.interrupts",
    "annotated.training.folder_lock": "annotated.runs.folder_lock",
    "annotated.training.snapshot_files": "annotated.runs.snapshot_files",
}


class _Alias(importlib.abc.Loader):
    """Fill the old module with the new one's names, and say where they live now."""

    def __init__(self, new: str):
        self.new = new

    def exec_module(self, module) -> None:
        warnings.warn(f"{module.__name__} moved to {self.new}: import from there", FutureWarning, stacklevel=2)
        new = importlib.import_module(self.new)
        module.__dict__.update({k: v for k, v in vars(new).items() if not k.startswith("__")})
        module.__doc__ = f"Moved to {self.new}; this name of it stays for old imports."


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Answer `import annotated.multi_head` and the like with where that module lives now."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in RENAMED:
            return importlib.util.spec_from_loader(fullname, _Alias(RENAMED[fullname]))
        package, _, name = fullname.partition(".")
        if package == "annotated" and name in MOVED:
            raise ModuleNotFoundError(
                f"{fullname} was split by role: import from {MOVED[name]} (or from annotated)",
                name=fullname,
            )
        return None


sys.meta_path.append(_MovedFinder())
