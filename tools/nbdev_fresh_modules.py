"""nbdev export processor: a module a notebook fills with `#| export NAME` cells starts afresh each run.

nbdev writes the module of a notebook's `#| default_exp` afresh, but *appends* a cell exported to another
module (`#| export model.cache`) to that module's file as it stands, so a module filled only by such cells
would grow with every export. `pyproject.toml` names this processor in `[tool.nbdev] export_procs`, so
`make export` (nbdev-export with the repository on PYTHONPATH) runs it: before nbdev appends the first such cells of an export run, it writes the
module's file anew, as nbdev writes a new module, opened by the docstring that a `#| module_doc TEXT`
directive in one of its cells gives (what the module holds), else by the first line of the docstring of
the first class or function exported to it. The notebook's later cells for that module are appended.
Each module comes from one notebook (tests/test_one_definition.py); this processor only keeps a
notebook's second and later modules from growing. It is build machinery, so it lives here and not in
the package: the wheel does not depend on nbdev.
"""

import ast
from pathlib import Path

from nbdev.config import get_config
from nbdev.maker import ModuleMaker
from nbdev.process import Processor

_started: set[str] = set()  # modules this export run has started
_seen: set[str] = set()  # notebooks this export run has read: one read twice means a new run


def _docstring(cells: list) -> str:
    said = [c.directives_["module_doc"] for c in cells if c.directives_.get("module_doc")]
    if said:
        return said[0]
    for source in (c.source for c in cells):
        for node in ast.parse(source).body:
            if isinstance(node, ast.ClassDef | ast.FunctionDef) and ast.get_docstring(node):
                return ast.get_docstring(node).splitlines()[0]
    raise ValueError("a module needs a documented class or function to take its docstring from")


class FreshModules(Processor):
    """Start each module that `#| export NAME` (or `exporti NAME`) cells fill, the first time an export run reaches it."""

    def begin(self) -> None:
        path = str(Path(self.nb.path_).resolve())
        if path in _seen:
            _started.clear(), _seen.clear()
        _seen.add(path)
        default = next((c.directives_["default_exp"] for c in self.nb.cells
                        if "default_exp" in c.directives_), None)  # fmt: skip
        if (
            default is not None
        ):  # nbdev writes it afresh itself; a later notebook's cells append to it
            _started.add(default)
        targets: dict[str, list] = {}
        for cell in self.nb.cells:
            found = cell.directives_ if cell.cell_type == "code" else {}
            target = (found.get("export") or found.get("exporti") or "").strip()
            if target and target != default:
                targets.setdefault(target, []).append(cell)
        lib = get_config().lib_path
        for target, cells in targets.items():
            if target in _started:
                continue
            _started.add(target)
            ModuleMaker(dest=lib, name=target, nb_path=self.nb.path_, is_new=True).make([], [])
            module = lib / (target.replace(".", "/") + ".py")
            module.write_text(f'"""{_docstring(cells)}"""\n\n{module.read_text()}')
