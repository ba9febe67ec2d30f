"""Runs: processes, budgets and the results file, signals, the run folder, its snapshots and its lock.

The engineering of a long training run (appendix 30), between the paper's training (`annotated.training`,
which never imports it) and the command line (`annotated.app`). Each module is generated from
appendix 30 (its header names which); this file, written by hand, re-exports their public names.
"""

from annotated.runs.processes import Runtime, device_of, start_runtime, stop_runtime, replica_max_diff
from annotated.runs.records import should_stop, git_commit, hardware, run_record, strict, write_results, Stop
from annotated.runs.interrupts import Signals
from annotated.runs.snapshot_files import read_snapshot
from annotated.runs.folder import (
    MANIFEST,
    RUN_FILES,
    writable_folder,
    writable_file,
    remove_created,
    remove_stale_temporaries,
    check_budget,
    write_manifest,
    check_run_file,
    RunFiles,
    RunSaves,
    RunFolder,
    resume_into,
)
from annotated.runs.folder_lock import HOLDER, LOCK, run_lock

__all__ = [
    "Runtime",
    "device_of",
    "start_runtime",
    "stop_runtime",
    "replica_max_diff",
    "should_stop",
    "git_commit",
    "hardware",
    "run_record",
    "strict",
    "write_results",
    "Stop",
    "Signals",
    "read_snapshot",
    "MANIFEST",
    "RUN_FILES",
    "writable_folder",
    "writable_file",
    "remove_created",
    "remove_stale_temporaries",
    "check_budget",
    "write_manifest",
    "check_run_file",
    "RunFiles",
    "RunSaves",
    "RunFolder",
    "resume_into",
    "LOCK",
    "HOLDER",
    "run_lock",
]
