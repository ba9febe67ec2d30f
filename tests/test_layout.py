"""The package's shape: folders by role, imports only downward, no cycle, small documented modules."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "annotated"

# Lower first: a module may import from its own layer or a lower one, never a higher one.
LAYERS = {
    "annotated.validation": 0,
    "annotated.files": 0,
    "annotated.book_files": 0,
    "annotated.viz": 0,
    "annotated.model": 1,
    "annotated.data": 2,
    "annotated.training": 3,  # the paper's training (§5): it never imports the run machinery above it
    "annotated.runs": 4,  # processes, signals, run folders, their snapshots and locks
    "annotated.decoding": 5,
    "annotated.check": 6,
    "annotated.app": 7,
    "annotated": 8,  # the public API (annotated/__init__.py) and `python -m annotated`
}
ROLES = ("model", "data", "training", "runs", "decoding", "check", "app")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {
        module_name(p): p
        for p in sorted(PACKAGE.rglob("*.py"))
        if p.name != "_modidx.py" and "__pycache__" not in p.parts
    }


def imported(name: str, path: Path) -> set[str]:
    """Every module of the package that `path` imports, at any depth (function-level included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}  # `from annotated.model import masks`
    known = modules()
    return {m for m in found if m in known and m != name}


def layer_of(name: str) -> int:
    while name not in LAYERS:
        name = name.rpartition(".")[0]
    return LAYERS[name]


def graph() -> dict[str, set[str]]:
    return {name: imported(name, path) for name, path in modules().items()}


def test_every_role_is_a_folder_and_nothing_else_is_loose():
    loose = {p.name for p in PACKAGE.glob("*.py")}
    assert loose == {
        "__init__.py",
        "__main__.py",
        "_modidx.py",
        "validation.py",
        "files.py",
        "book_files.py",
        "viz.py",
    }
    for role in ROLES:
        assert (PACKAGE / role / "__init__.py").is_file(), f"{role}/ needs an __init__.py"


def test_no_module_imports_from_a_higher_role():
    upward = [
        f"{name} (layer {layer_of(name)}) imports {dep} (layer {layer_of(dep)})"
        for name, deps in graph().items()
        for dep in sorted(deps)
        if layer_of(dep) > layer_of(name)
    ]
    assert not upward, "\n".join(upward)


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle_and_the_layer_rule_an_upward_import():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert layer_of("annotated.model.masks") < layer_of("annotated.training.batch")
    assert (
        layer_of("annotated.training.loop")
        < layer_of("annotated.runs.folder")
        < layer_of("annotated.app.cli")
    )


def test_a_module_inside_the_package_imports_modules_not_role_packages():
    """`from annotated.model import X` inside the package would run the whole role's __init__."""
    inits = {name for name, path in modules().items() if path.name == "__init__.py"}
    offenders = [
        f"{name} imports {dep}"
        for name, deps in graph().items()
        if modules()[name].name != "__init__.py"
        for dep in deps & inits
    ]
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("name", sorted(modules()))
def test_every_module_is_short_and_opens_with_a_docstring(name):
    path = modules()[name]
    n_lines = len(path.read_text(encoding="utf-8").splitlines())
    assert n_lines <= 300, f"{name} has {n_lines} lines: split it by job"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc, f"{name} has no docstring"
    # it says what the module holds, not what one of its functions does
    borrowed = [
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and (ast.get_docstring(node) or "\n").splitlines()[0] == doc.splitlines()[0]
    ]
    assert not borrowed, (
        f"{name}'s docstring is the first line of {borrowed[0]}'s: say what it holds"
    )


def test_no_module_is_hidden_by_a_name_of_its_package():
    """`import annotated.model.masks as m` gives the module, never a function the package exports."""
    import importlib
    import types

    hidden = [
        name
        for name in modules()
        if modules()[name].name not in ("__init__.py", "__main__.py")
        for package, _, leaf in [name.rpartition(".")]
        if not isinstance(
            getattr(importlib.import_module(package), leaf, importlib.import_module(name)),
            types.ModuleType,
        )
    ]
    assert not hidden, f"hidden by a name of their package: {hidden}"
