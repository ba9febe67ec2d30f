"""Training (§5): batches, label smoothing, the schedule, the loop, weight averaging, checkpoints and the model files to share.

Each module is generated from a notebook (its header names which); this file, written by hand,
re-exports their public names. The machinery of a long run (processes, signals, run folders,
their snapshots and locks) is `annotated.runs`.
"""

from annotated.training.batch import Batch
from annotated.training.loss import LabelSmoothingLoss
from annotated.training.schedule import noam_lr, noam_scheduler, make_optimizer, schedule_rates
from annotated.training.loop import train_step, Trainer
from annotated.training.averaging import average_weights, Snapshots
from annotated.training.checkpoint import (
    CHECKPOINT_FORMAT,
    save_checkpoint,
    Checkpoint,
    load_checkpoint,
    read_checked,
    check_entries,
)
from annotated.training.model_file import MODEL_FORMAT, save_model, load_model
__all__ = [
    "Batch",
    "LabelSmoothingLoss",
    "noam_lr",
    "noam_scheduler",
    "make_optimizer",
    "schedule_rates",
    "train_step",
    "Trainer",
    "average_weights",
    "Snapshots",
    "CHECKPOINT_FORMAT",
    "save_checkpoint",
    "Checkpoint",
    "load_checkpoint",
    "read_checked",
    "check_entries",
    "MODEL_FORMAT",
    "save_model",
    "load_model",
]

