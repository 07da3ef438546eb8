"""`python -m workers.cli`: the same entry point as the `taubot` script."""

import sys

from workers.cli import main

sys.exit(main())
