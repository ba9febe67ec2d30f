"""Run one exercise of the book without replaying its chapter: its setup, an answer, its check cell.

An exercise is three code cells in a row: a starter, a solution (its first line is SOLUTION) and the
check cell that grades whatever the name holds. To grade an answer (the solution, or the solution with
one edit: a wrong answer) the check needs only the earlier cells that make what it and the answer read.
`setup` finds them by slicing the chapter backwards:

- start from the names the answers and the check cell read and do not bind themselves;
- walk back over the earlier code cells; keep a cell when it binds or changes a name still needed
  (an assignment, `x.a = ...`, `x[i] = ...`, `x += ...`, a def, a class, an import, a statement that
  calls a method of a variable, such as `model.train()` or `trainer.fit(...)`, or passes it to an
  in-place function such as `init_(x)`);
- a kept cell's own reads become needed, and what it binds for good stops being needed;
- names read inside functions are read when the function is called, maybe after a later cell has
  bound them: they are looked for again from the exercise backwards, until nothing new is needed.

Cells that only draw, print or assert are skipped that way. Cells that set process-wide state the
check's numbers depend on (threads, PyTorch's fast path) are always kept. The few cells a slice keeps
but a test cannot afford are changed in CHANGES, each with why the check stays what the reader runs.
The slice does not follow objects through each other: a cell that changes `model` only by calling
`trainer.fit()` is kept only if it binds or changes a needed name itself. The unedited solution must
pass its check on the setup, which is what proves a slice enough; none in the book needed more.

An exercise's setup runs once, in a fresh namespace (exercises of a chapter with the same slice share
it); each answer runs in a copy of it, a new dict, so an answer that rebinds a name leaves the setup
alone (as the chapter replays did, objects are shared: no check here changes the setup's objects).
Process-wide state the setup changes (torch's threads, the fast path) is put back after it and set
again around each answer and its check.
"""

import ast
import collections
import functools
import json
import re
import symtable
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import torch
from IPython.core.inputtransformer2 import TransformerManager

from annotated.check import Report

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
SOLUTION = (
    '#@title Solution { display-mode: "form" }'  # a solution cell's first line (Colab's form)
)
# calls that set state for the whole process, which the check's numbers may depend on
PROCESS_STATE = {"set_num_threads", "set_fastpath_enabled"}

# code cells executed, by kind ("setup", "answer", "check"): the suite's cost in chapter cells
EXECUTED: collections.Counter = collections.Counter()


def instead(code: str) -> Callable[[str], str]:
    """Run `code` in the cell's place."""
    return lambda cell: code


def up_to(line: str) -> Callable[[str], str]:
    """Keep the cell up to (not including) the line that starts with `line`."""
    return lambda cell: cell[: cell.index("\n" + line) + 1]


def then(code: str) -> Callable[[str], str]:
    """Run `code` after the cell."""
    return lambda cell: cell + "\n" + code


def replace(old: str, new: str) -> Callable[[str], str]:
    """Replace the one `old` of the cell by `new`."""

    def change(cell: str) -> str:
        assert cell.count(old) == 1, f"{old!r} is not in the cell once"
        return cell.replace(old, new)

    return change


# Chapter 16's check trains three tokenizers on Multi30k (1,000, 8,000 and 32,000 tokens) for every
# answer it grades, and both its exercises' setups train the chapter's. BPE training is deterministic
# (the same pairs and size give the same tokenizer, as the check's first assert relies on), so each
# (pairs, size) is trained once in the session (TRAINED) and every later call gets a fresh copy of that
# tokenizer: the learner's function still calls train_tokenizer, with its own arguments, and gets what
# training would give it.
TRAINED: dict = {}
TRAINED_ONCE = """
from exercise_harness import TRAINED as _trained

_train_tokenizer = train_tokenizer


def train_tokenizer(pairs, vocab_size=8000):
    pairs = tuple(pairs)
    if (pairs, vocab_size) not in _trained:
        _trained[pairs, vocab_size] = _train_tokenizer(pairs, vocab_size).to_str()
    return Tokenizer.from_str(_trained[pairs, vocab_size])
"""

# Chapter 17's check translates its 40 test sentences three times with beam search (alpha 0.6, alpha 0
# and the learner's way). translate_ids is deterministic (the model in eval mode, no sampling), so each
# (model, sources, beam, alpha) is translated once and every later call gets a copy of the same ids:
# the learner's function still calls translate_ids with its own arguments and gets what it would give.
TRANSLATED_ONCE = """
_translated, _translate_ids = {}, translate_ids


def translate_ids(model, sources, beam, alpha, device, batch_size=64):
    key = (id(model), tuple(map(tuple, sources)), beam, alpha, str(device), batch_size)
    if key not in _translated:
        _translated[key] = _translate_ids(model, sources, beam, alpha, device, batch_size)
    return [list(ids) for ids in _translated[key]]
"""

# notebook: [(a text that one code cell holds, how that cell changes, why the check stays meaningful)]
CHANGES = {
    "16_translation": [
        (
            "def train_tokenizer(",
            then(TRAINED_ONCE),
            "each tokenizer is trained once; the check's sizes, data and thresholds are the chapter's",
        ),
    ],
    "17_reading_the_model": [
        (
            "def translate_ids(",
            then(TRANSLATED_ONCE),
            "each translation is computed once; the check's sentences, beams and alphas are the chapter's",
        ),
        (
            'model = load_model(RUN / "model_fp16.safetensors"',
            up_to("greedy = ["),
            "the model, its tokenizer and the test sources the check reads, without translating "
            "the test set greedily (the check translates its 40 sentences itself)",
        ),
    ],
    "20_norm_placement_experiment": [
        (
            "for norm_first in (False, True):\n    for warmup in (True, False):",
            replace(
                "for norm_first in (False, True):\n    for warmup in (True, False):",
                "for norm_first in (False,):\n    for warmup in (True,):",
            ),
            "the check reads post-LN's runs with warm-up only (curves[False, True], post_warm): the "
            "six other runs, for the chapter's figure and asserts, are not trained",
        ),
        (
            "post_warm, post_cold = final[False, True]",
            instead("post_warm = final[False, True]\n"),
            "post_warm alone, without the asserts on the runs that are not trained",
        ),
    ],
}


def code_cells_of(path: Path) -> list[str]:
    """The code cells' sources as plain Python (IPython's `%` magics left out, each as a `pass`)."""
    cells = json.loads(path.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    python = [TransformerManager().transform_cell(s) for s in sources]  # `%x` -> get_ipython()...
    return [re.sub(r"get_ipython\(\)\.run_line_magic\(.*\)", "pass", s) for s in python]


@functools.cache
def code_cells(notebook: str) -> tuple[str, ...]:
    """The chapter's code cells as plain Python, with CHANGES made; each text names exactly one cell."""
    cells = code_cells_of(NOTEBOOKS / f"{notebook}.ipynb")
    for marker, change, _ in CHANGES.get(notebook, []):
        hits = [i for i, cell in enumerate(cells) if marker in cell]
        assert len(hits) == 1, f"{notebook}: {len(hits)} cells hold {marker!r}"
        cells[hits[0]] = change(cells[hits[0]])
    return tuple(cells)


def name_of(solution_cell: str) -> str:
    return re.search(r"^(?:def|class) (\w+)", solution_cell, re.M).group(1)


@dataclass(frozen=True)
class Exercise:
    notebook: str
    name: str
    index: int  # of the solution cell among the chapter's code cells
    solution: str  # the solution cell without its title line and decorator: an answer
    check: str  # the cell after it

    @property
    def graded(self) -> bool:
        """Is the check one call to a grader of the package (`check.attention(...)`)?"""
        body = ast.parse(self.check).body
        call = len(body) == 1 and isinstance(body[0], ast.Expr) and body[0].value
        func = isinstance(call, ast.Call) and call.func
        return isinstance(func, ast.Attribute) and getattr(func.value, "id", None) == "check"


@functools.cache
def exercises(notebook: str) -> dict[str, Exercise]:
    cells = code_cells(notebook)
    found = {}
    for i, cell in enumerate(cells):
        if cell.startswith(SOLUTION):
            lines = [ln for ln in cell.splitlines() if ln not in (SOLUTION, "@check.solution")]
            name = name_of(cell)
            found[name] = Exercise(notebook, name, i, "\n".join(lines) + "\n", cells[i + 1])
    return found


def exercise(notebook: str, name: str) -> Exercise:
    return exercises(notebook)[name]


# --- what a cell reads, binds and changes ---------------------------------------------------------


@dataclass(frozen=True)
class Effects:
    reads: frozenset[str]  # names read before the cell binds them, including inside its functions
    later: frozenset[str]  # names read inside its functions: read when they are called
    binds: frozenset[str]  # names (re)bound for good at the cell's top level
    touches: frozenset[str]  # names bound anywhere at top level, or changed in place
    calls_on: frozenset[str]  # names whose methods a statement calls, or passed to an in-place call
    state: bool  # sets process-wide state (PROCESS_STATE)


def _scope_reads(table: symtable.SymbolTable) -> tuple[set[str], set[str]]:
    """Global names read now and read later (in functions and lambdas) by the table's child scopes."""
    now, later = set(), set()
    for child in table.get_children():
        globals_read = {
            s.get_name()
            for s in child.get_symbols()
            if s.is_referenced() and (s.is_global() or s.is_declared_global())
        }
        child_now, child_later = _scope_reads(child)
        if child.get_type() == "function" and child.get_name() not in (
            "listcomp",
            "setcomp",
            "dictcomp",
            "genexpr",
        ):
            later |= globals_read | child_now | child_later
        else:  # a class body or a comprehension runs at once
            now |= globals_read | child_now
            later |= child_later
    return now, later


def _root(node: ast.AST) -> str | None:
    """`x` of `x`, `x.a`, `x[i].b`, `x.a(...).b`: the name an expression starts from."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _names(target: ast.AST) -> set[str]:
    """The plain names an assignment target binds (`a`, `a, (b, *c)`)."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Tuple | ast.List):
        return set().union(*(_names(t) for t in target.elts))
    if isinstance(target, ast.Starred):
        return _names(target.value)
    return set()


def _top_level(stmt: ast.stmt):
    """The statement and those nested in its blocks (for, with, if, try), not in defs or classes."""
    yield stmt
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return
    for field in ("body", "orelse", "finalbody", "handlers"):
        for child in getattr(stmt, field, []):
            yield from _top_level(child)


def _changes(stmt: ast.stmt) -> tuple[set[str], set[str], bool]:
    """Names changed in place, names whose methods are called (or passed to an in-place call), and
    whether the statement sets process-wide state."""
    changed, called_on, state = set(), set(), False
    for node in _top_level(stmt):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute | ast.Subscript) and _root(part):
                    changed.add(_root(part))
        call = node.value if isinstance(node, ast.Expr | ast.Assign) else None
        if isinstance(call, ast.Call):
            func = call.func
            attr = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            state |= attr in PROCESS_STATE
            if isinstance(node, ast.Expr) and isinstance(func, ast.Attribute) and _root(func):
                called_on.add(_root(func))  # model.train(), trainer.fit(batches)
            if attr.endswith("_") and not attr.endswith("__"):  # init_(x): in place, by convention
                called_on |= {_root(a) for a in [*call.args, *(k.value for k in call.keywords)]}
    return changed, called_on - {None}, state


def _binds(stmt: ast.stmt) -> set[str]:
    """Names the statement surely binds (not in a branch or a loop)."""
    if isinstance(stmt, ast.Assign):
        return set().union(*(_names(t) for t in stmt.targets))
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        return _names(stmt.target)
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    return set()


def _read(node: ast.AST) -> tuple[set[str], set[str]]:
    """Names an expression or a simple statement reads now, and those its functions read later."""
    mode = "eval" if isinstance(node, ast.expr) else "exec"
    table = symtable.symtable(ast.unparse(node), "<cell>", mode)
    now, later = _scope_reads(table)
    return {s.get_name() for s in table.get_symbols() if s.is_referenced()} | now, later


def _flow(stmts: list[ast.stmt], bound: set[str], reads: set[str], later: set[str]) -> set[str]:
    """Walk the statements in order: add to `reads` what they read before `bound` holds it, to `later`
    what their functions read; return the names bound after them. A loop's body counts as run (a
    notebook's loops run); a branch's bindings do not count after it."""
    for stmt in stmts:
        parts: list[ast.AST] = []
        if isinstance(stmt, ast.For | ast.AsyncFor):
            parts, targets = [stmt.iter], [stmt.target]
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            parts = [item.context_expr for item in stmt.items]
            targets = [item.optional_vars for item in stmt.items if item.optional_vars]
        elif isinstance(stmt, ast.If | ast.While):
            parts, targets = [stmt.test], []
        elif isinstance(stmt, ast.Try):
            parts, targets = [h.type for h in stmt.handlers if h.type], []
        else:
            now, deferred = _read(stmt)
            reads |= now - bound
            later |= deferred
            table = symtable.symtable(ast.unparse(stmt), "<cell>", "exec")
            bound = bound | {
                s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()
            }
            continue
        for part in parts:
            now, deferred = _read(part)
            reads |= now - bound
            later |= deferred
        inner = bound | set().union(*(_names(t) for t in targets))
        if isinstance(stmt, ast.For | ast.AsyncFor | ast.With | ast.AsyncWith):
            bound = _flow(stmt.body, inner, reads, later)
            _flow(
                stmt.orelse if isinstance(stmt, ast.For | ast.AsyncFor) else [], bound, reads, later
            )
        else:
            for block in (stmt.body, stmt.orelse, *(h.body for h in getattr(stmt, "handlers", []))):
                _flow(block, set(inner), reads, later)
            _flow(getattr(stmt, "finalbody", []), set(inner), reads, later)
    return bound


@functools.cache
def effects(source: str) -> Effects:
    tree = ast.parse(source)
    reads, later = set(), set()
    _flow(tree.body, set(), reads, later)
    binds, touches, calls_on, state = set(), set(), set(), False
    for stmt in tree.body:
        table = symtable.symtable(ast.unparse(stmt), "<cell>", "exec")
        touches |= {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
        changed, called, sets_state = _changes(stmt)
        touches |= changed
        calls_on |= called
        state |= sets_state
        binds |= _binds(stmt)
    return Effects(
        frozenset(reads | (later - binds)),
        frozenset(later),
        frozenset(binds),
        frozenset(touches),
        frozenset(calls_on),
        state,
    )


def _variables(cells) -> set[str]:
    """Names some cell assigns (not only defines or imports): those a method call may change."""
    names = set()
    for cell in cells:
        for node in ast.walk(ast.parse(cell)):
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.For):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= set().union(*(_names(t) for t in targets))
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                names |= _names(node.optional_vars)
    return names


def needed_by(*sources: str) -> set[str]:
    """The names the sources, run one after the other, read before binding them."""
    return set(effects("\n".join(sources)).reads)


def slice_cells(cells: list[str], needed: set[str]) -> list[int]:
    """Indices of the cells, in order, that make the `needed` names (see the module's docstring)."""
    variables = _variables(cells)
    changes = [effects(c).touches | (effects(c).calls_on & variables) for c in cells]
    seeds = set(needed)
    while True:
        kept, need = [], set(seeds)
        for i in reversed(range(len(cells))):
            e = effects(cells[i])
            if e.state or changes[i] & need:
                kept.append(i)
                need = (need - e.binds) | e.reads
        later = set().union(*(effects(cells[i]).later for i in kept)) - seeds
        if not later:
            return kept[::-1]
        seeds |= later  # read when called: bound by then, maybe by a later cell


def setup_cells(notebook: str, name: str, answers: tuple[str, ...] = ()) -> list[int]:
    """The cells before the exercise that its answers (the solution and `answers`) and check need."""
    ex = exercise(notebook, name)
    needed = set().union(*(needed_by(a, ex.check) for a in (ex.solution, *answers)))
    return slice_cells(list(code_cells(notebook)[: ex.index]), needed)


# --- running --------------------------------------------------------------------------------------


def _process_state() -> tuple:
    return torch.get_num_threads(), torch.backends.mha.get_fastpath_enabled()


def _set_process_state(state: tuple) -> None:
    threads, fast_path = state
    torch.set_num_threads(threads)
    torch.backends.mha.set_fastpath_enabled(fast_path)


@dataclass(frozen=True)
class Setup:
    namespace: dict
    state: tuple  # the process-wide state the cells left
    cells: tuple[int, ...]


def setup(notebook: str, name: str, answers: tuple[str, ...] = ()) -> Setup:
    """The exercise's setup, run once; exercises of a chapter whose slices are equal share it."""
    return _run_cells(notebook, tuple(setup_cells(notebook, name, answers)))


@functools.cache
def _run_cells(notebook: str, kept: tuple[int, ...]) -> Setup:
    """Run the cells in order in a fresh namespace, seeded as a fresh kernel."""
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = code_cells(notebook)
    namespace: dict = {"__name__": "__main__"}
    outside = _process_state()
    torch.manual_seed(0)
    try:
        for i in kept:
            EXECUTED["setup"] += 1
            exec(compile(cells[i], f"<{notebook} cell {i}>", "exec"), namespace)
        state = _process_state()
    finally:
        _set_process_state(outside)
        plt.close("all")
    return Setup(namespace, state, kept)


@dataclass(frozen=True)
class Failure:
    how: str  # "raised", "report" (a falsy Report) or "verdict" (FAILED_WHEN)
    why: str


def run(
    notebook: str, name: str, source: str, answers: tuple[str, ...] = (), failed_when: str = ""
) -> Failure | None:
    """Run `source` and the check cell after the exercise's setup: how the check failed, or None.

    A check fails when it raises, or when a `Report` it makes is falsy (a grader after the asserts);
    `failed_when`, for a check that prints its verdict, is an expression read after it. A NameError is
    never a failure of the answer: the setup missed a name, and it propagates."""
    import matplotlib.pyplot as plt

    ex, ready = exercise(notebook, name), setup(notebook, name, answers)
    namespace = dict(ready.namespace)
    outside = _process_state()
    _set_process_state(ready.state)
    try:
        EXECUTED["answer"] += 1
        exec(compile(source, "<answer>", "exec"), namespace)
        torch.manual_seed(0)
        tree = ast.parse(ex.check)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        EXECUTED["check"] += 1
        try:
            exec(compile(tree, "<check>", "exec"), namespace)
            value = (
                eval(compile(ast.Expression(last.value), "<check>", "eval"), namespace)
                if last
                else None
            )
        except NameError:
            raise
        except Exception as err:  # an assert, or the answer breaking the check's computation
            return Failure("raised", f"{type(err).__name__}: {err}")
    finally:
        _set_process_state(outside)
        plt.close("all")
    if failed_when:  # its report fails a property by design; the verdict is the check
        return Failure("verdict", failed_when) if eval(failed_when, namespace) else None
    before = ready.namespace
    made = [v for k, v in namespace.items() if isinstance(v, Report) and before.get(k) is not v]
    falsy = [r for r in [*made, value] if isinstance(r, Report) and not r]
    return Failure("report", f"the report fails {falsy[0].failed}") if falsy else None


def every_exercise() -> set[tuple[str, str]]:
    """(notebook, name) of every exercise in the book."""
    return {(p.stem, name) for p in sorted(NOTEBOOKS.glob("*.ipynb")) for name in exercises(p.stem)}
