"""The simulator's clock and cost model (the numbers: `harness.sim.engine`'s docstring): when a
batch of modelled duration ends on the virtual timeline (`batch_deadline`), and what a prefill
batch, a decode step and a storage read or write cost (`CostModel`, scaled by
``--sim-time-scale``).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.core.model_config import ModelShape
from harness.sim.args import DEFAULT_H2D_GBS, DEFAULT_STEP_MS_PER_REQUEST

# How far (real seconds) the virtual timeline may fall behind before it is rebased on "now": a
# late batch is made up by the next ones, but a long overloaded stretch is not banked as credit.
MAX_LAG_S = 0.5


def batch_deadline(
    now: float, duration_s: float, timeline: float | None, arrived: float | None, max_lag_s: float = MAX_LAG_S
) -> float:
    """When a batch of modelled ``duration_s`` (time-scaled) ends, in loop time.

    It starts where the previous batch ended (``timeline``; None when the scheduler was idle),
    not before its newest request ``arrived`` (after idling: exactly then, so the time spent
    receiving and admitting the request is inside the batch), and never more than ``max_lag_s``
    before ``now``: a scheduler that woke late makes the lateness up in the next batches, but a
    long overloaded stretch is not banked as credit."""
    if timeline is None:
        start = now if arrived is None else arrived
    else:
        start = timeline if arrived is None else max(timeline, arrived)
    return max(start, now - max_lag_s) + max(0.0, duration_s)


# The pinned H2D bandwidth of the host the simulator pretends to be by default (what ``harness
# probe`` would measure there: an H200's PCIe Gen5 x16, docs/probe.md); ``--sim-h2d-gbs`` models
# another host's link. The ``kernel`` io backend reaches it, ``direct`` and layer_first less (below).
PLATFORM_H2D_BYTES_S = DEFAULT_H2D_GBS * 1e9
DIRECT_SHARE = 40 / 55  # the ``direct`` io backend's load-back as a share of the pinned link
# the fault slow_page_first_direct: page_first_direct's load-back as a share of the link, measured
# with sglang 0.5.17 on an H200 (1.46 GB/s of a probed 55.4 GB/s pinned H2D, docs/gpu.md)
PAGE_FIRST_DIRECT_SHARE = 1.46 / 55.4


@dataclass(frozen=True)
class CostModel:
    prefill_tok_s: float
    prefill_overhead_s: float
    decode_base_s: float
    decode_per_req_s: float
    h2d_bytes_s: float
    d2h_bytes_s: float
    hbm_bytes_s: float
    backup_visible: float
    time_scale: float
    storage_read_bytes_s: float = 2e9
    storage_write_bytes_s: float = 1e9
    platform_h2d_bytes_s: float = PLATFORM_H2D_BYTES_S  # the pretend host's pinned H2D (--sim-h2d-gbs)

    @classmethod
    def for_model(
        cls,
        shape: ModelShape,
        tp_size: int,
        io_backend: str,
        mem_layout: str,
        time_scale: float,
        step_ms_per_request: float = DEFAULT_STEP_MS_PER_REQUEST,
        storage_read_gbs: float = 2.0,
        storage_write_gbs: float = 1.0,
        h2d_gbs: float = DEFAULT_H2D_GBS,
    ) -> "CostModel":
        params = shape.approx_params() / max(1, tp_size)
        link = h2d_gbs * 1e9
        h2d = link * (DIRECT_SHARE if io_backend == "direct" else 1.0) * (0.8 if mem_layout == "layer_first" else 1.0)
        return cls(
            prefill_tok_s=min(80_000.0, 4e14 / (2 * params)),
            prefill_overhead_s=0.004,
            decode_base_s=max(0.004, 2 * params / 4e12),
            decode_per_req_s=max(0.0, step_ms_per_request) / 1e3,
            h2d_bytes_s=h2d,
            d2h_bytes_s=55e9,
            hbm_bytes_s=4e12,
            backup_visible=0.25,
            time_scale=time_scale,
            storage_read_bytes_s=storage_read_gbs * 1e9,
            storage_write_bytes_s=storage_write_gbs * 1e9,
            platform_h2d_bytes_s=link,
        )

    def storage_read_s(self, nbytes: int) -> float:
        return nbytes / self.storage_read_bytes_s

    def storage_write_s(self, nbytes: int) -> float:
        return nbytes / self.storage_write_bytes_s

    def prefill_s(self, new_tokens: int, load_bytes: int, backup_bytes: int, storage_read_bytes: int = 0) -> float:
        return (
            self.prefill_overhead_s
            + new_tokens / self.prefill_tok_s
            + load_bytes / self.h2d_bytes_s
            + self.backup_visible * backup_bytes / self.d2h_bytes_s
            + self.storage_read_s(storage_read_bytes)
        )

    def decode_s(self, batch: int, kv_bytes_read: int, backup_bytes: int) -> float:
        return (
            self.decode_base_s
            + self.decode_per_req_s * batch
            + kv_bytes_read / self.hbm_bytes_s
            + self.backup_visible * backup_bytes / self.d2h_bytes_s
        )
