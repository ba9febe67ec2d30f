"""Training (§5): batches, label smoothing, the schedule, one update, weight averaging, the loop and checkpoints.

Each module is generated from a notebook (its header names which); this file, written by hand,
re-exports their public names: chapter 12's pieces, then appendix 33's for long runs, which call
them. The machinery of a long run (processes, signals, run folders, their snapshots and locks) is
`annotated.runs`.
"""

from annotated.training.batch import Batch
from annotated.training.loss import LabelSmoothingLoss
from annotated.training.schedule import noam_lr, noam_scheduler, make_optimizer
from annotated.training.step import train_step
from annotated.training.averaging import average_weights
from annotated.training.long_runs import (
    CheckedBatch,
    FastLabelSmoothingLoss,
    make_scheduler,
    schedule_rates,
    average_state_dicts,
    Snapshots,
)
from annotated.training.loop import train_step_at_scale, Trainer
from annotated.training.checkpoint import (
    CHECKPOINT_FORMAT,
    save_checkpoint,
    Checkpoint,
    load_checkpoint,
    read_checked,
    check_entries,
)
__all__ = [
    "Batch",
    "LabelSmoothingLoss",
    "noam_lr",
    "noam_scheduler",
    "make_optimizer",
    "train_step",
    "average_weights",
    "CheckedBatch",
    "FastLabelSmoothingLoss",
    "make_scheduler",
    "schedule_rates",
    "average_state_dicts",
    "Snapshots",
    "train_step_at_scale",
    "Trainer",
    "CHECKPOINT_FORMAT",
    "save_checkpoint",
    "Checkpoint",
    "load_checkpoint",
    "read_checked",
    "check_entries",
]

