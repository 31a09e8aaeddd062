"""`python -m hermit`: the same entry point as the `hermit` command."""

import sys

from hermit.cli.main import main

sys.exit(main())
