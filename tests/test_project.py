"""Project wiring: the public API, Binder's environment, the repository setting, CI."""

import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONDA_TO_PIP = {"pytorch-cpu": "torch"}  # conda-forge's CPU-only build of PyTorch


def name_of(requirement: str) -> str:
    return re.split(r"[<>=!~ \[;]", requirement.strip(), maxsplit=1)[0].lower()


def test_public_api_imports():
    import annotated

    for name in annotated.__all__:
        assert getattr(annotated, name) is not None, name
    from annotated import MultiHeadAttention, attention, causal_mask, padding_mask  # noqa: F401


def test_environment_yml_matches_pyproject():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "python=3.11" in conda
    listed = {
        CONDA_TO_PIP.get(name_of(d), name_of(d))
        for d in conda
        if name_of(d) not in ("python", "pip")
    }
    listed |= {name_of(d) for d in pip if not d.startswith("-")}
    required = {name_of(d) for d in PYPROJECT["project"]["dependencies"]}
    assert listed == required
    assert "-e ." in pip, "Binder must install the package itself from the repository"


def test_constraints_pin_every_dependency_and_the_cpu_torch():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line:
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    assert pins["torch"] == "2.13.0"  # the CPU wheel; an unpinned torch would pull a CUDA build
    wanted = (
        PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["dev"]
    )
    for requirement in wanted:
        assert name_of(requirement).replace("_", "-") in pins, requirement


def test_repository_links_agree_with_the_setting():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "repo_url.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_repo_url_check_notices_a_stray_link():
    sys.path.insert(0, str(ROOT / "tools"))
    import repo_url

    text = "see https://colab.research.google.com/github/someone/else/blob/main/x.ipynb"
    assert re.findall(repo_url.SLUG, text) == ["someone/else"]


def test_notebooks_link_to_colab_and_binder_and_install_the_release_when_missing():
    sys.path.insert(0, str(ROOT / "tools"))
    import pin_release

    version, repository = pin_release.project()
    setup = pin_release.setup_cell(version, repository)
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        first_md = "".join(cells[0]["source"])
        assert f"blob/v{version}/notebooks/{path.name}" in first_md, path
        assert f"/v{version}?labpath=notebooks%2F{path.name}" in first_md, path
        first_code = "".join(next(c for c in cells if c["cell_type"] == "code")["source"])
        assert setup in first_code, f"{path.name}: its setup cell is not the one spec"
    done = subprocess.run([sys.executable, str(ROOT / "tools/pin_release.py"), "--check"])
    assert done.returncode == 0, "run tools/pin_release.py"


def test_pin_release_check_notices_a_notebook_of_another_release(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import pin_release

    text = (ROOT / "notebooks/03_masks.ipynb").read_text(encoding="utf-8")
    version, repository = pin_release.project()
    stale = text.replace(f'installed != \\"{version}\\"', 'installed != \\"0.0.9\\"')
    assert stale != text
    assert pin_release.pinned_notebook(stale, version, repository) == text


def test_browser_tests_live_where_make_collects_them():
    """make test-browser and test-sweep collect tests/test_*browser.py alone."""
    browser = re.compile(r"^(pytestmark = |@)pytest\.mark\.browser", re.MULTILINE)
    marked = {p.name for p in (ROOT / "tests").glob("test_*.py") if browser.search(p.read_text())}
    assert marked and all(name.endswith("browser.py") for name in marked), marked


def test_no_code_comment_speaks_of_the_prose_or_the_tests():
    """A comment in a code cell speaks to the reader, not of "the prose", the tests or nbval."""
    maintainers = re.compile(  # "the test BLEU" and "the test set" are the reader's words
        r"#.*\b(the prose|prose's|the tests|the test(?! (BLEU|set|split|sentences))|nbval)\b",
        re.IGNORECASE,
    )
    found = [
        f"{path.name} cell {cell['id']}: {hit.group(0)}"
        for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
        for cell in json.loads(path.read_text())["cells"]
        if cell["cell_type"] == "code"
        for line in cell["source"]
        if (hit := maintainers.search(line)) and not line.lstrip().startswith("#|")
    ]
    assert not found, found


def test_no_notebook_names_a_path_outside_its_folder():
    """A notebook runs alone (Colab, a pip install): the book's files come through book_path."""
    outside = re.compile(r"""["'](\.\./|/work/)|shared/data""")
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and outside.search(source):
                pytest.fail(f"{path.name} cell {cell['id']}: {outside.search(source).group(0)!r}")


def test_ci_runs_the_readme_test_command_the_distribution_and_the_portable_check():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test\n" in ci and "make test-slow" in ci and "make test-portable" in ci
    assert "make test-dist" in ci
    # the README's own commands: tests/test_readme.py


def test_readme_links_to_the_site_derived_from_the_setting():
    sys.path.insert(0, str(ROOT / "tools"))
    import repo_url

    site = repo_url.pages_url(repo_url.slug_of(repo_url.configured_url()))
    assert site in (ROOT / "README.md").read_text()


def main_chapters() -> list[Path]:
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    return [
        ROOT / f"{chapter['file']}.ipynb"
        for part in toc["parts"]
        if part["caption"] != "Appendices"
        for chapter in part["chapters"]
        if chapter["file"].startswith("notebooks/")
    ]


def test_main_chapters_are_short_and_end_with_a_summary():
    import json

    chapters = main_chapters()
    assert len(chapters) > 20
    for path in chapters:
        cells = json.loads(path.read_text())["cells"]
        # the teaching part is capped; the exercises after it are counted apart (at most five of four
        # cells: statement, starter, solution, check), so that an exercise never displaces the text
        starts = [
            i
            for i, cell in enumerate(cells)
            if cell["cell_type"] == "markdown"
            and "## Exercises" in "".join(cell["source"]).split("\n")
        ]
        teaching, exercises = (
            cells[: starts[0]] if starts else cells,
            cells[starts[0] :] if starts else [],
        )
        assert len(teaching) <= 35, (
            f"{path.name}: {len(teaching)} cells before its exercises; move engineering to an appendix"
        )
        assert len(exercises) <= 21, f"{path.name}: {len(exercises)} cells of exercises and summary"
        headings = [
            line
            for cell in cells
            if cell["cell_type"] == "markdown"
            for line in "".join(cell["source"]).splitlines()
            if line.startswith("## ")
        ]
        assert headings[-1] == "## Summary", f"{path.name} ends with {headings[-1]!r}"


STRETCH = (
    60  # lines of code an appendix shows in a row, with no prose between (STYLE.md rule 4: 40)
)


def appendices() -> list[Path]:
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    return [
        ROOT / f"{chapter['file']}.ipynb"
        for part in toc["parts"]
        if part["caption"] == "Appendices"
        for chapter in part["chapters"]
        if chapter["file"].startswith("notebooks/")
    ]


def code_stretches(cells: list[dict]) -> list[tuple[int, str]]:
    """(lines, id of the first cell) of each run of code cells with no prose between: the lines a
    reader sees (not blank, not an nbdev directive; cells the book removes count nothing)."""
    stretches, lines, first = [], 0, None
    for cell in [*cells, {"cell_type": "markdown"}]:
        if cell["cell_type"] == "markdown":
            if lines:
                stretches.append((lines, first))
            lines, first = 0, None
        elif "remove-cell" not in cell.get("metadata", {}).get("tags", []):
            source = "".join(cell["source"]).splitlines()
            lines += sum(
                1 for line in source if line.strip() and not line.lstrip().startswith("#|")
            )
            first = first or cell.get("id")
    return stretches


def test_the_stretch_counter_counts_code_between_prose():
    code = lambda n, i, tags=(): {  # noqa: E731
        "cell_type": "code", "id": i, "metadata": {"tags": list(tags)},
        "source": ["#| export\n", *["x = 1\n", "\n"] * n],
    }  # fmt: skip
    prose = {"cell_type": "markdown", "source": ["Words."]}
    cells = [code(30, "a"), code(31, "b"), prose, code(5, "c"), code(99, "d", ["remove-cell"])]
    assert code_stretches(cells) == [(61, "a"), (5, "c")]


def test_appendix_code_comes_in_short_stretches_with_prose_between():
    assert len(appendices()) > 10
    for path in appendices():
        long = [s for s in code_stretches(json.loads(path.read_text())["cells"]) if s[0] > STRETCH]
        assert not long, (
            f"{path.name}: {STRETCH}+ lines of code without prose between, from cell "
            + ", ".join(f"{i} ({n} lines)" for n, i in long)
        )


def test_table3_rows_replace_the_budget_options_they_change():
    sys.path.insert(0, str(ROOT / "tools"))
    import table3

    budget = table3.BUDGET.split()
    for name, (flags, _) in table3.ROWS.items():
        train, evaluate, train_file, val_file = table3.commands(name, 2, "DATA")
        options = [a for a in train if a.startswith("--")]
        assert len(options) == len(set(options)), (name, train)  # each option once
        parts = flags.split()
        for flag, value in zip(parts, [*parts[1:], ""][: len(parts)], strict=True):
            if flag.startswith("--") and not value.startswith("--") and value:
                assert train[train.index(flag) + 1] == value, (name, flag)
        assert train[train.index("--seed") + 1] == "2" and "--no-test" in train  # val only
        assert evaluate[evaluate.index("--split") + 1] == "val"
        assert (train_file.name, val_file.name) == ("seed2.json", "seed2.val.json")
    assert table3.with_flags(budget, ["--n-heads", "1"]).count("--n-heads") == 1
    assert table3.with_flags(budget, ["--norm-first"])[-1] == "--norm-first"


def test_no_notebook_stores_a_progress_bar():
    """A progress bar is useful while a cell runs and noise once stored (the book renders it line by line)."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            for out in cell.get("outputs", []):
                text = "".join(out.get("text", ""))
                assert "\r" not in text, f"{path.name} {cell.get('id')}: a stored progress bar"


def test_results_readme_says_what_reads_every_file():
    """Every file in results/ is in the README's table of what reads it; a model file by its own path."""
    readme = (ROOT / "results" / "README.md").read_text(encoding="utf-8")
    cells = [line.split(" | ")[0] for line in readme.splitlines() if line.startswith("| `")]
    listed = [name for cell in cells for name in re.findall(r"`([^`]+)`", cell)]

    def covered(path: str) -> bool:
        if path.endswith(".safetensors"):  # weights are big: each one is named
            return path in listed
        return any(
            fnmatch.fnmatch(path, n) or (n.endswith("/") and path.startswith(n)) for n in listed
        )

    files = [
        p.relative_to(ROOT / "results").as_posix()
        for p in (ROOT / "results").rglob("*")
        if p.is_file()
    ]
    missing = sorted(f for f in files if f != "README.md" and not covered(f))
    assert listed and not missing, f"results/README.md does not say what reads {missing}"


def test_chapters_are_numbered_in_reading_order():
    """The sidebar's order is the numbers' order, and each title starts with its file's number."""
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    numbered = [
        (chapter["file"], chapter["title"])
        for part in toc["parts"]
        for chapter in part["chapters"]
        if chapter["file"].startswith("notebooks/")
    ]
    numbers = [re.match(r"notebooks/(\d\d[a-z]?)_", file)[1] for file, _ in numbered]
    whole = [n for n in numbers if n.isdigit()]
    assert whole == [f"{n:02d}" for n in range(len(whole))], numbers
    for before, number in zip(numbers, numbers[1:], strict=False):  # 17b follows 17 directly
        assert number.isdigit() or (number[:2] == before[:2] and number > before), numbers
    for (file, title), number in zip(numbered, numbers, strict=True):
        assert title.startswith(f"{number} · "), f"{file}: title {title!r}"
        first = json.loads((ROOT / f"{file}.ipynb").read_text())["cells"][0]
        assert "".join(first["source"]).startswith(f"# {number} · "), f"{file}: first heading"


def test_few_main_chapter_cells_ignore_their_output():
    """A cell whose output nbval ignores tests nothing it prints: the main chapters (00-20) keep at most
    25 such cells in all (48 before issue 41), each printing what varies between machines."""
    import json

    ignoring = {}
    for path in main_chapters():
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        tagged = [
            i for i, c in enumerate(cells) if "nbval-ignore-output" in c["metadata"].get("tags", [])
        ]
        if tagged:
            ignoring[path.name] = tagged
    assert sum(map(len, ignoring.values())) <= 25, ignoring


def test_no_notebook_shows_an_nbval_comment():
    """nbval's markers are cell tags, which the book hides; a `# NBVAL_...` comment is read by everyone."""
    import json

    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        marked = [i for i, c in enumerate(cells) if "NBVAL_" in "".join(c["source"])]
        assert not marked, f"{path.name}: cells {marked} carry an NBVAL_ comment; use the cell tag"
