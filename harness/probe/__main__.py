"""`python -m harness.probe`: the same as `harness probe`."""

import sys

from harness.probe.cli import main

sys.exit(main())
