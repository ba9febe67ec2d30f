"""`python -m annotated`: the command line (see annotated/app/cli.py, generated from notebooks/22_command_line.ipynb)."""

import sys

try:
    from annotated.app.cli import main  # imports torch: a second or more, when Ctrl-C may come

    code = main()
except KeyboardInterrupt:  # one that main() could not catch yet: no traceback, the shell's code
    if "--debug" in sys.argv[1:]:
        raise
    code = 130
sys.exit(code)
