"""The GitHub workflows call what exists: every module their inline Python imports, every make target.

Nothing runs the workflows here, so a renamed module or target would stop a workflow at its first
step unseen (the book and weekly workflows once imported `annotated.multi30k`, which did not exist).
"""

import ast
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def run_scripts(path: Path) -> list[str]:
    """The `run:` scripts of every step of every job, each continued line joined to the next."""
    jobs = yaml.safe_load(path.read_text())["jobs"].values()
    steps = [step for job in jobs for step in job.get("steps", [])]
    return [step["run"].replace("\\\n", " ") for step in steps if "run" in step]


def inline_python(script: str) -> list[str]:
    """The code of each `python -c "..."` in a shell script."""
    codes = []
    for line in script.splitlines():
        if re.search(r"python[\d.]*\s+-c\s", line):
            words = shlex.split(line, comments=True)
            codes += [words[i + 1] for i, word in enumerate(words[:-1]) if word == "-c"]
    return codes


def imported_modules(code: str) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module)
    return modules


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*):(?!=)", text, re.M))


def test_the_workflows_run_inline_python():
    """The parser finds the snippets these tests check (a test that finds none checks nothing)."""
    assert any(inline_python(s) for path in WORKFLOWS for s in run_scripts(path))


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_module_a_workflow_imports_exists(path):
    modules = {
        m for s in run_scripts(path) for code in inline_python(s) for m in imported_modules(code)
    }
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    assert not missing, f"{path.name} imports {missing}, which do not exist"


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_make_target_a_workflow_runs_exists(path):
    targets = make_targets()
    called = set()
    for script in run_scripts(path):
        for line in script.splitlines():
            words = shlex.split(line, comments=True)
            if "make" in words:
                after = words[words.index("make") + 1 :]
                called |= {w for w in after if not w.startswith("-") and "=" not in w}
    missing = sorted(called - targets)
    assert not missing, f"{path.name} runs make {missing}; the Makefile has no such target"
