"""`python -m annotated`: the command line (see annotated/app/cli.py, generated from notebooks/16_command_line.ipynb)."""

import sys

from annotated.app.cli import main

sys.exit(main())
