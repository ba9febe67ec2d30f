"""Training (§5): batches, label smoothing, the schedule, the loop, weight averaging, checkpoints, processes and run folders.

Each module is generated from a notebook (its header names which); this file, written by hand,
re-exports their public names.
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
from annotated.training.processes import (
    Runtime,
    device_of,
    start_runtime,
    stop_runtime,
    replica_max_diff,
)
from annotated.training.runs import (
    MANIFEST,
    RUN_FILES,
    should_stop,
    git_commit,
    hardware,
    run_record,
    strict,
    write_results,
    Stop,
    writable_folder,
    writable_file,
    remove_created,
    remove_stale_temporaries,
    write_manifest,
    check_run_file,
    RunFolder,
    resume_into,
)
from annotated.training.interrupts import Signals
from annotated.training.folder_lock import LOCK, run_lock
from annotated.training.snapshot_files import read_snapshot

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
    "Runtime",
    "device_of",
    "start_runtime",
    "stop_runtime",
    "replica_max_diff",
    "MANIFEST",
    "RUN_FILES",
    "should_stop",
    "git_commit",
    "hardware",
    "run_record",
    "strict",
    "write_results",
    "Stop",
    "Signals",
    "writable_folder",
    "writable_file",
    "remove_created",
    "remove_stale_temporaries",
    "write_manifest",
    "check_run_file",
    "RunFolder",
    "resume_into",
    "LOCK",
    "run_lock",
    "read_snapshot",
]
