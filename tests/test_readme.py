"""The README's usage snippet runs exactly as written."""

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
