"""Decoding and evaluation (§6.1): greedy search, beam search, BLEU and chrF, the copy task's exact match.

Each module is generated from a notebook (its header names which); this file, written by hand,
re-exports their public names.
"""

from annotated.decoding.greedy import (
    next_token_logits,
    max_new_tokens_from_source,
    greedy_decode,
)
from annotated.decoding.beam import length_penalty, beam_search, score_sequences
from annotated.decoding.evaluation import (
    Score,
    corpus_bleu,
    corpus_chrf,
    simple_tokenize,
    tokenized_bleu,
    translate_ids,
    evaluate_loss,
)
from annotated.decoding.report import bleu_report
from annotated.decoding.copy_task import COPY_MODEL, copy_model, simple_greedy_decode, exact_match

__all__ = [
    "next_token_logits",
    "max_new_tokens_from_source",
    "greedy_decode",
    "length_penalty",
    "beam_search",
    "score_sequences",
    "Score",
    "corpus_bleu",
    "corpus_chrf",
    "simple_tokenize",
    "tokenized_bleu",
    "translate_ids",
    "bleu_report",
    "evaluate_loss",
    "COPY_MODEL",
    "copy_model",
    "simple_greedy_decode",
    "exact_match",
]
