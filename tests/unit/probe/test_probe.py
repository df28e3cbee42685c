"""Tests of harness.probe (run, worker, cli): pure helpers, the no-GPU path, subprocess isolation,
result assembly (with a fake runner), the kernel-write check (with a fake cupy), and real-GPU
tests (marked gpu)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from harness.analysis import bandwidth
from harness.host import fingerprint
from harness.probe import cli as probe_cli
from harness.probe import run as probe_run
from harness.probe import worker as probe_worker

ROOT = Path(__file__).resolve().parents[3]


def _gpu_visible() -> bool:
    return Path("/dev/nvidia0").exists() or Path("/dev/dxg").exists()


# ---------------------------------------------------------------- pure helpers


@pytest.mark.parametrize(
    "release, expected",
    [
        ("5.15.153.1-microsoft-standard-WSL2", True),
        ("6.6.36.6-Microsoft-standard-WSL2", True),
        ("4.4.0-19041-Microsoft", True),
        ("6.8.0-45-generic", False),
        ("6.18.44-fc-v595", False),
        ("", False),
        (None, False),
    ],
)
def test_is_wsl(release, expected):
    assert fingerprint.is_wsl(release) is expected


@pytest.mark.parametrize(
    "pageable, host_tables, expected",
    [
        (1, 1, "ATS"),
        (1, 0, "HMM"),
        (0, 0, "none"),
        (0, 1, "none"),
        (0, None, "none"),
        (1, None, None),
        (None, 0, None),
        (None, None, None),
    ],
)
def test_classify_pageable_access(pageable, host_tables, expected):
    assert probe_run.classify_pageable_access(pageable, host_tables) == expected


def test_load_back_fraction():
    # 27.65 GB in 1 s against 55.3 GB/s pinned H2D is half the link.
    assert bandwidth.load_back_fraction(27.65e9, 1.0, 55.3) == pytest.approx(0.5)
    assert bandwidth.load_back_fraction(55.3e9, 2.0, 55.3) == pytest.approx(0.5)
    assert bandwidth.load_back_fraction(0, 1.0, 55.3) == 0.0
    for bad in [
        (None, 1.0, 55.3),
        (1e9, None, 55.3),
        (1e9, 1.0, None),
        (1e9, 0.0, 55.3),
        (1e9, -1.0, 55.3),
        (1e9, 1.0, 0.0),
        (-1, 1.0, 55.3),
        (float("nan"), 1.0, 55.3),
        (1e9, float("inf"), 55.3),
        ("x", 1.0, 55.3),
        (True, 1.0, 55.3),
    ]:
        assert bandwidth.load_back_fraction(*bad) is None, bad


def test_register_size_caps_at_fraction_of_available():
    gib = probe_run.GIB
    assert probe_run.register_size(8, None) == (8 * gib, False)
    assert probe_run.register_size(8, 100 * gib) == (8 * gib, False)
    nbytes, capped = probe_run.register_size(8, 10 * gib)
    assert capped and nbytes == 5 * gib
    assert probe_run.register_size(8, 0) == (0, True)


def test_size_parser():
    assert probe_cli._size("1GiB") == probe_run.GIB
    assert probe_cli._size("256MiB") == 256 * probe_run.MIB
    assert probe_cli._size("268435456") == 268435456
    assert probe_cli._size("0.5g") == probe_run.GIB // 2
    with pytest.raises(Exception):
        probe_cli._size("lots")


def test_options_quick_defaults_and_overrides():
    q = probe_run.ProbeOptions(quick=True).resolved()
    assert (q.nbytes, q.register_gib, q.repeats) == (256 * probe_run.MIB, 1.0, 3)
    d = probe_run.ProbeOptions().resolved()
    assert (d.nbytes, d.register_gib, d.repeats) == (probe_run.GIB, 8.0, 5)
    o = probe_run.ProbeOptions(quick=True, nbytes=4096, register_gib=2).resolved()
    assert (o.nbytes, o.register_gib) == (4096, 2.0)
    with pytest.raises(TypeError):
        probe_run.run_probes({"no_such_option": 1})


def test_expected_pattern_matches_kernel_arithmetic():
    p = probe_worker.expected_pattern(4, seed=0)
    assert p.dtype == np.uint32
    assert [int(x) for x in p] == [(i * 2654435761) % 2**32 for i in range(4)]
    assert probe_worker.format_cuda_version(13000) == "13.0"
    assert probe_worker.format_cuda_version(12040) == "12.4"


# ---------------------------------------------------------------- no-GPU paths


def _assert_no_gpu_result(res: dict, reasons: tuple[str, ...]):
    assert res["schema_version"] == probe_run.SCHEMA_VERSION
    assert res["gpu_present"] is False
    assert res["ok"] is False
    assert res["reason"] in reasons
    assert isinstance(res["wsl"], bool)
    assert res["kernel_release"] == os.uname().release
    assert res["wsl"] is fingerprint.is_wsl(os.uname().release)
    json.dumps(res)  # serialisable


def test_no_torch_path_in_process(monkeypatch):
    monkeypatch.setattr(probe_run, "torch_installed", lambda: False)
    res = probe_run.run_probes({"quick": True})
    _assert_no_gpu_result(res, (probe_run.REASON_NO_TORCH,))
    assert res["devices"] == [] and res["host_register_kernel_write"] is None


def test_torch_hidden_from_find_spec(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    assert probe_run.torch_installed() is False


def test_cli_writes_json_without_torch(tmp_path):
    """`python -m harness.probe --json f` with torch hidden: exit 0, the no-GPU result."""
    out = tmp_path / "sub" / "probe_run.json"
    code = "import sys; sys.modules['torch'] = None; from harness.probe.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, "--json", str(out), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "no GPU: torch not installed" in proc.stdout
    _assert_no_gpu_result(json.loads(out.read_text()), (probe_run.REASON_NO_TORCH,))


@pytest.mark.skipif(_gpu_visible(), reason="a GPU is visible: the full probe would run")
def test_module_cli_without_gpu(tmp_path):
    """The exact command: `python -m harness.probe --json f` on a host without a GPU."""
    out = tmp_path / "probe_run.json"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.probe", "--json", str(out), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    _assert_no_gpu_result(json.loads(out.read_text()), (probe_run.REASON_NO_TORCH, probe_run.REASON_NO_CUDA))


def test_cli_bad_usage_exits_2():
    with pytest.raises(SystemExit) as e:
        probe_cli.main(["--bytes", "lots"])
    assert e.value.code == 2


# ---------------------------------------------------------------- subprocess isolation


def test_worker_ok_and_in_a_fresh_process():
    r1 = probe_run.run_worker("selftest", {"mode": "ok"}, 30)
    r2 = probe_run.run_worker("selftest", {"mode": "ok"}, 30)
    assert r1["ok"] and r2["ok"] and r1["error"] is None
    assert r1["value"]["pid"] != r2["value"]["pid"] != os.getpid()


def test_worker_raise_becomes_error():
    r = probe_run.run_worker("selftest", {"mode": "raise"}, 30)
    assert r["ok"] is False and "asked to fail" in r["error"] and r["stage"] == "selftest"


def test_worker_crash_becomes_error():
    r = probe_run.run_worker("selftest", {"mode": "abort"}, 30)
    assert r["ok"] is False and "SIGABRT" in r["error"]


def test_worker_timeout_is_hard():
    r = probe_run.run_worker("selftest", {"mode": "sleep", "seconds": 60}, 1.5)
    assert r["ok"] is False and r["error"].startswith("timeout")
    assert r["seconds"] < 20


# ---------------------------------------------------------------- assembly (fake runner)


H200_ENV = {
    "torch_version": "2.11.0+cu130",
    "cuda_runtime": "13.0",
    "cuda_available": True,
    "device_count": 1,
    "driver_version": "13.0",
    "nvidia_driver": "580.95.05",
    "cupy_version": "13.6.0",
    "devices": [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "total_mem_gib": 139.8,
            "compute_capability": "9.0",
            "pageable_memory_access": 0,
            "pageable_memory_access_uses_host_page_tables": 0,
            "can_use_host_pointer_for_registered_mem": 1,
            "attribute_source": "cupy",
            "attribute_error": None,
        }
    ],
}
BW = {"pinned": (55.3, 55.3), "registered": (55.1, 55.5), "pageable": (7.2, 14.5)}


def fake_runner(fail_flags=(), env=H200_ENV, calls=None):
    def run(name, params, timeout_s):
        if calls is not None:
            calls.append((name, dict(params)))
        if name == "env":
            return {"ok": True, "value": env, "error": None}
        if name == "kwrite_register":
            if params["flags"] in fail_flags:
                return {
                    "ok": False,
                    "value": None,
                    "stage": "sync",
                    "error": "sync: CUDARuntimeError: cudaErrorIllegalAddress",
                }
            return {"ok": True, "value": {"flags": params["flags"]}, "error": None}
        if name == "kwrite_hostalloc":
            return {"ok": True, "value": {}, "error": None}
        if name == "bandwidth":
            h, d = BW[params["kind"]]
            return {"ok": True, "value": {"h2d_gbs": h, "d2h_gbs": d}, "error": None}
        if name == "register_time":
            return {"ok": True, "value": {"seconds": 0.4}, "error": None}
        if name == "register_chunks":
            plans = [
                {"chunk_gib": g / 2**30, "chunks": 1, "register_seconds": 0.1, "unregister_seconds": 0.05}
                for g in params["chunk_bytes"]
            ]
            rollback = {"failed": {"chunk": 3}, "rolled_back_chunks": 2, "seconds": 0.01}
            return {"ok": True, "value": {"plans": plans, "rollback": rollback}, "error": None}
        raise AssertionError(name)

    return run


def test_assembly_all_ok():
    calls = []
    res = probe_run.run_probes({"quick": True, "register_gib": 0.01}, runner=fake_runner(calls=calls))
    json.dumps(res)
    assert res["ok"] is True and res["gpu_present"] is True and res["reason"] is None
    assert res["errors"] == []
    dev = res["devices"][0]
    assert dev["name"] == "NVIDIA H200" and dev["hmm_or_ats"] == "none"
    assert set(res["host_register_kernel_write"]) == {"0", "1", "2", "3"}
    assert all(v["ok"] for v in res["host_register_kernel_write"].values())
    assert res["host_alloc_kernel_write"]["ok"] is True
    assert res["bandwidth_gbs"] == {
        "pinned_h2d": 55.3,
        "pinned_d2h": 55.3,
        "registered_h2d": 55.1,
        "registered_d2h": 55.5,
        "pageable_h2d": 7.2,
        "pageable_d2h": 14.5,
    }
    assert res["register_seconds"]["seconds"] == 0.4
    assert res["torch_version"] == "2.11.0+cu130" and res["nvidia_driver"] == "580.95.05"
    # each kernel-write flag is its own worker call (a fresh process with the real runner)
    assert [p["flags"] for n, p in calls if n == "kwrite_register"] == [0, 1, 2, 3]
    assert all(p["device"] == 0 for n, p in calls if n != "env")
    assert "all probes ok" in probe_cli.summary(res)


def test_assembly_wsl_like_failures_do_not_stop_other_probes():
    res = probe_run.run_probes({"quick": True, "register_gib": 0.01}, runner=fake_runner(fail_flags=(0, 1, 2, 3)))
    assert res["gpu_present"] is True and res["ok"] is False
    kw = res["host_register_kernel_write"]
    assert [kw[str(f)]["ok"] for f in range(4)] == [False] * 4
    assert "IllegalAddress" in kw["2"]["error"]
    assert res["host_alloc_kernel_write"]["ok"] is True  # the control still ran
    assert res["bandwidth_gbs"]["pinned_h2d"] == 55.3  # and so did the rest
    assert res["register_seconds"]["ok"] is True
    assert len(res["errors"]) == 4
    text = probe_cli.summary(res)
    assert "flags 0 FAILED" in text and "cudaHostAlloc memory: ok" in text


def test_assembly_hmm_device_and_no_cuda():
    env = json.loads(json.dumps(H200_ENV))
    env["devices"][0].update(pageable_memory_access=1, pageable_memory_access_uses_host_page_tables=0)
    res = probe_run.run_probes({"quick": True, "register_gib": 0.01}, runner=fake_runner(env=env))
    assert res["devices"][0]["hmm_or_ats"] == "HMM"
    no_cuda = dict(H200_ENV, cuda_available=False, devices=[])
    res = probe_run.run_probes({"quick": True}, runner=fake_runner(env=no_cuda))
    assert res["gpu_present"] is False and res["reason"] == probe_run.REASON_NO_CUDA
    assert res["torch_version"] == "2.11.0+cu130"


def test_assembly_env_failure_is_a_reason_not_a_traceback():
    def run(name, params, timeout_s):
        return {"ok": False, "value": None, "error": "timeout: no result after 1 s (worker killed)"}

    res = probe_run.run_probes({"quick": True}, runner=run)
    assert res["gpu_present"] is False and res["reason"].startswith("no GPU: environment probe failed")


# ---------------------------------------------------------------- kernel-write check, fake cupy


def _fake_cupy(write=True, corrupt=False):
    """Just enough of cupy for probe_kwrite_*: the 'kernel' writes the pattern with memmove."""
    cp = types.ModuleType("cupy")
    rt = types.SimpleNamespace(
        hostRegister=lambda ptr, size, flags: None,
        hostUnregister=lambda ptr: None,
        pointerGetAttributes=lambda ptr: types.SimpleNamespace(
            device=0, devicePointer=ptr, hostPointer=ptr, memoryType=1
        ),
        deviceSynchronize=lambda: None,
        malloc=lambda n: 1,
        free=lambda p: None,
        deviceGetAttribute=lambda attr, dev: {88: 1, 100: 0, 91: 1}[attr],
        driverGetVersion=lambda: 13000,
    )

    class Device:
        def __init__(self, i):
            pass

        def use(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    class RawKernel:
        def __init__(self, src, name):
            assert name in src

        def __call__(self, grid, block, args):
            ptr, n, seed = (int(a) for a in args)
            assert grid[0] * block[0] >= n
            if not write:
                return
            want = probe_worker.expected_pattern(n, seed)
            if corrupt:
                want[n // 2] ^= 1
            ctypes.memmove(ptr, want.ctypes.data, n * 4)

    cp.cuda = types.SimpleNamespace(runtime=rt, Device=Device)
    cp.RawKernel = RawKernel
    cp.__version__ = "fake"
    return cp


@pytest.mark.parametrize("flags", [0, 1, 2, 3])
def test_kwrite_register_with_fake_cupy(monkeypatch, flags):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    r = probe_worker.run_one("kwrite_register", {"flags": flags, "nbytes": 64 * 1024})
    assert r["ok"], r
    assert r["value"]["register_api"] == "cupy" and r["value"]["words"] == 16 * 1024
    assert r["value"]["device_pointer_equals_host"] is True


def test_kwrite_detects_a_kernel_that_did_not_write(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(write=False))
    r = probe_worker.run_one("kwrite_register", {"flags": 0, "nbytes": 4096})
    assert r["ok"] is False and r["stage"] == "verify" and "1024 untouched" in r["error"]


def test_kwrite_detects_one_wrong_word(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(corrupt=True))
    r = probe_worker.run_one("kwrite_register", {"flags": 3, "nbytes": 4096})
    assert r["ok"] is False and r["stage"] == "verify" and r["error"].startswith("verify: 1 of 1024")


def test_device_attribute_via_fake_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy())
    assert probe_worker.device_attribute(probe_worker.ATTR_PAGEABLE_MEMORY_ACCESS, 0) == (1, "cupy", None)
    assert probe_worker.cuda_driver_version() == 13000


# ---------------------------------------------------------------- real GPU (pytest -m gpu)


@pytest.mark.gpu
def test_gpu_probe_finds_device_and_bandwidth(tmp_path):
    res = probe_run.run_probes({"quick": True, "register_gib": 1.0})
    assert res["gpu_present"] is True, res["reason"]
    assert res["devices"] and res["devices"][0]["name"]
    assert res["devices"][0]["hmm_or_ats"] in ("HMM", "ATS", "none")
    assert res["bandwidth_gbs"]["pinned_h2d"] > 1.0
    assert res["bandwidth_gbs"]["pinned_d2h"] > 1.0
    assert res["host_alloc_kernel_write"]["ok"] is True, res["host_alloc_kernel_write"]
    if not res["wsl"]:
        assert all(v["ok"] for v in res["host_register_kernel_write"].values()), res["errors"]
    assert res["register_seconds"]["seconds"] > 0
    frac = bandwidth.load_back_fraction(1e9, 1.0, res["bandwidth_gbs"]["pinned_h2d"])
    assert frac is not None and frac > 0


@pytest.mark.gpu
def test_gpu_cli(tmp_path):
    out = tmp_path / "probe_run.json"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.probe", "--json", str(out), "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["gpu_present"] is True


def test_chunk_plan_is_sglang_36798s_loop():
    """Chunks of at most the limit, rounded down to whole copy pages; the last one the rest."""
    plan = probe_worker.chunk_plan(total=10 * 1000, chunk_limit=3 * 1000 + 7, granularity=1000)
    assert plan == [(0, 3000), (3000, 3000), (6000, 3000), (9000, 1000)]
    assert probe_worker.chunk_plan(5 * 2**30, 256 * 2**30, 2**21) == [(0, 5 * 2**30)]  # the default: one call
    assert probe_worker.chunk_plan(100, 10, 64) == [(0, 64), (64, 36)]  # never below one page


def test_register_chunks_and_page_faults_in_the_result():
    """Seed 002: registration time per chunk size and the rollback; seed 003: page faults are never
    counted by the probe, and it says why for this GPU class."""
    calls = []
    res = probe_run.run_probes(
        {"quick": True, "register_gib": 0.01, "register_chunks_gib": (1, 16)}, runner=fake_runner(calls=calls)
    )
    (params,) = [p for n, p in calls if n == "register_chunks"]
    assert params["chunk_bytes"] == [2**30, 16 * 2**30]
    plans = res["register_chunks"]["value"]["plans"]
    assert [p["chunk_gib"] for p in plans] == [1, 16]
    assert res["gpu_page_faults"]["exposed"] is False and "attribute 88 = 0" in res["gpu_page_faults"]["reason"]
    text = probe_cli.summary(res)
    assert "cudaHostRegister by chunk size: 1 GiB x1" in text and "rollback of 2 chunks" in text
    hmm = dict(H200_ENV, devices=[dict(H200_ENV["devices"][0], pageable_memory_access=1)])
    res = probe_run.run_probes({"quick": True, "register_gib": 0.01}, runner=fake_runner(env=hmm))
    assert res["devices"][0]["hmm_or_ats"] == "HMM" and "CUPTI" in res["gpu_page_faults"]["reason"]


def test_no_gpu_says_page_faults_not_exposed(monkeypatch):
    monkeypatch.setattr(probe_run, "torch_installed", lambda: False)
    res = probe_run.run_probes({"quick": True})
    assert res["register_chunks"] is None
    assert res["gpu_page_faults"] == {
        "exposed": False,
        "count": None,
        "reason": "not exposed: no GPU: torch not installed",
    }


def test_register_chunks_option_parses():
    assert probe_cli.build_parser().parse_args(["--register-chunks-gib", "1,16,256"]).register_chunks_gib == (
        1,
        16,
        256,
    )
    with pytest.raises(SystemExit):
        probe_cli.build_parser().parse_args(["--register-chunks-gib", "0,1"])
