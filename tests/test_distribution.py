"""The distribution: sdist and wheel build, pass `twine check`, and the wheel alone runs the README.

Marked `dist` (run by `make test-dist`): it builds into a temporary folder and installs the wheel,
with its dependencies at the pinned versions, into a fresh virtualenv outside the repository.
With ANNOTATED_WHEEL=path/to/annotated_transformer-*.whl (CI's wheel job builds them once), it checks
that wheel and the sdist beside it instead of building its own.
"""

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
NAME = PROJECT["name"]
WHEEL_ENV = "ANNOTATED_WHEEL"  # a wheel built already (CI's wheel job), its sdist beside it

pytestmark = pytest.mark.dist


def run(*args: str, cwd: Path = ROOT) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def given_files(wheel: Path, out: Path) -> Path:
    """Copy a given wheel and the sdist of the same name and version beside it into `out`."""
    stem = "-".join(wheel.name.split("-")[:2])  # annotated_transformer-0.1.0
    sdist = wheel.with_name(f"{stem}.tar.gz")
    assert wheel.is_file(), f"{WHEEL_ENV}={wheel}: no such file"
    assert sdist.is_file(), f"{WHEEL_ENV}={wheel}: no sdist {sdist.name} beside it"
    expected = f"{NAME.replace('-', '_')}-{PROJECT['version']}"
    assert stem == expected, f"{WHEEL_ENV}={wheel} is not this checkout's {expected}"
    for path in (wheel, sdist):  # only these two, whatever else their folder holds
        shutil.copy(path, out)
    return out


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """A folder holding one sdist and one wheel: the given ones, or built from this checkout."""
    out = tmp_path_factory.mktemp("dist")
    if given := os.environ.get(WHEEL_ENV):
        return given_files(Path(given).resolve(), out)
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT))
    return out


def test_the_distribution_name_is_not_the_unrelated_pypi_project():
    assert NAME == "annotated-transformer"  # `annotated` on PyPI is another project (2017)


def test_twine_check_passes(dist):
    files = sorted(str(p) for p in dist.iterdir())
    assert len(files) == 2, files  # one sdist, one wheel
    run(sys.executable, "-m", "twine", "check", "--strict", *files)


def test_the_wheel_carries_the_package_only(dist):
    (wheel,) = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    outside = [n for n in names if not n.startswith(("annotated/", "annotated_transformer-"))]
    assert outside == []
    modules = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "annotated").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert modules <= set(names), f"missing from the wheel: {sorted(modules - set(names))}"
    assert "annotated/model/__init__.py" in names and "annotated/check/__init__.py" in names
    data = [n for n in names if n.endswith((".ipynb", ".pt", ".json"))]
    assert data == ["annotated/book_files.json"], (
        data
    )  # the list of the book's files, no file of it


def test_the_sdist_holds_no_weights_or_results(dist):
    (sdist,) = dist.glob("*.tar.gz")
    names = tarfile.open(sdist).getnames()
    assert not any("/results/" in n or n.endswith((".pt", ".ipynb")) for n in names)


def test_the_installed_wheel_runs_the_readme_snippet(dist, tmp_path):
    (wheel,) = dist.glob("*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    constraints = ROOT / "constraints.txt"
    run(str(python), "-m", "pip", "install", "--quiet", "-c", str(constraints), str(wheel))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = re.findall(r"```python\n(.*?)```", readme, flags=re.S)[0]
    script = tmp_path / "snippet.py"
    roles = ("validation", "files", "model", "data", "training", "decoding", "check", "app")
    every_role = "".join(f"import annotated.{role}\n" for role in roles)
    script.write_text("import annotated\nprint(annotated.__file__)\n" + every_role + snippet)
    out = run(str(python), str(script), cwd=tmp_path)  # not the repository: no checkout to import
    assert out.splitlines()[0].startswith(str(env_dir))
    assert "torch.Size([2, 4, 64])" in out
