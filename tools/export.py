"""Export the notebooks into annotated/: nbdev's own export, with one change for cell targets.

nbdev writes the module of a notebook's `#| default_exp` afresh and *appends* a cell exported to another
module (`#| export model.cache`) to that module's file as it stands, so a module filled only by such cells
would grow with every export. Here the first cells one export run sends to a module start its file afresh,
and later ones (from the same or a later notebook, in reading order) are appended, as nbdev does. Such a
module's docstring is the first line of its first class's or function's docstring, so every module opens
with one. Run from the repository root: `python tools/export.py` (what `make export` does).
"""

from __future__ import annotations

import ast
from pathlib import Path

from nbdev.config import get_config
from nbdev.doclinks import _build_modidx, nbglob
from nbdev.export import nb_export
from nbdev.maker import ModuleMaker

_started: set[str] = set()


class _RunModuleMaker(ModuleMaker):
    """A ModuleMaker that starts a module's file afresh the first time an export run writes it."""

    def __init__(self, dest, name, nb_path, is_new=True, **kwargs):
        first = name not in _started
        _started.add(name)
        super().__init__(dest, name, nb_path, is_new=is_new or first, **kwargs)


def _finish(path: Path) -> None:
    """End the file with a newline (nbdev's append leaves none) and open it with a docstring."""
    source = path.read_text(encoding="utf-8").rstrip("\n") + "\n"
    tree = ast.parse(source)
    if ast.get_docstring(tree) is not None:
        path.write_text(source, encoding="utf-8")
        return
    first = next(
        (
            n
            for n in tree.body
            if isinstance(n, ast.ClassDef | ast.FunctionDef) and ast.get_docstring(n)
        ),
        None,
    )
    if first is None:
        raise SystemExit(
            f"{path}: a module needs a docstring (a '> summary' line or a documented def)"
        )
    line = ast.get_docstring(first).splitlines()[0]
    path.write_text(f'"""{line}"""\n\n{source}', encoding="utf-8")


def main() -> None:
    cfg = get_config()
    for notebook in nbglob(path=cfg.nbs_path, as_path=True).sorted("name"):
        nb_export(notebook, mod_maker=_RunModuleMaker)
    for name in sorted(_started):
        _finish(cfg.lib_path / (name.replace(".", "/") + ".py"))
    _build_modidx()


if __name__ == "__main__":
    main()
