"""``python -m harness.sim ...``: run the simulated sglang server."""

import sys

from harness.sim.cli import main

sys.exit(main(sys.argv[1:]))
