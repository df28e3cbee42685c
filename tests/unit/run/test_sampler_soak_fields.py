"""What the sampler adds for soaks and energy: the storage tier's directory size (sglang's `file`
backend, from the server's argv and env) and NVML's total energy counter per GPU."""

from __future__ import annotations

import sys
import time
import types

import pytest

from harness.host import nvml
from harness.run.sampler import FILE_BACKEND_DEFAULT_DIR, Sampler, dir_size_kib, storage_dir_of


def test_the_storage_dir_is_the_file_backends_from_the_launch_env_or_sglangs_default():
    argv = ["python", "-m", "sglang.launch_server", "--hicache-storage-backend", "file"]
    assert storage_dir_of({"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": "/data/kv"}, argv) == "/data/kv"
    assert storage_dir_of({}, argv) == FILE_BACKEND_DEFAULT_DIR
    assert storage_dir_of({}, ["--hicache-storage-backend=file"]) == FILE_BACKEND_DEFAULT_DIR
    assert storage_dir_of({}, ["--hicache-storage-backend", "mooncake"]) is None  # not a directory of ours
    assert storage_dir_of({}, ["--enable-hierarchical-cache"]) is None


def test_dir_size_counts_the_tree_and_a_missing_dir_is_none(tmp_path):
    assert dir_size_kib(str(tmp_path / "nope")) is None
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "page").write_bytes(b"\x01" * (1 << 20))
    (tmp_path / "b").write_bytes(b"\x01" * (1 << 19))
    assert dir_size_kib(str(tmp_path)) >= 1024 + 512


def test_samples_carry_the_storage_dirs_size_as_it_grows(tmp_path):
    store = tmp_path / "kv"
    store.mkdir()
    out: list[dict] = []
    s = Sampler(
        None,
        None,
        out.append,
        interval_s=0.05,
        gpu=False,
        launch_env={"SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR": str(store)},
        launch_argv=["--hicache-storage-backend", "file"],
    )
    s.start()
    time.sleep(0.15)
    (store / "page").write_bytes(b"\x01" * (4 << 20))
    s._storage_at = -1e18  # the next sample walks the directory again (it walks at most every 2 s)
    time.sleep(0.2)
    assert s.stop(timeout_s=5)
    sizes = [x["storage_dir_kib"] for x in out]
    assert sizes[0] < 1024 and sizes[-1] >= 4096


class FakeNvml(types.ModuleType):
    """pynvml with two GPUs and no energy counter (an older GPU or driver)."""

    def __init__(self):
        super().__init__("pynvml")

    def nvmlInit(self):  # noqa: N802
        pass

    def nvmlShutdown(self):  # noqa: N802
        pass

    def nvmlDeviceGetCount(self):  # noqa: N802
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        return i

    def nvmlDeviceGetUUID(self, h):  # noqa: N802
        return f"GPU-{h}"

    def nvmlDeviceGetMemoryInfo(self, h):  # noqa: N802
        return types.SimpleNamespace(used=1 << 30, total=80 << 30)

    def nvmlDeviceGetUtilizationRates(self, h):  # noqa: N802
        return types.SimpleNamespace(gpu=50)


class EnergyNvml(FakeNvml):
    def __init__(self):
        super().__init__()
        self.energy_mj = {i: 1_000_000 * (i + 1) for i in range(2)}

    def nvmlDeviceGetTotalEnergyConsumption(self, h):  # noqa: N802
        self.energy_mj[h] += 5000
        return self.energy_mj[h]


def test_gpu_readings_carry_nvmls_energy_counter_where_it_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", EnergyNvml())
    reader = nvml.GpuReader()
    try:
        first, again = reader.read([1]), reader.read([1])
    finally:
        reader.close()
    assert first[0].to_dict()["energy_mj"] == 2_005_000 and again[0].energy_mj == 2_010_000
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())  # a GPU or driver without the counter
    reader = nvml.GpuReader()
    try:
        (g,) = reader.read([1])
    finally:
        reader.close()
    assert g.energy_mj is None and "energy_mj" not in g.to_dict()


@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
