"""Grade your own implementation of a piece of the model: `check.attention(my_attention)`.

Each check runs a list of properties (agreement with PyTorch where a reference exists, causality,
padding invariance, ...) and returns a `Report` naming the one that fails. `check.solution` decorates
an exercise's solution so that it stands in only for a starter the reader has not filled in; each check
then says that a stand-in's result is the solution's, not the reader's (each is defined with
`reporting_stand_ins`; `check.passed` does the same for an exercise checked by asserts). The modules are
generated from appendices 23 to 27; this file, written by hand, re-exports what a learner calls.
"""

from annotated.check.attention_checks import attention, masks
from annotated.check.command import CHECKS, add_check_command, main_cli
from annotated.check.decoding_checks import greedy_decode
from annotated.check.framework import Report, solution
from annotated.check.stand_ins import passed
from annotated.check.layer_checks import (
    encoder_layer,
    feed_forward,
    layer_norm,
    positional_encoding,
)
from annotated.check.model_checks import decoder_layer, model
from annotated.check.multi_head_checks import multi_head
from annotated.check.smoothing_checks import label_smoothing
from annotated.check.training_checks import embeddings, learning_rate

__all__ = [
    "attention",
    "masks",
    "multi_head",
    "layer_norm",
    "positional_encoding",
    "feed_forward",
    "encoder_layer",
    "decoder_layer",
    "model",
    "embeddings",
    "label_smoothing",
    "learning_rate",
    "greedy_decode",
    "Report",
    "solution",
    "passed",
    "CHECKS",
    "add_check_command",
    "main_cli",
]
