"""Run every notebook alone, as Colab runs it, and compare its stored outputs (`make test-portable`).

Each notebook is copied into an empty folder of its own and run by nbval with the kernel of a fresh
virtualenv that holds the wheel and nothing of this checkout; the dependencies come from this
environment through a path file (a plain path line: this environment's editable `annotated` stays
out). The book's recorded files come from this checkout, served on 127.0.0.1 through
ANNOTATED_FILES_URL into an empty cache: what a reader's download does, checksums included.

`make test-portable` runs this under PyTorch's scalar kernels on one thread (tools/portable_env.py),
so the one execution proves two things: a notebook needs no repository around it, and its stored
outputs hold on a CPU that computes differently from the machine that stored them.

ANNOTATED_WHEEL=path/to/annotated-*.whl tests a wheel built elsewhere (CI builds it once); otherwise
the wheel is built here. Extra arguments go to pytest:  python tools/run_alone.py -k 13_copy_task
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = "annotated-alone"


def wheel(work: Path) -> Path:
    """ANNOTATED_WHEEL, or a wheel built from a copy of the package (setuptools writes into its source)."""
    given = os.environ.get("ANNOTATED_WHEEL")
    if given:
        if not Path(given).is_file():
            raise SystemExit(f"ANNOTATED_WHEEL={given!r}: no such file; expected a built wheel")
        return Path(given)
    source = work / "source"
    shutil.copytree(
        ROOT / "annotated", source / "annotated", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(work / "dist"), str(source)], check=True)
    (built,) = (work / "dist").glob("*.whl")
    return built


def virtualenv(work: Path, wheel_file: Path) -> Path:
    """A virtualenv with the wheel alone, this environment's dependencies on its path; its python."""
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel_file)], check=True)
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.check_output([python, "-c", where], text=True).strip())
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def check_sees_the_wheel(python: Path, folder: Path) -> None:
    """The kernel's `annotated` is the wheel's, and it finds no clone of the repository around it."""
    code = "import annotated, annotated.book_files as b; print(annotated.__file__); print(b.clone_root())"
    printed = subprocess.check_output([python, "-c", code], cwd=folder, text=True).splitlines()
    if Path(printed[0]).is_relative_to(ROOT) or printed[1] != "None":
        raise SystemExit(f"the notebooks' kernel would use this checkout: {printed}")


def kernelspec(work: Path, python: Path) -> Path:
    """A Jupyter folder declaring the virtualenv's kernel as KERNEL."""
    spec = work / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"})
    )
    return work / "jupyter"


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="annotated-alone-") as tmp:
        work = Path(tmp)
        python = virtualenv(work, wheel(work))
        empty = work / "empty"
        empty.mkdir()
        check_sees_the_wheel(python, empty)
        jupyter = kernelspec(work, python)
        copies = work / "notebooks"
        for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
            (copies / notebook.stem).mkdir(parents=True)
            shutil.copy(notebook, copies / notebook.stem / notebook.name)
        # the root conftest.py: nbval's kernels talk over Unix sockets (see there)
        shutil.copy(ROOT / "conftest.py", work / "conftest.py")
        server = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Quiet, directory=str(ROOT))
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        env = {
            **os.environ,
            "JUPYTER_PATH": str(jupyter),
            "ANNOTATED_FILES_URL": f"http://127.0.0.1:{server.server_port}/",
            "ANNOTATED_CACHE": str(work / "cache"),
        }
        pytest = [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml")]
        options = ["--rootdir", str(work), "-p", "no:cacheprovider", "-n", "auto"]
        options += ["--maxprocesses", "4", "--dist", "loadfile", "--nbval"]
        options += ["--nbval-kernel-name", KERNEL, "--nbval-sanitize-with"]
        options += [str(ROOT / "nbval_sanitize.cfg"), *sys.argv[1:], str(copies)]
        done = subprocess.run([*pytest, *options], cwd=work, env=env)
        server.shutdown()
        return done.returncode


if __name__ == "__main__":
    sys.exit(main())
