"""Training (§5): batches, label smoothing, the schedule, the loop, weight averaging and checkpoints.

Each module is generated from a notebook (its header names which); this file, written by hand,
re-exports their public names. The machinery of a long run (processes, signals, run folders, their
snapshots and locks) moved to `annotated.runs`; its names asked of this package say so.
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
]


# The run machinery's names, which this package exported until they moved to `annotated.runs`
_IN_RUNS = frozenset(
    "Runtime device_of start_runtime stop_runtime replica_max_diff MANIFEST RUN_FILES should_stop "
    "git_commit hardware run_record strict write_results Stop Signals writable_folder writable_file "
    "remove_created remove_stale_temporaries write_manifest check_run_file RunFolder resume_into LOCK "
    "run_lock read_snapshot".split()
)


def __getattr__(name: str):
    """Say where a name of the run machinery lives now (this role never imports the runs role)."""
    if name in _IN_RUNS:
        raise ImportError(
            f"annotated.training.{name} moved with the run machinery: from annotated.runs import {name}",
            name=__name__,
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
