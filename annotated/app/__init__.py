"""The command line and what it runs: run configurations and presets, tasks, inference and the ONNX export.

Each module is generated from a notebook (its header names which); this file, written by hand,
re-exports their public API. The helpers behind it (the parser's options, the subcommands, the memory
checks, the ONNX graphs) stay in their modules, where appendices 22, 31, 32 and 36 explain them.
"""

from annotated.app.config import RunOptions, MODEL_FIELDS, number, positive, ModelOptions, RunConfig, pick, PRESETS
from annotated.app.task import TaskDefaults, Task
from annotated.app.copy_task import CopyOptions, CopyTask
from annotated.app.multi30k_task import Multi30kOptions, Multi30kTraining, Multi30kTask
from annotated.app.tasks import TASKS, run_config, with_task_defaults
from annotated.app.run import train
from annotated.app.inference import Loaded, load_for_inference
from annotated.app.onnx_graphs import MAX_SOURCE_TOKENS, EXTRA_TARGET_TOKENS, OPSET, export_copy
from annotated.app.onnx_export import OnnxTranslator, export_translator, check_export
from annotated.app.cli import build_parser, main

__all__ = [
    "RunOptions",
    "MODEL_FIELDS",
    "number",
    "positive",
    "ModelOptions",
    "RunConfig",
    "pick",
    "PRESETS",
    "TaskDefaults",
    "Task",
    "CopyOptions",
    "CopyTask",
    "Multi30kOptions",
    "Multi30kTraining",
    "Multi30kTask",
    "TASKS",
    "run_config",
    "with_task_defaults",
    "train",
    "Loaded",
    "load_for_inference",
    "MAX_SOURCE_TOKENS",
    "EXTRA_TARGET_TOKENS",
    "OPSET",
    "export_copy",
    "OnnxTranslator",
    "export_translator",
    "check_export",
    "build_parser",
    "main",
]
