"""annotated: the annotated, tested walkthrough of "Attention Is All You Need" (Vaswani et al., 2017).

The package is split by role, lower roles first: `validation` and `files` (helpers every role may use),
`model`, `data`, `training` (the paper's), `runs` (processes, signals and run folders of a long run),
`decoding` (and evaluation), `check` (the graders) and `app` (run configurations, tasks, inference,
export and the command line). A role imports only from roles below it.
The modules are generated from the notebooks in `notebooks/` (edit those, then run `make export`);
each role's `__init__.py` re-exports its modules' `__all__` (tools/public_api.py writes it), and
this file's `__all__` lists the names a reader meets, each imported from its role on first use.
"""

import ast
import importlib
from pathlib import Path

__all__ = [
    # attention (chapters 02-04)
    "attention",
    "padding_mask",
    "causal_mask",
    "MultiHeadAttention",
    # the rest of the model (chapters 05-11; the checks at its edge: chapter 11)
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
    # training (chapter 12; the loop and snapshots: appendix 33)
    "Batch",
    "LabelSmoothingLoss",
    "noam_lr",
    "noam_scheduler",
    "make_optimizer",
    "train_step",
    "Trainer",
    "average_weights",
    "Snapshots",
    "PAD",
    "BOS",
    "EOS",
    "UNK",
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
    # data (chapter 16; the download and checksums: appendix 29; the tokenizer file: appendix 21)
    # and evaluation (chapter 17)
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
    # grading a learner's own pieces (appendices 23-27)
    "check",
    # the book's recorded files, wherever a notebook runs (appendix 37)
    "book_path",
]


# Where each public name lives: the role (or module) whose `__all__` lists it, read from the files
# without importing them. The roles are imported on first use, so `import annotated` stays light (the
# command line starts fast, and nbdev's export runs even while a generated module is broken); altair
# alone takes about 2 s to import, for `attention_chart`.
_SUBMODULES = (
    "validation", "files", "book_files", "viz", "model", "data", "training", "runs", "decoding", "check", "app"
)
_HOMES = ("model", "training", "data", "decoding", "app", "viz", "book_files")
_MODULE_OF: dict[str, str] = {}


def _home_of(name: str) -> str | None:
    if not _MODULE_OF:
        here = Path(__file__).parent
        for home in _HOMES:
            path = here / home / "__init__.py" if (here / home).is_dir() else here / f"{home}.py"
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
                    _MODULE_OF.update(dict.fromkeys(ast.literal_eval(node.value), f"annotated.{home}"))
    return _MODULE_OF.get(name)


def __getattr__(name: str):
    """Import a public name from its role on first use."""
    if name in _SUBMODULES:  # `annotated.model.Transformer` after a bare `import annotated`
        return importlib.import_module(f"annotated.{name}")
    home = _home_of(name) if name in __all__ else None
    if home is None:
        raise AttributeError(f"module 'annotated' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

