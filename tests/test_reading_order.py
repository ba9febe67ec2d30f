"""Import order is reading order: a chapter's exported code imports only what earlier notebooks export.

Every generated module marks each of its cells with the notebook it came from (`# %% ../notebooks/NN_...`).
An import in a cell of a chapter (00-20, 17b among them) may name only a module, or a name of a module,
that a notebook read before it exports; an appendix (21 on) may import anything from a chapter or an
earlier appendix. The whole package is scanned, function-local imports included.
"""

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "annotated"
MARKER = re.compile(r"^# %% (?:\.\./)+notebooks/(\d+b?)_", re.M)
LAST_CHAPTER = 20.5  # 20, and 17b before it


def order(notebook: str) -> float:
    """'17b' -> 17.5: the reading order of a notebook number."""
    return float(notebook[:-1]) + 0.5 if notebook.endswith("b") else float(notebook)


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def cells(text: str) -> list[tuple[int, str]]:
    """(first line, notebook) of every exported cell, in order; [] for a hand-written module."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in MARKER.finditer(text)]


def notebook_at(spans: list[tuple[int, str]], line: int) -> str | None:
    found = None
    for start, notebook in spans:
        if start <= line:
            found = notebook
    return found


def homes(sources: dict[str, str]) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """The first notebook of each generated module, and the notebook of each top-level name in it."""
    first, names = {}, {}
    for module, text in sources.items():
        spans = cells(text)
        if not spans:
            continue
        first[module] = min((nb for _, nb in spans), key=order)
        for node in ast.parse(text).body:
            bound = []
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                bound = [node.name]
            elif isinstance(node, ast.Assign):
                bound = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                bound = [node.target.id]
            for name in bound:
                names.setdefault((module, name), notebook_at(spans, node.lineno))
    return first, names


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def forward_imports(sources: dict[str, str], packages: frozenset[str] = frozenset()) -> set[tuple]:
    """(importing module, its notebook, imported module, name) for each import of a chapter's code
    that reaches something a later notebook exports."""
    first, names = homes(sources)
    found = set()
    for module, text in sources.items():
        spans = cells(text)
        for node in ast.walk(ast.parse(text)):
            importer = notebook_at(spans, getattr(node, "lineno", 0))
            if importer is None or order(importer) > LAST_CHAPTER:
                continue
            if isinstance(node, ast.ImportFrom):
                target = resolve(module, module in packages, node)
                pairs = [
                    (f"{target}.{a.name}", "")
                    if f"{target}.{a.name}" in first
                    else (target, a.name)
                    for a in node.names
                ]
            elif isinstance(node, ast.Import):
                pairs = [(a.name, "") for a in node.names]
            else:
                continue
            for target, name in pairs:
                home = names.get((target, name)) or first.get(target)
                if home is not None and order(home) > order(importer):
                    found.add((module, importer, target, name))
    return found


def package_sources() -> tuple[dict[str, str], frozenset[str]]:
    paths = [p for p in sorted(PACKAGE.rglob("*.py")) if p.name != "_modidx.py"]
    sources = {module_name(p, PACKAGE): p.read_text(encoding="utf-8") for p in paths}
    packages = frozenset(module_name(p, PACKAGE) for p in paths if p.name == "__init__.py")
    return sources, packages


def test_a_chapter_imports_only_what_earlier_notebooks_export():
    found = forward_imports(*package_sources())
    assert found == set(), f"chapter code importing from a later notebook: {sorted(found)}"


def test_the_scan_sees_a_forward_import_and_allows_an_appendix_one():
    early = "# %% ../../notebooks/03_masks.ipynb #a\nfrom .late import helper\nfrom . import late\n"
    late = "# %% ../../notebooks/28_input_checks.ipynb #b\nfrom .early import x\n\ndef helper():\n    pass\n"
    appendix = "# %% ../../notebooks/30_runs.ipynb #c\nfrom annotated.model.late import helper\n"
    sources = {
        "annotated.model.early": early,
        "annotated.model.late": late,
        "annotated.runs.x": appendix,
    }
    found = forward_imports(sources, frozenset({"annotated.model"}))
    assert found == {
        ("annotated.model.early", "03", "annotated.model.late", "helper"),
        ("annotated.model.early", "03", "annotated.model.late", ""),
    }
