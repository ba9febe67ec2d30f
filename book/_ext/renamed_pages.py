"""Old addresses of renamed chapters: a page at each that opens the new one (registered in _config.yml).

The chapters were renumbered once, to follow the reading order; book/renamed.yml lists each old
file name with its new one. A bookmark or a link from elsewhere to an old address lands on a small
page that replaces itself with the chapter's new address, keeping the `#section` part.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import yaml

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Moved: {title}</title>
<link rel="canonical" href="{href}">
<meta http-equiv="refresh" content="0; url={href}">
<script>location.replace({href_js} + location.hash);</script>
</head>
<body>
<p>This chapter has moved: <a href="{href}">{title}</a>.</p>
</body>
</html>
"""


def renamed(book: Path) -> dict[str, str]:
    """{old notebook name: new notebook name}, both without the folder and suffix."""
    return yaml.safe_load((book / "renamed.yml").read_text(encoding="utf-8"))


def redirect_page(new: str, title: str) -> str:
    """The page left at an old address, for a chapter now at notebooks/{new}.html."""
    href = f"{new}.html"
    return PAGE.format(title=html.escape(title), href=html.escape(href), href_js=json.dumps(href))


def write_redirects(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    folder = Path(app.outdir) / "notebooks"
    for old, new in renamed(Path(app.srcdir)).items():
        title = app.env.titles[f"notebooks/{new}"].astext()
        (folder / f"{old}.html").write_text(redirect_page(new, title), encoding="utf-8")


def setup(app):
    app.connect("build-finished", write_redirects)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
