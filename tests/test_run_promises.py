"""What a run promises about itself: its budget only grows, a finished run's results stay, the commit it
records is the package's own, and its checkpoint stays under the cap however long it trains."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_helpers import COPY, fails

from annotated.app import main
from annotated.model import make_model
from annotated.runs import RunFiles, git_commit
from annotated.training import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

RUN = [*COPY, "--steps", "4", "--eval-every", "2", "--eval-size", "16", "--batch-size", "8"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A copy-task run of 4 updates that ended and wrote its results."""
    out = tmp_path_factory.mktemp("finished")
    assert main([*RUN, "--out", str(out)]) == 0
    return out


def copy_of(folder: Path, tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    run = tmp_path / "run"
    shutil.copytree(folder, run)
    return run, {p.name: p.read_bytes() for p in run.iterdir()}


def test_a_budget_below_what_the_run_did_is_refused(capsys, finished, tmp_path):
    run, before = copy_of(finished, tmp_path)
    capsys.readouterr()
    line = fails(capsys, ["train", "--resume", run, "--steps", 2])
    assert "--steps 2" in line and "4 updates" in line, line
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


@pytest.mark.parametrize("budget", [[], ["--steps", "4"], ["--steps", "4", "--minutes", "30"]])
def test_a_finished_run_keeps_its_results(capsys, finished, tmp_path, budget):
    """Its snapshots are gone: reporting it again would average fewer of them and replace its results."""
    run, before = copy_of(finished, tmp_path)
    capsys.readouterr()
    line = fails(capsys, ["train", "--resume", run, *budget])
    assert "finished" in line and "--steps 4" in line, line
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_a_finished_run_with_a_larger_budget_trains_on(capsys, finished, tmp_path):
    run, _ = copy_of(finished, tmp_path)
    assert main(["train", "--resume", str(run), "--steps", "6"]) == 0
    assert json.loads((run / "results.json").read_text())["training"]["steps"] == 6


def test_a_finished_time_budget_is_refused(capsys, tmp_path):
    out = tmp_path / "timed"
    # the time budget, not the copy task's default steps, must end the run, however fast the machine
    timed = [
        *COPY,
        "--minutes",
        "0.01",
        "--steps",
        "10000000",
        "--eval-size",
        "16",
        "--batch-size",
        "8",
    ]
    assert main([*timed, "--out", str(out)]) == 0
    capsys.readouterr()
    line = fails(capsys, ["train", "--resume", out, "--minutes", "0.01"])
    assert "finished" in line and "--minutes 0.01" in line, line


def git(where, *args):
    return subprocess.run(
        ["git", "-C", str(where), *args], capture_output=True, text=True, check=True
    )


@pytest.fixture
def checkout(tmp_path):
    """A git repository holding a package folder `pkg`, and an ignored folder `site` beside it."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "code.py").write_text("x = 1\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "code.py").write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("site/\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "pkg", ".gitignore")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return tmp_path


def test_the_commit_is_the_packages_own_and_says_when_it_was_modified(checkout):
    sha = git(checkout, "rev-parse", "--short", "HEAD").stdout.strip()
    assert git_commit(checkout / "pkg") == sha
    (checkout / "pkg" / "code.py").write_text("x = 2\n")
    assert git_commit(checkout / "pkg") == f"{sha}+modified"
    (checkout / "pkg" / "code.py").write_text("x = 1\n")
    (checkout / "pkg" / "new.py").write_text("y = 1\n")  # a module not committed yet
    assert git_commit(checkout / "pkg") == f"{sha}+modified"


def test_a_package_outside_a_checkout_records_unknown(checkout, tmp_path_factory):
    assert git_commit(checkout / "site") == "unknown"  # installed into a folder that git ignores
    assert git_commit(tmp_path_factory.mktemp("wheel")) == "unknown"


def test_the_commit_does_not_depend_on_where_the_user_stands(checkout, monkeypatch):
    here = git_commit()
    monkeypatch.chdir(checkout)  # inside another repository
    assert git_commit() == here


def test_only_rank_0_reads_the_snapshots(capsys, finished, monkeypatch):
    ckpt = load_checkpoint(finished / "checkpoint.pt", restore_rng=False)
    assert ckpt.extra["snapshots"]  # listed, and dropped when the run finished
    other = RunFiles(finished, ckpt.extra["run"], {}, "copy", main=False)
    assert other.load_snapshots(ckpt) == [] and capsys.readouterr().out == ""
    rank0 = RunFiles(finished, ckpt.extra["run"], {}, "copy", main=True)
    assert rank0.load_snapshots(ckpt) == [] and "is missing" in capsys.readouterr().out


def test_the_loss_curve_stays_bounded_however_long_the_run(tmp_path):
    from annotated.app.run import CURVE_POINTS, add_to_curve

    curve = []
    for step in range(1, 1_000_001):
        add_to_curve(curve, (step, round(1.0 / step, 4)))
    steps = [s for s, _ in curve]
    assert CURVE_POINTS // 2 <= len(curve) <= CURVE_POINTS
    every = steps[0]
    assert steps == list(range(every, 1_000_001, every))  # evenly spaced, none lost in between
    assert curve[-1][1] == round(1.0 / steps[-1], 4)

    # a checkpoint with it, and the largest curve, loads back: the cap still has room for it
    model = make_model(11, 11, n_layers=1, d_model=16, d_ff=32, n_heads=2)
    progress = {"curve": curve, "evals": [], "wall": 1.0}
    save_checkpoint(tmp_path / "c.pt", model, step=1_000_000, progress=progress)
    assert load_checkpoint(tmp_path / "c.pt", restore_rng=False).extra["progress"]["curve"] == curve


def test_a_short_run_keeps_every_update():
    from annotated.app.run import add_to_curve

    curve = []
    for step in range(1, 101):
        add_to_curve(curve, (step, 2.0))
    assert [s for s, _ in curve] == list(range(1, 101))


def test_the_evaluations_stay_bounded_too():
    """They come every eval_every updates: the curve keeps every k-th of them, k doubling."""
    from annotated.app.run import CURVE_POINTS, add_to_curve

    evals = []
    for step in range(50, 50 * 3 * CURVE_POINTS + 1, 50):
        add_to_curve(evals, (step, 0.5, 0.25))
    steps = [s for s, *_ in evals]
    assert len(evals) <= CURVE_POINTS and steps == list(range(steps[0], steps[-1] + 1, steps[0]))
    assert steps[0] % 50 == 0 and steps[-1] > 50 * 2 * CURVE_POINTS


def test_fewer_minutes_than_the_run_trained_are_refused(capsys, finished, tmp_path):
    run, before = copy_of(finished, tmp_path)
    wall = load_checkpoint(run / "checkpoint.pt", restore_rng=False).extra["progress"]["wall"]
    assert wall > 0
    # half the minutes the run trained, however fast the machine
    minutes = float(f"{wall / 120:.2g}")
    capsys.readouterr()
    line = fails(capsys, ["train", "--resume", run, "--steps", 6, "--minutes", minutes])
    assert f"--minutes {minutes:g}" in line and "minutes that run" in line, line
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before
