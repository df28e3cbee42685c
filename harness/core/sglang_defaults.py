"""What sglang does when it is not told (0.5.17): the defaults the scenario, the preflight, the
quality arm and the simulator all assume, declared once."""

from __future__ import annotations

# --hicache-ratio: the host pool is this many times the device pool when no --hicache-size is given
SGLANG_DEFAULT_HICACHE_RATIO = 2.0
