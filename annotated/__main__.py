"""`python -m annotated`: the command line (see annotated/cli.py, generated from notebooks/16_command_line.ipynb)."""

import sys

from annotated.cli import main

sys.exit(main())
