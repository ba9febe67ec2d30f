"""Every notebook runs alone, as Colab runs it: from the wheel, in an empty folder, no repository around.

Marked `alone` (run by `make test-alone`, which CI runs after `make test`). Each pytest worker builds
the wheel once and installs it, without dependencies, into a fresh virtualenv; the dependencies come
from this environment through a path file (a plain path line: the editable `annotated` of this
environment stays out). Each notebook is copied alone into an empty folder and executed top to bottom
with that virtualenv's kernel. The book's recorded files come from this checkout, served on 127.0.0.1
through ANNOTATED_FILES_URL, into an empty cache: what a reader's download does, checksums included.
Outputs are not compared (nbval does that in `make test`); every cell must run.
"""

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
import uuid
import venv
from pathlib import Path

import nbformat
import pytest
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL = "annotated-alone"

pytestmark = pytest.mark.alone


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def alone(tmp_path_factory) -> dict[str, str]:
    """A virtualenv holding only the wheel, its kernel, and the environment a notebook runs with."""
    work = tmp_path_factory.mktemp("alone")
    # built from a copy: pytest's workers each build one, and setuptools writes into the source tree
    source = work / "source"
    shutil.copytree(
        ROOT / "annotated", source / "annotated", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(work / "dist"), str(source)], check=True)
    (wheel,) = (work / "dist").glob("*.whl")
    env_dir = work / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    spec = work / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"})
    )
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(ROOT))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = {
        "JUPYTER_PATH": str(work / "jupyter"),
        "ANNOTATED_FILES_URL": f"http://127.0.0.1:{server.server_port}/",
        "ANNOTATED_CACHE": str(work / "cache"),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "agg",
    }
    yield env
    server.shutdown()


def kernel_manager() -> AsyncKernelManager:
    """The kernel talks over Unix sockets where there are some (see the root conftest.py: TCP ports
    picked free can be taken by another worker's kernel before they are bound)."""
    if os.name == "nt":
        return AsyncKernelManager(kernel_name=KERNEL)
    sockets = Path(tempfile.gettempdir()) / f"kernel-{uuid.uuid4().hex[:12]}"  # absolute: see there
    return AsyncKernelManager(kernel_name=KERNEL, transport="ipc", ip=str(sockets))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_alone(notebook, alone, tmp_path, monkeypatch):
    for name, value in alone.items():
        monkeypatch.setenv(name, value)
    folder = tmp_path / "colab"
    folder.mkdir()
    shutil.copy(notebook, folder / notebook.name)
    nb = nbformat.read(folder / notebook.name, as_version=4)
    client = NotebookClient(
        nb, km=kernel_manager(), timeout=900, resources={"metadata": {"path": str(folder)}}
    )
    client.execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    # the setup cell found the release installed: nothing was downloaded from outside
    assert not any("pip" in o.get("text", "") for o in code[0].outputs), code[0].outputs


def test_the_kernel_sees_the_wheel_not_this_checkout(alone, tmp_path, monkeypatch):
    for name, value in alone.items():
        monkeypatch.setenv(name, value)
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import annotated, annotated.book_files as b\nprint(annotated.__file__)\nprint(b.clone_root())"
            )
        ]
    )
    NotebookClient(
        nb, km=kernel_manager(), resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    printed = nb.cells[0].outputs[0]["text"].splitlines()
    assert not Path(printed[0]).is_relative_to(ROOT) and printed[1] == "None", printed
