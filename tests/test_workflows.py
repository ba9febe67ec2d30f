"""The GitHub workflows call what exists: the modules their inline Python imports, the make targets.

A workflow runs only on GitHub, after a push. A step that imports a module renamed since (the book and
newest-dependencies workflows imported `annotated.multi30k` after the package was split by role into
`annotated.data.multi30k`) or runs a make target removed since (`make test-alone`) fails there, at its
first step, and nothing here would say so. These tests read every workflow's `run:` steps, find the
Python in them (`python -c "..."`, `python - <<EOF` heredocs, `python -m MODULE`, steps whose shell is
python) and the `make` commands, and check each against this checkout: the module is importable here
(importlib.util.find_spec) with the names imported from it, and the target is a rule of the Makefile.
"""

import ast
import importlib
import importlib.util
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))

# A rule's line: `name other-name: prerequisites` (not `NAME := value`, not `$(STAMP): ...`).
RULE = re.compile(r"^([A-Za-z0-9][\w.-]*(?:[ \t]+[A-Za-z0-9][\w.-]*)*)[ \t]*:(?![=:])", re.M)
PYTHON = re.compile(r"python(3(\.\d+)?)?(\.exe)?")  # python, python3, .venv/bin/python3.11, ...
# `COMMAND <<TAG` (or <<'TAG', <<-TAG) up to the line holding only TAG.
HEREDOC = re.compile(
    r"^(?P<cmd>[^\n]*?)<<-?[ \t]*(?P<q>['\"]?)(?P<tag>\w+)(?P=q)[^\n]*\n(?P<body>.*?)^[ \t]*(?P=tag)[ \t]*$",
    re.M | re.S,
)
OPERATORS = {"&&", "||", ";", ";;", "|", "&", "(", ")"}  # what ends a simple command
REDIRECTS = {"<", ">", ">>", ">&", "<&", "&>", ">|", "<>"}  # each takes the next word with it
ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=")


class Call(NamedTuple):
    """One thing a workflow step runs: Python code, a Python module (`-m`), or a make target."""

    where: str  # "file.yml, job: step"
    kind: str  # "code", "module" or "make"
    value: str


def makefile_targets(path: Path = ROOT / "Makefile") -> set[str]:
    """Return the names of the Makefile's rules."""
    return {name for m in RULE.finditer(path.read_text()) for name in m.group(1).split()}


def command_lines(script: str) -> list[str]:
    """Split a shell script at its unquoted newlines, joining continued lines, dropping comments."""
    lines, current, quote, i = [], "", None, 0
    while i < len(script):
        c, pair = script[i], script[i : i + 2]
        if pair == "\\\n" and quote != "'":  # a continued line
            i += 2
            continue
        if c == "\\" and quote != "'":  # an escaped character stays with its backslash
            current, i = current + pair, i + 2
            continue
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (not current or current[-1] in " \t;|&("):  # a comment, to the line's end
            while i < len(script) and script[i] != "\n":
                i += 1
            continue
        elif c == "\n":
            lines, current, i = [*lines, current], "", i + 1
            continue
        current, i = current + c, i + 1
    return [line for line in [*lines, current] if line.strip()]


def simple_commands(line: str) -> Iterator[list[str]]:
    """Yield the argument lists of one command line's simple commands, without assignments."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split, lexer.commenters = True, ""
    argv: list[str] = []
    words = iter(lexer)
    for word in words:
        if word in OPERATORS:
            yield argv
            argv = []
        elif word in REDIRECTS or word.startswith("<<"):
            next(words, None)
            if argv and argv[-1].isdigit():  # the descriptor of 2>&1, which shlex splits off
                argv.pop()
        elif not argv and (ASSIGNMENT.match(word) or word in ("env", "sudo", "time")):
            continue  # VAR=value make ..., env VAR=value python ...
        else:
            argv.append(word)
    yield argv


def calls_in_command(argv: list[str]) -> Iterator[tuple[str, str]]:
    """Yield (kind, value) for what one simple command runs: make targets, python -c or -m."""
    if not argv:
        return
    program, args = Path(argv[0]).name, iter(argv[1:])
    if program == "make":
        for word in args:
            if word in ("-C", "-f", "-j", "-o", "-W", "-I", "--directory", "--file"):
                next(args, None)  # the option's value
            elif not word.startswith("-") and "=" not in word:  # not an option or VAR=value
                yield "make", word
    elif PYTHON.fullmatch(program):
        for word in args:
            if word in ("-c", "-m"):
                yield ("code" if word == "-c" else "module"), next(args, "")
                return
            if word in ("-X", "-W"):
                next(args, None)
            elif not word.startswith("-"):  # a script file: its own business
                return


def calls_in_script(script: str) -> Iterator[tuple[str, str]]:
    """Yield (kind, value) for what a bash `run:` script runs, heredocs fed to python included."""
    for m in HEREDOC.finditer(script):
        if any(kind == "stdin" for kind, _ in python_stdin(m["cmd"])):
            yield "code", m["body"]
    for line in command_lines(HEREDOC.sub(lambda m: m["cmd"], script)):
        for argv in simple_commands(line):
            yield from calls_in_command(argv)


def python_stdin(line: str) -> Iterator[tuple[str, str]]:
    """Yield ("stdin", program) for each python of a line that reads its program from stdin."""
    for argv in simple_commands(line):
        if argv and PYTHON.fullmatch(Path(argv[0]).name):
            if not any(w in ("-c", "-m") for w in argv[1:]):
                yield "stdin", argv[0]


def workflow_calls(path: Path) -> list[Call]:
    """Return every Call of every `run:` step of one workflow file."""
    workflow = yaml.safe_load(path.read_text(encoding="utf-8"))
    default_shell = (workflow.get("defaults") or {}).get("run", {}).get("shell", "bash")
    calls = []
    for job_id, job in (workflow.get("jobs") or {}).items():
        job_shell = (job.get("defaults") or {}).get("run", {}).get("shell", default_shell)
        for n, step in enumerate(job.get("steps") or [], start=1):
            if "run" not in step:
                continue
            where = f"{path.name}, {job_id}: {step.get('name') or f'step {n}'}"
            shell = step.get("shell", job_shell)
            if shell.split()[0] == "python":  # `shell: python {0}`: the whole step is Python
                calls.append(Call(where, "code", step["run"]))
            else:
                calls += [Call(where, kind, value) for kind, value in calls_in_script(step["run"])]
    return calls


def imported(code: str) -> Iterator[tuple[str, list[str]]]:
    """Yield (module, names imported from it) for each import statement of some Python code."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [alias.name for alias in node.names if alias.name != "*"]


def module_problem(module: str, names: list[str]) -> str | None:
    """Say what is missing: the module, or a name imported from it; None when all exist here."""
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:  # a parent package that does not exist, or that refuses the name
        spec = None
    if spec is None:
        return f"no module {module}"
    if names:
        loaded = importlib.import_module(module)
        for name in names:  # a name defined in the module, or a submodule of a package
            submodule = hasattr(loaded, "__path__") and importlib.util.find_spec(f"{module}.{name}")
            if not hasattr(loaded, name) and not submodule:
                return f"{module} has no {name}"
    return None


def problems(calls: list[Call], targets: set[str]) -> list[str]:
    """Return one line per call that could not run from this checkout."""
    found = []
    for call in calls:
        if call.kind == "make" and call.value not in targets:
            found.append(f"{call.where}: make {call.value}: no such Makefile target")
        elif call.kind == "module" and (problem := module_problem(call.value, [])):
            found.append(f"{call.where}: python -m {call.value}: {problem}")
        elif call.kind == "code":
            try:
                modules = list(imported(call.value))
            except SyntaxError as error:
                found.append(f"{call.where}: inline Python does not parse: {error}")
                continue
            for module, names in modules:
                if problem := module_problem(module, names):
                    found.append(f"{call.where}: inline Python imports {problem}")
    return found


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_module_and_make_target_a_workflow_runs_exists(path):
    found = problems(workflow_calls(path), makefile_targets())
    assert not found, "\n".join(found)


def test_the_reader_sees_what_the_workflows_run():
    targets = makefile_targets()
    assert {"test", "check", "install", "html", "test-suite", "test-dist"} <= targets
    # Variables and special targets are not rules.
    assert not {"PYTHON", "VENV", "STAMP", ".PHONY"} & targets
    calls = {(c.kind, c.value) for path in WORKFLOWS for c in workflow_calls(path)}
    assert ("make", "install") in calls and ("make", "test-portable") in calls
    assert ("module", "pytest") in calls  # the Windows job: python -m pytest
    assert any(kind == "code" and "multi30k_path" in value for kind, value in calls)


def test_the_check_catches_a_renamed_module_and_a_removed_target(tmp_path):
    workflow = tmp_path / "old.yml"
    workflow.write_text(
        """
jobs:
  build:
    steps:
      - name: data  # what book.yml ran before the fix
        run: |
          make install  # the pinned set, only to fetch the data: it's quick
          .venv/bin/python -c "from annotated.multi30k import MULTI30K_SHA256 as F; print(F)"
      - name: heredoc and targets
        run: |
          python - <<'EOF'
          import annotated_no_such_module  # a comment's quote: don't
          EOF
          ANNOTATED_WHEEL="$(ls "$PWD"/dist/*.whl)" make test-dist \\
            test-alone && make book-check >/dev/null 2>&1
          python3 -c 'from annotated.data.multi30k import no_such_name'
      - name: Python as the shell
        shell: python {0}
        run: import annotated.nowhere
"""
    )
    found = problems(workflow_calls(workflow), makefile_targets())
    assert found == [
        "old.yml, build: data: inline Python imports no module annotated.multi30k",
        "old.yml, build: heredoc and targets: inline Python imports no module annotated_no_such_module",
        "old.yml, build: heredoc and targets: make test-alone: no such Makefile target",
        "old.yml, build: heredoc and targets: make book-check: no such Makefile target",
        "old.yml, build: heredoc and targets: inline Python imports annotated.data.multi30k has no no_such_name",
        "old.yml, build: Python as the shell: inline Python imports no module annotated.nowhere",
    ]
