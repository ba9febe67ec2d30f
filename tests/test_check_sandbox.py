"""`python -m annotated check` runs the learner's code apart (annotated.check.sandbox, appendix 23).

A hang, an exit or a crash of that code is a failed check with one line of reason and exit status 1,
never the grader's end or a pass; the code works in a scratch folder, within `--timeout` seconds and,
on Linux, a memory cap. Cases that would hang or end the test process itself under an in-process
grader run `python -m annotated` in a subprocess; the others call `main` directly.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch.nn.functional as F

from annotated import check
from annotated.app import main
from annotated.check.sandbox import MEMORY

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = """
import torch.nn.functional as F

def my_attention(query, key, value, mask=None):
    {body}
    return F.scaled_dot_product_attention(query, key, value, mask)
"""


def solution(folder: Path, name: str, body: str = "pass", top: str = "") -> str:
    """Write a correct attention whose function first runs `body` (and its module `top`)."""
    text = textwrap.dedent(top) + ATTENTION.format(body=body)
    (folder / name).write_text(text)
    return f"{name}:my_attention"


def in_child(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "annotated", "check", "attention", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,  # an in-process grader would hang here
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )


def says_in_one_line(out: str, err: str, reason: str) -> None:
    """One line, on stderr: an error about the learner's code, not a report (issue 43)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"check.attention: no report: {reason}", out + err
    assert not out.strip() and "Traceback" not in out + err


@pytest.mark.slow  # two Python processes start torch: the grader and its child
@pytest.mark.parametrize(
    "top, body, reason",
    [
        ("while True:\n    pass\n", "pass", "timed out after 2 s while importing loop.py"),
        ("", "while True: pass", "timed out after 2 s while grading loop.py:my_attention"),
        ("import os\nos._exit(0)\n", "pass", "exited with status 0 while importing loop.py"),
        ("import os", "os._exit(0)", "exited with status 0 while grading loop.py:my_attention"),
    ],
    ids=["loop-at-import", "loop-when-called", "os-exit-at-import", "os-exit-when-called"],
)
def test_a_hang_or_a_hard_exit_is_a_failed_check(tmp_path, top, body, reason):
    start = time.monotonic()
    graded = in_child(tmp_path, solution(tmp_path, "loop.py", body, top), "--timeout", "2")
    assert graded.returncode == 1
    says_in_one_line(graded.stdout, graded.stderr, reason)
    # stopped at the limit, not never (generous: a loaded CI machine starts torch slowly)
    assert time.monotonic() - start < 300


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="a signal's name: POSIX")
def test_a_crash_is_a_failed_check(tmp_path):
    target = solution(tmp_path, "crash.py", "ctypes.string_at(0)", top="import ctypes")
    graded = in_child(tmp_path, target)
    assert graded.returncode == 1
    says_in_one_line(
        graded.stdout, graded.stderr, "crashed (SIGSEGV) while grading crash.py:my_attention"
    )


@pytest.mark.slow  # a child process starts torch
@pytest.mark.parametrize(
    "top, body, reason",
    [
        ("import sys\nsys.exit(0)\n", "pass", "exited with status 0 while importing quits.py"),
        ("", "raise KeyboardInterrupt('no')", "quits.py:my_attention raised KeyboardInterrupt: no"),
    ],
    ids=["sys-exit-at-import", "keyboard-interrupt"],
)
def test_an_exit_is_a_failed_check(tmp_path, monkeypatch, capsys, top, body, reason):
    monkeypatch.chdir(tmp_path)
    assert main(["check", "attention", solution(tmp_path, "quits.py", body, top)]) == 1
    says_in_one_line(*capsys.readouterr(), reason)


@pytest.mark.slow  # a child process starts torch
def test_sys_exit_while_graded_is_a_failed_property(tmp_path, monkeypatch, capsys):
    """A SystemExit raised by the graded function is caught like any exception: a report comes back."""
    monkeypatch.chdir(tmp_path)
    assert (
        main(["check", "attention", solution(tmp_path, "quits.py", "sys.exit(0)", "import sys")])
        == 1
    )
    out = capsys.readouterr().out
    assert "check.attention: 0 of 11 properties hold" in out and "raised SystemExit: 0" in out, out


@pytest.mark.slow  # a child process starts torch
def test_the_code_works_in_a_scratch_folder_that_is_removed(tmp_path, monkeypatch, capsys):
    (tmp_path / "precious.txt").write_text("keep me")
    record = tmp_path / "cwd.txt"
    body = f"Path('precious.txt').unlink(missing_ok=True); Path({str(record)!r}).write_text(os.getcwd())"
    target = solution(tmp_path, "cleaner.py", body, top="import os\nfrom pathlib import Path")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "attention", target]) == 0
    assert "check.attention: 11 of 11 properties hold" in capsys.readouterr().out
    assert (tmp_path / "precious.txt").read_text() == "keep me"
    scratch = Path(record.read_text())
    assert scratch != tmp_path and not scratch.exists()


@pytest.mark.slow  # a child process starts torch
def test_the_report_and_the_codes_output_look_as_in_one_process(tmp_path, monkeypatch, capsys):
    target = solution(tmp_path, "good.py", "print('called')", top="print('imported')")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "attention", target]) == 0
    out = capsys.readouterr().out
    in_process = str(check.attention(F.scaled_dot_product_attention))
    assert out == "imported\n" + "called\n" * out.count("called\n") + in_process + "\n"
    assert out.count("called\n") > 0


@pytest.mark.slow  # a child process starts torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS: Linux")
def test_the_memory_is_capped_on_linux(tmp_path, monkeypatch, capsys):
    import resource  # POSIX only: imported after the skip

    record = tmp_path / "limit.json"
    body = f"""soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    size = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    Path({str(record)!r}).write_text(json.dumps([soft, size]))
    mmap.mmap(-1, 2 * {MEMORY})  # address space only: without a cap, no memory is used"""
    top = "import json, mmap, os, resource\nfrom pathlib import Path"
    target = solution(tmp_path, "hog.py", body, top)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "attention", target]) == 1
    out = capsys.readouterr().out
    assert "FAIL  matches_reference" in out and "Cannot allocate memory" in out
    # the failed allocation alone proves nothing on a machine with less than 8 GiB: the limit itself
    soft, size = json.loads(record.read_text())  # as the learner's code saw it, in the child
    assert soft != resource.RLIM_INFINITY and 0 < soft - size <= MEMORY


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_child_ends_when_the_grader_is_killed(tmp_path):
    pid_file = tmp_path / "pid.txt"
    body = f"Path({str(pid_file)!r}).write_text(str(os.getpid()))\n    while True: pass"
    target = solution(tmp_path, "spin.py", body, top="import os\nfrom pathlib import Path")
    grader = subprocess.Popen(
        [sys.executable, "-m", "annotated", "check", "attention", target, "--timeout", "600"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    try:
        pid = read_pid(pid_file, timeout=100)
        assert pid != grader.pid  # the code runs in a child of the grader
    finally:
        grader.kill()
        grader.wait()
    assert ended(pid, timeout=20), "the learner's loop outlived the grader"


@pytest.mark.slow  # a child process starts torch
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_what_the_code_started_ends_when_the_child_ends_by_itself(tmp_path, monkeypatch, capsys):
    pid_file = tmp_path / "pid.txt"
    top = f"""
    import subprocess, sys
    from pathlib import Path
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    started = subprocess.Popen(sleeper, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    Path({str(pid_file)!r}).write_text(str(started.pid))
    """
    target = solution(tmp_path, "starts.py", top=top)  # a correct attention: the child ends well
    monkeypatch.chdir(tmp_path)
    assert main(["check", "attention", target]) == 0
    pid = read_pid(pid_file, timeout=1)  # written before the child ended
    try:
        assert ended(pid, timeout=10), "what the learner's code started outlived the check"
    finally:  # no sleeper left behind by a failed test
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def read_pid(path: Path, timeout: float) -> int:
    """The process id that the learner's code writes to `path`, once written whole."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(FileNotFoundError, ValueError):  # write_text creates, then writes
            return int(path.read_text())
        assert time.monotonic() < deadline, f"no process id in {path} after {timeout} s"
        time.sleep(0.1)


def ended(pid: int, timeout: float) -> bool:
    """Whether the process has ended, or ends within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


def alive(pid: int) -> bool:
    """A running process (a zombie that no one reaps has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("given", ["0", "-1", "abc", "nan", "inf"])
def test_the_time_limit_must_be_a_positive_number(given, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["check", "attention", "any.py:f", "--timeout", given])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert f"argument --timeout: expected a number of seconds above 0, got {given!r}" in err


@pytest.mark.slow  # a child process starts torch
def test_the_code_cannot_forge_the_report_through_a_file(tmp_path, monkeypatch, capsys):
    """The child's working folder and its parents hold nothing the parent reads (issue 43)."""
    forged = json.dumps({"passed": True, "report": "check.attention: forged"})
    top = "import json, os\nfrom pathlib import Path"
    body = f"""for folder in (Path.cwd(), *Path.cwd().parents[:2]):
        for name in ("result.json", "result.part", "marks.txt"):
            with contextlib.suppress(OSError):
                (folder / name).write_text({forged!r})
    os._exit(0)"""
    target = solution(tmp_path, "forger.py", body, "import contextlib\n" + top)
    temp = tmp_path / "temp"  # the scratch folder's parents: inside this test's folder
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)
    monkeypatch.chdir(tmp_path)
    assert main(["check", "attention", target]) == 1
    out, err = capsys.readouterr()
    assert "forged" not in out + err
    says_in_one_line(out, err, "exited with status 0 while grading forger.py:my_attention")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_what_the_code_started_ends_when_the_grader_is_killed(tmp_path):
    """The grader killed (no `finally` runs): the child kills its whole group (issue 43)."""
    pid_file = tmp_path / "pid.txt"
    top = """
    import subprocess, sys
    from pathlib import Path
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    """
    body = f"""started = subprocess.Popen(sleeper, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    Path({str(pid_file)!r}).write_text(str(started.pid))
    while True: pass"""
    target = solution(tmp_path, "starts.py", body, top=top)
    grader = subprocess.Popen(
        [sys.executable, "-m", "annotated", "check", "attention", target, "--timeout", "600"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    try:
        pid = read_pid(pid_file, timeout=100)
    finally:
        grader.kill()
        grader.wait()
    try:
        assert ended(pid, timeout=20), "what the learner's code started outlived the grader"
    finally:  # no sleeper left behind by a failed test
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
