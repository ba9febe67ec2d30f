"""Open every page of the built book in a real Chromium and check that it renders offline.

Every page listed in book/_toc.yml is loaded from a local server on 127.0.0.1. A page fails when it
requests anything from another host (a CDN, a font service, a badge), logs a console error, has a
local request that fails, or when its equations (MathJax) or altair charts (vega-embed) do not
render. The book must be built first (`jupyter-book build book`); the Makefile does that.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
HTML = BOOK / "_build" / "html"
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOT = ROOT / "artifacts" / "book-screenshot.png"
# sphinx-thebe's script is included twice on every page; harmless, and not ours to fix.
KNOWN_ERRORS = ("'THEBE_JS_URL' has already been declared",)
LOCAL_HOST = "127.0.0.1"
RENDER_TIMEOUT_MS = 10_000

pytestmark = pytest.mark.browser


def toc_pages(toc: Path = BOOK / "_toc.yml") -> list[str]:
    """Return the docnames of _toc.yml in reading order (root first)."""
    data = yaml.safe_load(toc.read_text())
    pages = [data["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                pages.append(entry["file"])
            for key in ("parts", "chapters", "sections"):
                walk(entry.get(key, []))

    walk(data.get("parts", []) + data.get("chapters", []) + data.get("sections", []))
    return [re.sub(r"\.(md|ipynb)$", "", page) for page in pages]


PAGES = toc_pages()


@functools.cache
def source_features(docname: str) -> tuple[bool, int]:
    """Return (has math, number of altair charts) for a page, read from its source file."""
    for suffix in (".md", ".ipynb"):
        path = BOOK / f"{docname}{suffix}"
        if path.exists():
            break
    else:
        raise FileNotFoundError(
            f"_toc.yml lists {docname!r} but book/{docname}.md/.ipynb is missing"
        )
    if path.suffix == ".md":
        prose, outputs = [path.read_text()], []
    else:
        cells = json.loads(path.read_text())["cells"]
        prose = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
        outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]
    # Math in prose: $...$, $$...$$, {math}, \begin{...}; code blocks and code spans do not count.
    text = "\n".join(prose)
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    has_math = bool(re.search(r"\$[^$\n]+\$|\$\$|\{math\}|\\begin\{", text))
    has_math |= any("text/latex" in o.get("data", {}) for o in outputs)
    charts = sum(
        "vegaEmbed(" in "".join(o.get("data", {}).get("text/html", ""))
        or any(k.startswith("application/vnd.vegalite") for k in o.get("data", {}))
        for o in outputs
    )
    return has_math, charts


def screenshot_page() -> str | None:
    """Pick the page to photograph: a notebook with equations, preferably one with a chart too."""
    notebooks = [p for p in PAGES if (BOOK / f"{p}.ipynb").exists() and source_features(p)[0]]
    with_chart = [p for p in notebooks if source_features(p)[1]]
    return (with_chart or notebooks or [None])[0]


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self) -> None:
        # The book declares no favicon, so Chromium asks the server root for one; not a book file.
        if self.path == "/favicon.ico":
            self.send_response(204)
            self.end_headers()
            return
        super().do_GET()

    def end_headers(self) -> None:
        # Let Chromium reuse the theme's, MathJax's and vega's files (and their compiled code)
        # from one page to the next instead of revalidating them: much faster on two cores.
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="session")
def book_url() -> Iterator[str]:
    """Serve book/_build/html on 127.0.0.1 (a free port) for the whole session."""
    if not (HTML / "index.html").exists():
        pytest.fail(
            f"the book is not built: {HTML.relative_to(ROOT)}/index.html is missing. Build it first "
            "(python book/build_assets.py && jupyter-book build book -W --keep-going)"
        )
    handler = functools.partial(_QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer((LOCAL_HOST, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{LOCAL_HOST}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    """Launch Debian's Chromium (Playwright cannot download its own browser here), offline-minded."""
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so the browser test may not be skipped")
        pytest.skip(reason)
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        # Nothing may leave the machine: every other host fails to resolve at once. The tests
        # still see (and fail on) the attempt. Blocking with page.route instead would disable
        # the HTTP cache and make every page several times slower.
        f"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE {LOCAL_HOST}",
    ]
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "args": args}


@pytest.fixture(scope="session")
def book_context(browser, book_url: str):
    """One browser context for every page, so the shared theme and MathJax files come from cache."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    yield context
    context.close()


@pytest.fixture(scope="session")
def book_tab(book_context):
    """One tab that visits every page in turn (a new tab per page costs more than the page)."""
    page = book_context.new_page()
    yield page
    page.close()


class PageLog:
    """What a tab does while a page loads: its requests, failures and console errors."""

    def __init__(self, page) -> None:
        self.page = page
        self.outside: list[str] = []  # requests to any host but 127.0.0.1
        self.failed: list[str] = []  # local requests that failed or returned >= 400
        self.errors: list[str] = []  # console errors and uncaught exceptions
        self.pending: set = set()  # requests in flight
        self._handlers = {
            "request": self._on_request,
            "requestfinished": self._on_done,
            "requestfailed": self._on_failed,
            "response": self._on_response,
            "console": self._on_console,
            "pageerror": self._on_pageerror,
        }
        for event, handler in self._handlers.items():
            page.on(event, handler)

    def detach(self) -> None:
        for event, handler in self._handlers.items():
            self.page.remove_listener(event, handler)

    @staticmethod
    def is_local(url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme in ("data", "blob", "about") or parts.hostname == LOCAL_HOST

    def _on_request(self, request) -> None:
        self.pending.add(request)
        if not self.is_local(request.url):
            self.outside.append(request.url)

    def _on_done(self, request) -> None:
        self.pending.discard(request)

    def _on_failed(self, request) -> None:
        self.pending.discard(request)
        if self.is_local(request.url):
            self.failed.append(f"{request.failure}: {request.url}")

    def _on_response(self, response) -> None:
        if response.status >= 400:
            self.failed.append(f"HTTP {response.status}: {response.url}")

    def _on_console(self, message) -> None:
        if message.type == "error":
            self._on_error(message.text)

    def _on_pageerror(self, error) -> None:
        self._on_error(str(error))

    def _on_error(self, text: str) -> None:
        if not any(known in text for known in KNOWN_ERRORS):
            self.errors.append(text)

    def report(self) -> str:
        return (
            f"requests outside {LOCAL_HOST}: {list(dict.fromkeys(self.outside))}; "
            f"failed local requests: {self.failed}; console errors: {self.errors}"
        )

    def wait_until_quiet(self, quiet_s: float = 0.1, timeout_s: float = 10) -> None:
        """Wait until no request has been in flight for quiet_s (late fonts, lazy MathJax parts)."""
        deadline = time.monotonic() + timeout_s
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            self.page.wait_for_timeout(25)  # lets Playwright deliver the request events
            if self.pending:
                quiet_since = time.monotonic()
            if time.monotonic() > deadline:
                in_flight = [r.url for r in self.pending]
                pytest.fail(f"requests still in flight after {timeout_s} s: {in_flight}")


@pytest.fixture
def page_log(book_tab) -> Iterator[PageLog]:
    log = PageLog(book_tab)
    yield log
    log.detach()
    book_tab.goto("about:blank")


@pytest.mark.parametrize("docname", PAGES)
def test_page_renders_offline(page_log: PageLog, book_url: str, docname: str) -> None:
    page, log = page_log.page, page_log
    has_math, charts = source_features(docname)
    path = HTML / f"{docname}.html"
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: rebuild the book"

    def wait_for(what: str, expression: str, arg: object = None) -> None:
        try:
            page.wait_for_function(expression, arg=arg, timeout=RENDER_TIMEOUT_MS)
        except PlaywrightTimeoutError:
            pytest.fail(
                f"{docname}: {what} did not render within {RENDER_TIMEOUT_MS} ms; {log.report()}"
            )

    page.goto(f"{book_url}/{docname}.html", wait_until="load")

    if has_math:
        # MathJax typesets every .math element (and TeX in outputs) into an mjx-container.
        wait_for(
            "the equations (mjx-container)",
            "() => { const n = document.querySelectorAll('mjx-container').length;"
            " return n > 0 && n >= document.querySelectorAll('.math').length; }",
        )
        # A TeX error renders as mjx-merror, an unknown macro as red text: name the formula.
        tex_errors = page.evaluate(
            "() => [...document.querySelectorAll('mjx-container')]"
            ".filter(c => c.querySelector('mjx-merror, mjx-mtext[style*=\"color: red\"]'))"
            ".map(c => (c.querySelector('mjx-assistive-mml') || c).textContent.slice(0, 80))"
        )
        assert not tex_errors, f"{docname}: MathJax could not typeset: {tex_errors}"
    if charts:
        wait_for(
            f"{charts} altair chart(s) (.vega-embed svg/canvas)",
            "n => document.querySelectorAll("
            "'.vega-embed svg.marks, .vega-embed canvas.marks').length >= n",
            charts,
        )
        # altair's template takes its requirejs branch (loading from a CDN) when an AMD loader
        # is on the page; the preloaded vegaEmbed is only used when there is none.
        assert not page.evaluate("typeof define === 'function' && !!define.amd"), (
            f"{docname}: an AMD loader (requirejs) is on the page; altair would load from a CDN"
        )
    log.wait_until_quiet()

    if docname == screenshot_page():
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=SCREENSHOT, full_page=True)

    outside = list(dict.fromkeys(log.outside))
    assert not outside, f"{docname}: requests left {LOCAL_HOST}: {outside}"
    assert not log.failed, f"{docname}: local requests failed: {log.failed}"
    assert not log.errors, f"{docname}: console errors: {log.errors}"
