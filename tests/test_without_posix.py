"""Issue 51, items 2 and 3: the command line on a system without POSIX (Windows), and the memory that a
container's limit leaves.

On Linux and macOS the commands run in a child Python whose POSIX-only parts are hidden before
`annotated` is imported: `os.sysconf`, `os.fchmod`, the `fcntl` module, the signals Windows lacks,
and reads of /proc and /sys by the package's own code. On Windows the same test runs them as they are.
"""

import math
import os
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import psutil
import pytest
import torch
from cli_helpers import TINY, listing

import annotated.app.memory as memory

ROOT = Path(__file__).resolve().parents[1]

# Run in the child by `python -c`, then `python -m annotated` with the test's arguments.
WITHOUT_POSIX = r"""
import errno, os, runpy, signal, sys, warnings

import psutil, sacrebleu, torch  # libraries with a part for each system: here their Linux parts

for name in ("sysconf", "sysconf_names", "fchmod"):
    if hasattr(os, name):
        delattr(os, name)
sys.modules["fcntl"] = None  # `import fcntl` raises ImportError
WINDOWS_SIGNALS = {"SIGABRT", "SIGFPE", "SIGILL", "SIGINT", "SIGSEGV", "SIGTERM", "SIGBREAK"}
for name in [n for n in dir(signal) if n.startswith("SIG") and "_" not in n]:
    if name not in WINDOWS_SIGNALS:
        delattr(signal, name)
for name in ("alarm", "pause", "setitimer", "getitimer", "siginterrupt", "pthread_kill",
             "pthread_sigmask", "sigpending", "sigwait", "sigwaitinfo", "sigtimedwait"):
    if hasattr(signal, name):
        delattr(signal, name)


def opener():
    # the module that asked for the file: the first caller outside the standard library
    frame = sys._getframe(2)
    while frame and frame.f_globals.get("__name__", "").partition(".")[0] in sys.stdlib_module_names:
        frame = frame.f_back
    return frame.f_globals.get("__name__", "") if frame else ""


def no_proc(event, args):
    if event == "open" and str(args[0]).startswith(("/proc/", "/sys/")):
        if opener().partition(".")[0] == "annotated":
            raise FileNotFoundError(errno.ENOENT, "no such file on Windows", str(args[0]))


sys.addaudithook(no_proc)
warnings.filterwarnings("ignore", "only soft file lock")  # filelock without fcntl, but not on Windows
runpy.run_module("annotated", run_name="__main__", alter_sys=True)
"""


def without_posix(*args, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`python -m annotated ARGS` in a child Python without POSIX, on one thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    command = [sys.executable, "-c", WITHOUT_POSIX, *map(str, args)]
    return subprocess.run(
        command, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=180
    )


@pytest.mark.slow  # four Python processes start torch; Multi30k's tokenizer is trained
def test_train_evaluate_and_translate_without_posix(tmp_path, data_dir):
    copy = tmp_path / "copy"
    train = ["train", "--task", "copy", "--steps", "2", *TINY]
    done = without_posix(*train, "--out", copy, cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "held-out exact match" in done.stdout  # the copy task's evaluation
    assert listing(copy) == [
        "averaged.safetensors",
        "checkpoint.pt",
        "manifest.json",
        "model.safetensors",
        "results.json",
    ]

    out = tmp_path / "multi30k"
    train = ["train", "--steps", "2", "--vocab-size", "300", "--no-test", *TINY]
    done = without_posix(*train, "--data-dir", data_dir, "--out", out, cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert listing(out) == [
        "checkpoint.pt",
        "manifest.json",
        "model.safetensors",
        "results.json",
        "tokenizer.json",
    ]

    checkpoint = out / "model.safetensors"
    evaluate = ["evaluate", "--model", checkpoint, "--split", "val", "--limit", "2"]
    done = without_posix(*evaluate, "--beam", "2", "--data-dir", data_dir, cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["beam 1", "beam 2"]

    translate = ["translate", "--model", checkpoint, "--beam", "2"]
    done = without_posix(*translate, stdin="Ein Hund läuft.\n", cwd=tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert len(done.stdout.splitlines()) == 1  # one translation for the one line read


# ---- The memory available on a CPU: psutil's, or what a container's limit leaves -------------------


Memory = namedtuple("Memory", "total available")
CPU = torch.device("cpu")


@pytest.fixture
def system(monkeypatch):
    """A machine with 64 GiB, 48 of them available, as psutil sees it."""
    seen = Memory(64 * 2**30, 48 * 2**30)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: seen)
    return seen


def cgroup(root: Path, monkeypatch, version: int, limit: str, usage: int, cache: int) -> None:
    """A container's memory files, as the kernel shows them at the top of its cgroup v2 or v1 mount
    `root`; the process's own cgroup is that top one, as inside a container's namespace."""
    folder = root / ("memory" if version == 1 else "")
    folder.mkdir(parents=True)
    v1 = ("memory.limit_in_bytes", "memory.usage_in_bytes")
    limit_file, usage_file = ("memory.max", "memory.current") if version == 2 else v1
    (folder / limit_file).write_text(f"{limit}\n")
    (folder / usage_file).write_text(f"{usage}\n")
    statistic = "inactive_file" if version == 2 else "total_inactive_file"
    (folder / "memory.stat").write_text(f"anon {usage - cache}\n{statistic} {cache}\nshmem 0\n")
    (root.parent / "self_cgroup").write_text("0::/\n" if version == 2 else "4:memory:/\n")
    monkeypatch.setattr(memory, "CGROUP_ROOT", root)
    monkeypatch.setattr(memory, "PROC_CGROUP", root.parent / "self_cgroup")


def test_on_a_cpu_the_memory_available_is_psutils(system, monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "CGROUP_ROOT", tmp_path / "cgroup")  # no such folder
    monkeypatch.setattr(memory, "PROC_CGROUP", tmp_path / "self_cgroup")
    assert memory.available_memory(CPU) == system.available
    assert memory.container_room() == math.inf  # no cgroup files: no container limit


@pytest.mark.parametrize("version", [2, 1])
def test_a_containers_limit_caps_the_memory_available(system, monkeypatch, tmp_path, version):
    # the page cache (`cache`) is given back before the kernel kills a process for want of memory
    limit, usage, cache = 8 * 2**30, 7 * 2**30, 2**29
    cgroup(tmp_path / "cgroup", monkeypatch, version, str(limit), usage, cache)
    assert memory.available_memory(CPU) == limit - usage + cache < system.available
    err = "needs about 2.0 GiB of memory, more than the 1.5 GiB available: lower --max-len"
    with pytest.raises(ValueError, match=err):
        memory.check_memory(2 * 2**30, CPU, "--max-len 5", "--max-len")


def test_a_container_without_a_limit_leaves_what_the_system_has(system, monkeypatch, tmp_path):
    cgroup(tmp_path / "cgroup", monkeypatch, 2, "max", 2**30, 0)  # cgroup v2 without a limit
    assert memory.available_memory(CPU) == system.available
    assert memory.container_room() == math.inf


def test_the_limit_that_leaves_less_wins(system, monkeypatch, tmp_path):
    # 1 GiB left in the container
    cgroup(tmp_path / "cgroup", monkeypatch, 2, str(2 * 2**30), 2**30, 0)
    assert memory.available_memory(CPU) == 2**30
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory(4 * 2**30, 2**29))
    assert memory.available_memory(CPU) == 2**29  # the machine has less left than the limit allows
