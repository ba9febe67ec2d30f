"""Issue 29, items 8 to 15: two runs on one folder, an impatient Ctrl-C, Ctrl-C while starting up,
translations that stream, input with a byte-order mark or NUL bytes, sizes refused up front, an empty
source, and `--resume` compared with the run's own values."""

import importlib
import io
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import COPY, SENTENCES, fails, listing

import annotated.app.cli as cli
import annotated.runs.folder as runs
from annotated.app import CopyTask, main
from annotated.data import save_tokenizer, train_tokenizer
from annotated.files import sha256_of
from annotated.model import make_model
from annotated.runs import write_manifest
from annotated.training import Trainer, load_checkpoint
from annotated.training.model_file import save_model

ROOT = Path(__file__).resolve().parents[1]
RUN = importlib.import_module("annotated.app.run")  # the module, not its function `train`

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def sigint_as_python_sets_it() -> None:
    """In the child: SIGINT at its default, so that Python installs its Ctrl-C handler. A process
    started in the background by a non-interactive shell (`nohup`, `cmd &`) inherits SIGINT ignored,
    and Python leaves an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


CHILD_SIGINT = {"preexec_fn": sigint_as_python_sets_it} if os.name == "posix" else {}


def start(*args, stdin=None) -> subprocess.Popen:
    """`python -m annotated ARGS` in a fresh process on one thread, its output read line by line."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    env["PYTHONIOENCODING"] = "utf-8"  # German text through the pipes, whatever the locale
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    command = [sys.executable, "-m", "annotated", *map(str, args)]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        encoding="utf-8", **CHILD_SIGINT,
    )  # fmt: skip


def first_line(proc: subprocess.Popen, startswith: str = "", timeout: float = 120.0) -> str:
    """The first line of proc's standard output that starts with `startswith`, or fail after timeout."""
    found = queue.Queue()

    def read() -> None:  # in a thread: select() cannot wait on a pipe on Windows
        while line := proc.stdout.readline():
            if line.startswith(startswith):
                break
        found.put(line)  # "" when the output ended first

    threading.Thread(target=read, daemon=True).start()
    try:
        return found.get(timeout=timeout)
    except queue.Empty:
        proc.kill()
        pytest.fail(f"no line starting with {startswith!r} within {timeout} s")


# sending a signal to another process: Windows has no SIGINT to send (only console events) and
# ends a process outright on SIGTERM
POSIX_SIGNALS = pytest.mark.skipif(os.name != "posix", reason="signals to another process: POSIX")


@pytest.fixture
def python_sigint():
    """Python's own Ctrl-C handler while the test runs (pytest-xdist's workers ignore SIGINT)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


# ---- 8. One run per folder ----------------------------------------------------------------------


@pytest.mark.slow  # a second Python process starts torch
def test_a_second_run_on_the_same_out_is_refused_naming_the_first(capsys, tmp_path):
    out = tmp_path / "run"
    first = start(*COPY, "--steps", "100000", "--log-every", "1", "--out", out)
    try:
        assert first_line(first, "step ")  # training: it holds the folder
        err = fails(capsys, [*COPY, "--steps", "1", "--out", out])
        assert err.startswith(f"error: --out {out} is in use by another run (process {first.pid} ")
        assert "choose another --out" in err
        assert first.poll() is None  # the first run goes on
    finally:
        first.kill()  # kill -9: its lock file stays behind, but no process holds it any more
        first.communicate(timeout=60)
    assert main([*COPY, "--steps", "2", "--out", str(out)]) == 0  # so a new run may take the folder
    assert ".lock" not in listing(out)


# ---- 9. translate streams its output ------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """What 'train' leaves for a Multi30k run, with an untrained tiny model."""
    folder = tmp_path_factory.mktemp("run")
    tok = train_tokenizer(SENTENCES, vocab_size=80)
    V = tok.get_vocab_size()
    torch.manual_seed(0)
    model = make_model(
        V, V, shared_vocab=True, n_layers=1, d_model=16, d_ff=32, n_heads=2, max_len=80
    )
    save_tokenizer(tok, folder / "tokenizer.json")
    sha256 = sha256_of(folder / "tokenizer.json")
    save_model(
        folder / "model.safetensors",
        model,
        step=1,
        task="multi30k",
        run="r1",
        direction="de-en",
        tokenizer_sha256=sha256,
    )
    write_manifest(folder, "r1", 1)
    return folder


def translate(capsys, monkeypatch, run_dir, stdin: bytes):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    code = main(["translate", "--model", str(run_dir / "model.safetensors"), "--beam", "1"])
    out = capsys.readouterr()
    return code, out.out.split("\n")[:-1], out.err


@POSIX_SIGNALS
@pytest.mark.slow  # a second Python process starts torch
def test_translate_prints_each_line_before_the_input_ends(capsys, monkeypatch, run_dir):
    _, expected, _ = translate(capsys, monkeypatch, run_dir, "Ein Hund läuft.\n".encode())
    proc = start("translate", "--model", run_dir / "model.safetensors", "--beam", "1",
                 stdin=subprocess.PIPE)  # fmt: skip
    try:
        proc.stdin.write("Ein Hund läuft.\n")
        proc.stdin.flush()  # and the input stays open, as a pipe from a slow writer would
        assert first_line(proc) == expected[0] + "\n"
        proc.send_signal(signal.SIGINT)  # Ctrl-C while it waits for more: what was printed stays
        # its input still open: the interrupt, not the end of the input, must end it
        proc.wait(timeout=60)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and out == "" and err == "interrupted\n"


# ---- 10. Ctrl-C, Ctrl-C: the save that the first one started is kept ----------------------------


NOTICE = "SIGINT: stopping once {} (a third Ctrl-C stops at once)\n"  # on standard output


@pytest.mark.parametrize("when", ["both in the update", "the second in the save"])
def test_a_second_sigint_does_not_lose_the_save(capsys, tmp_path, monkeypatch, python_sigint, when):
    update, save = Trainer.update, runs.save_checkpoint

    def interrupted_in_update_7(self, group):
        loss = update(self, group)
        if self.step == 7:
            signal.raise_signal(signal.SIGINT)
            if when == "both in the update":
                signal.raise_signal(signal.SIGINT)  # a double press, 5 ms apart
        return loss

    def interrupted_in_save(path, model, *args, step, **kwargs):
        if step == 7 and when == "the second in the save":
            signal.raise_signal(signal.SIGINT)
        return save(path, model, *args, step=step, **kwargs)

    monkeypatch.setattr(Trainer, "update", interrupted_in_update_7)
    monkeypatch.setattr(runs, "save_checkpoint", interrupted_in_save)
    out = tmp_path / "run"
    assert main([*COPY, "--steps", "20", "--eval-every", "5", "--out", str(out)]) == 130
    said = capsys.readouterr()
    assert said.err == (
        f"interrupted by SIGINT at update 7: saved {out / 'checkpoint.pt'} (update 7); "
        f"continue with: python -m annotated train --resume {out}\n"
    )
    assert said.out.count("SIGINT") == 1  # the first press is answered at once, and only it
    assert NOTICE.format("the update under way is done and saved") in said.out
    assert load_checkpoint(out / "checkpoint.pt", restore_rng=False).step == 7


def test_a_third_sigint_stops_at_once_and_says_what_is_kept(
    capsys, tmp_path, monkeypatch, python_sigint
):
    update = Trainer.update

    def three_in_update_7(self, group):
        loss = update(self, group)
        for _ in range(3 if self.step == 7 else 0):
            signal.raise_signal(signal.SIGINT)
        return loss

    monkeypatch.setattr(Trainer, "update", three_in_update_7)
    out = tmp_path / "run"
    err = fails(capsys, [*COPY, "--steps", "20", "--eval-every", "5", "--out", out], code=130)
    assert err == (
        f"interrupted by SIGINT: {out / 'checkpoint.pt'} keeps update 5; "
        f"continue with: python -m annotated train --resume {out}"
    )
    assert load_checkpoint(out / "checkpoint.pt", restore_rng=False).step == 5


@POSIX_SIGNALS
@pytest.mark.slow  # a second Python process starts torch
def test_two_sigints_5_ms_apart_to_a_real_run(tmp_path):
    out = tmp_path / "run"
    proc = start(*COPY, "--steps", "100000", "--log-every", "1", "--out", out)
    try:
        first_line(proc, "step 12 ")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        log, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err.count("\n") == 1, err
    assert log.count(NOTICE.format("the update under way is done and saved")) == 1
    step = load_checkpoint(out / "checkpoint.pt", restore_rng=False).step
    assert step >= 12 and err.startswith(f"interrupted by SIGINT at update {step}: saved")
    assert err.rstrip().endswith(f"continue with: python -m annotated train --resume {out}")


# ---- 10b. Ctrl-C outside the updates: while setting up, reporting, writing the results ----------


def sigint_first(monkeypatch, owner, name: str) -> None:
    """The first call of owner.name starts with a SIGINT to this process, as a Ctrl-C would."""
    real, calls = getattr(owner, name), []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, interrupted)


def go_on(out: Path) -> str:
    return f"continue with: python -m annotated train --resume {out}"


@pytest.mark.parametrize(
    "owner, name", [(cli, "start_runtime"), (CopyTask, "prepare")], ids=["processes", "data"]
)
def test_a_sigint_while_setting_up_stops_at_once(
    capsys, tmp_path, monkeypatch, python_sigint, owner, name
):
    sigint_first(monkeypatch, owner, name)
    err = fails(capsys, [*COPY, "--steps", "20", "--out", tmp_path / "run"], code=130)
    assert err == "interrupted by SIGINT: nothing was saved yet"
    assert listing(tmp_path) == []  # not one update, and no empty folder left behind


def test_a_sigint_while_a_resumed_run_sets_up_keeps_its_checkpoint(
    capsys, tmp_path, monkeypatch, python_sigint
):
    out = tmp_path / "run"
    assert main([*COPY, "--steps", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    sigint_first(monkeypatch, CopyTask, "prepare")
    err = fails(capsys, ["train", "--resume", out, "--steps", "4"], code=130)
    assert err == f"interrupted by SIGINT: {out / 'checkpoint.pt'} keeps update 2; {go_on(out)}"
    assert load_checkpoint(out / "checkpoint.pt", restore_rng=False).step == 2


def test_a_sigint_during_the_report_stops_at_once_and_resume_writes_it(
    capsys, tmp_path, monkeypatch, python_sigint
):
    sigint_first(monkeypatch, CopyTask, "report")  # the test BLEU's beam search, for multi30k
    out = tmp_path / "run"
    err = fails(capsys, [*COPY, "--steps", "6", "--eval-every", "3", "--out", out], code=130)
    assert err == f"interrupted by SIGINT: {out / 'checkpoint.pt'} keeps update 6; {go_on(out)}"
    assert not (out / "results.json").exists()
    assert main(["train", "--resume", str(out)]) == 0  # what it says: the report, nothing more
    assert json.loads((out / "results.json").read_text())["training"]["steps"] == 6


@pytest.mark.parametrize(
    "name, holds, stop",
    [
        ("replica_max_diff", "the update under way is done and saved",
         "interrupted by SIGINT at update 6: saved {ckpt} (update 6); {go_on}"),
        ("write_results", "the results are written",
         "interrupted by SIGINT as the run ended: its results are written"),
    ],
    ids=["saving-the-last-update", "writing-the-results"],
)  # fmt: skip
def test_a_sigint_as_the_run_ends_is_answered_and_not_ignored(
    capsys, tmp_path, monkeypatch, python_sigint, name, holds, stop
):
    sigint_first(monkeypatch, RUN, name)
    out = tmp_path / "run"
    assert main([*COPY, "--steps", "6", "--eval-every", "3", "--out", str(out)]) == 130
    said = capsys.readouterr()
    assert NOTICE.format(holds) in said.out
    assert said.err == stop.format(ckpt=out / "checkpoint.pt", go_on=go_on(out)) + "\n"
    assert load_checkpoint(out / "checkpoint.pt", restore_rng=False).step == 6


# ---- 11. Ctrl-C while torch is being imported ---------------------------------------------------

INTERRUPTED_IMPORT = """
import runpy, signal, sys

class CtrlC:  # Ctrl-C at the moment `import torch` starts: as a user would, a second after Enter
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            signal.raise_signal(signal.SIGINT)

sys.meta_path.insert(0, CtrlC())
sys.argv = ["annotated", "--help"]
runpy.run_module("annotated", run_name="__main__", alter_sys=True)  # python -m annotated --help
"""


def test_sigint_while_importing_torch_exits_130_quietly():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_IMPORT], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=120, **CHILD_SIGINT,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "")


# ---- 12. A byte-order mark is dropped; a NUL byte is refused -------------------------------------


def test_a_byte_order_mark_is_not_part_of_the_first_line(capsys, monkeypatch, run_dir):
    seen = []
    real = cli.translate_ids
    monkeypatch.setattr(
        cli, "translate_ids", lambda m, src, *a: (seen.extend(src), real(m, src, *a))[1]
    )
    line = b"Eine Frau liest ein Buch.\n"
    code, out, err = translate(capsys, monkeypatch, run_dir, b"\xef\xbb\xbf" + line + line)
    assert (code, err) == (0, "") and len(out) == 2
    assert seen[0] == seen[1] and out[0] == out[1]  # what the model read, and what it wrote


def test_a_nul_byte_is_refused_with_its_line_number(capsys, monkeypatch, run_dir):
    code, out, err = translate(
        capsys, monkeypatch, run_dir, b"Ein Hund.\nEin\x00 Hund.\nEin Hund.\n"
    )
    assert code == 1 and len(out) == 3 and out[1] == "" and out[0] == out[2]
    assert err == "error: line 2: a NUL byte at byte 3, so not text; skipped\n"


# ---- 13. A --max-len that cannot fit is refused before any work ----------------------------------


@pytest.mark.parametrize("task", [["--task", "copy"], ["--task", "multi30k"]])
def test_a_max_len_that_cannot_fit_is_refused_up_front(capsys, tmp_path, task):
    args = ["train", *task, "--steps", "1", "--max-len", str(10**9), "--out", tmp_path / "o"]
    err = fails(capsys, args)
    assert err.startswith(f"error: --max-len {10**9} ") and err.endswith("lower --max-len")
    assert "GiB" in err and listing(tmp_path) == []


# ---- 14. An empty source --------------------------------------------------------------------------


def test_decoding_an_empty_source_names_it():
    from annotated.decoding import beam_search, greedy_decode

    model = make_model(7, 9, n_layers=1, d_model=8, d_ff=8, n_heads=2, max_len=20).eval()
    empty, ids = torch.zeros(1, 0, dtype=torch.long), {"bos_id": 1, "eos_id": 2, "pad_id": 0}
    message = r"src must hold at least one token per sentence, got an empty source \(1, 0\)"
    with pytest.raises(ValueError, match=message):
        greedy_decode(model, empty, None, 5, **ids)
    with pytest.raises(ValueError, match=message):
        greedy_decode(model, empty, torch.ones(1, 1, 1, 0, dtype=torch.bool), None, **ids)
    with pytest.raises(ValueError, match=message):
        beam_search(model, empty, None, 2, max_new_tokens=5, **ids)


# ---- 15. --resume compares with the run's own values -----------------------------------------------


def test_resume_accepts_the_runs_own_values_and_names_them_when_they_differ(capsys, tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--task", "copy", "--steps", "2", "--out", str(out)]) == 0
    model = load_checkpoint(out / "checkpoint.pt", restore_rng=False).model.cfg
    capsys.readouterr()
    own = ["--d-model", str(model.d_model), "--n-heads", str(model.n_heads)]
    assert main(["train", "--resume", str(out), *own, "--steps", "3"]) == 0  # its own values
    assert load_checkpoint(out / "checkpoint.pt", restore_rng=False).step == 3
    err = fails(capsys, ["train", "--resume", out, "--d-model", 2 * model.d_model])
    assert err.endswith(f"--d-model {2 * model.d_model} differs from its {model.d_model}")
    err = fails(capsys, ["train", "--resume", out, "--no-tie-output"])  # a flag that turns one off
    assert err.endswith("with its own options, but it was trained without --no-tie-output")


def test_resume_takes_a_flag_for_the_option_it_sets_not_for_its_namesake(capsys, tmp_path):
    out = tmp_path / "run"
    assert main([*COPY, "--steps", "2", "--warmup", "10", "--no-warmup", "--out", str(out)]) == 0
    for again in (["--no-warmup"], ["--warmup", "10"], ["--warmup", "10", "--no-warmup"]):
        steps = 3 + len(again)
        assert main(["train", "--resume", str(out), *again, "--steps", str(steps)]) == 0, again
        assert load_checkpoint(out / "checkpoint.pt", restore_rng=False).step == steps
    capsys.readouterr()
    err = fails(capsys, ["train", "--resume", out, "--warmup", "20"])
    assert err.endswith("--warmup 20 differs from its 10")


def refused(capsys, args) -> str:
    """main(args) stops at the parser: exit status 2 and one line on standard error, returned."""
    with pytest.raises(SystemExit) as exit_:
        main([str(a) for a in args])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_resume_refuses_an_abbreviated_option_and_leaves_the_run_as_it_was(capsys, tmp_path):
    out = tmp_path / "run"
    assert main([*COPY, "--steps", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    err = refused(capsys, ["train", "--resume", out, "--d-mod", "64", "--steps", "3"])
    assert "unrecognized arguments: --d-mod 64 " in err
    assert load_checkpoint(out / "checkpoint.pt", restore_rng=False).step == 2


@pytest.mark.parametrize(
    "args, abbreviated",
    [
        (["train", "--task", "copy", "--step", "3"], "--step"),  # --steps
        (["train", "--task", "copy", "--no-tie", "--steps", "3"], "--no-tie"),  # --no-tie-output
        (["evaluate", "--model", "c.pt", "--lim", "3"], "--lim"),  # --limit
        (["translate", "--model", "c.pt", "--bea", "2"], "--bea"),  # --beam
        (["check", "attention", "a.py:f", "--time", "2"], "--time"),  # --timeout
        (["export-onnx", "--model", "c", "--out", "o", "--tok", "t"], "--tok"),  # --tokenizer
    ],
)
def test_every_command_refuses_an_abbreviated_option(capsys, args, abbreviated):
    assert f"unrecognized arguments: {abbreviated}" in refused(capsys, args)
