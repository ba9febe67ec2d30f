"""The README: its usage snippet runs exactly as written, and its Start here box tells the truth."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_a_snippet():
    assert python_blocks(), "README.md should show a runnable ```python block"


def test_readme_snippet_runs(capsys):
    for block in python_blocks():
        exec(compile(block, "README.md", "exec"), {})
    assert "torch.Size([2, 4, 64])" in capsys.readouterr().out


def test_readme_gives_the_two_commands():
    text = README.read_text(encoding="utf-8")
    assert "make book" in text and "make test" in text


def test_the_start_here_box_states_the_core_paths_length_as_it_is():
    """Chapters, words and lines of code of the core path (the book's parts before Experiments)."""
    import json

    import yaml

    root = README.parent
    toc = yaml.safe_load((root / "book" / "_toc.yml").read_text())
    core = []
    for part in toc["parts"]:
        if part["caption"] == "Experiments":
            break
        core += [c["file"] for c in part["chapters"] if c["file"].startswith("notebooks/")]
    words = lines = 0
    for name in core:
        for cell in json.loads((root / "book" / f"{name}.ipynb").read_text())["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                words += len(text.split())
            else:
                lines += sum(
                    1 for ln in text.splitlines() if ln.strip() and not ln.startswith("#|")
                )
    said = re.search(
        r"is (\d+) chapters with about ([\d,]+) words of prose.*?and ([\d,]+) lines of code",
        " ".join(README.read_text(encoding="utf-8").replace(">", " ").split()),
    )
    assert said, "README.md's Start here box should state the core path's length"
    chapters, said_words, said_lines = (int(g.replace(",", "")) for g in said.groups())
    assert chapters == len(core)
    assert abs(said_words - words) <= 0.1 * words, f"the core path has {words} words now"
    assert abs(said_lines - lines) <= 0.1 * lines, f"the core path has {lines} lines of code now"
    hours = {
        "two": 2,
        "two and a half": 2.5,
        "two and three quarter": 2.75,
        "three": 3,
        "three and a quarter": 3.25,
        "three and a half": 3.5,
    }
    reading = re.search(
        r"some ([a-z ]+?) hours? of reading at (\d+) words a minute",
        " ".join(README.read_text(encoding="utf-8").replace(">", " ").split()),
    )
    assert reading and reading.group(1) in hours, "the box should say how long the reading takes"
    minutes = words / int(reading.group(2))
    assert abs(minutes - 60 * hours[reading.group(1)]) <= 15, (
        f"{words} words take {minutes:.0f} minutes"
    )


def test_the_translate_example_reads_a_committed_model():
    """The first translate command works from a fresh clone: its checkpoint is in the repository."""
    text = README.read_text(encoding="utf-8")
    commands = re.findall(r"annotated translate --model (\S+)", text)
    assert commands, "README.md should show how to translate"
    first = README.parent / commands[0]
    assert first.is_file() and (first.parent / "tokenizer.json").is_file(), commands[0]


def test_the_readme_says_where_to_read_it_once_and_names_the_tools_it_needs():
    text = README.read_text(encoding="utf-8")
    assert text.count("Read it online") == 1
    start_here = text.split("**Start here**", 1)[1].split("\n\n", 1)[0]
    assert "Node.js" in start_here and "npm" in start_here, "make install runs npm ci"
    makefile = (README.parent / "Makefile").read_text(encoding="utf-8")
    assert "npm ci" in makefile  # if the install stops needing npm, say so above
    assert (
        "chromium" in text.lower()
        and "/usr/bin/chromium" in (README.parent / ".ci" / "run").read_text()
    )


def test_contributor_material_comes_after_the_chapter_list():
    headings = re.findall(r"^## (.+)$", README.read_text(encoding="utf-8"), flags=re.M)
    chapters = headings.index("The chapters and appendices")
    for contributor in ("Build the book and run the tests", "The package"):
        assert headings.index(contributor) > chapters, headings
    assert headings[-1] == "Licence and citation"


def test_the_chapter_table_lists_every_notebook_of_the_book_in_its_order():
    import yaml

    root = README.parent
    toc = yaml.safe_load((root / "book" / "_toc.yml").read_text())
    book = [
        c["file"].removeprefix("notebooks/")
        for part in toc["parts"]
        for c in part["chapters"]
        if c["file"].startswith("notebooks/")
    ]
    text = README.read_text(encoding="utf-8")
    table = text.split("## The chapters and appendices", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| \[[^]]+\]\(notebooks/([\w-]+)\.ipynb\)", table, flags=re.M)
    assert sorted(listed) == sorted(book), "README's table and book/_toc.yml list other notebooks"
    assert all((root / "notebooks" / f"{name}.ipynb").is_file() for name in listed)
    for name in listed:  # the link text starts with the notebook's number
        row = next(line for line in table.splitlines() if f"(notebooks/{name}.ipynb)" in line)
        assert row.startswith(f"| [{name.split('_', 1)[0]} · "), row


def test_every_module_the_reading_table_names_exists():
    """The table's last column names each chapter's modules (`.name` continues the last full name's
    package): a renamed or removed module must be renamed there too."""
    package = README.parent
    named = []
    for line in README.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| ["):
            continue
        base = None
        for name in re.findall(r"`(\.?[A-Za-z_][\w.]*)`", line.rsplit(" | ", 1)[-1]):
            if name.startswith("annotated"):  # a package's own name is the base of what follows it
                full = name
                is_package = (package / name.replace(".", "/") / "__init__.py").is_file()
                base = name if is_package else name.rsplit(".", 1)[0]
            elif name.startswith(".") and base is not None:
                full = base + name
            else:
                continue
            named.append(full)
            path = package / full.replace(".", "/")
            assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), full
    assert len(named) > 20, named
