"""procfs parsers on captured /proc samples, and the vmstat rate arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.host import procfs

FIX = Path(__file__).parents[2] / "fixtures" / "proc"


def test_meminfo_wsl2_fields_in_kib():
    mi = procfs.parse_meminfo((FIX / "meminfo_wsl2_32gb_ratio2_idle.txt").read_text())
    assert mi["MemTotal"] == 32813468
    assert mi["MemAvailable"] == 3612940
    assert mi["MemFree"] == 412876
    assert mi["Cached"] == 603188
    assert mi["Mlocked"] == 31952
    assert mi["Shmem"] == 21508
    assert mi["SwapTotal"] == 8388608
    assert mi["SwapFree"] == 5923172
    # HugePages_* are counts, Hugepagesize is kiB
    assert mi["HugePages_Total"] == 0 and mi["HugePages_Free"] == 0
    assert mi["Hugepagesize"] == 2048
    # parenthesised names survive
    assert mi["Active(anon)"] == 1431600
    for name in procfs.MEMINFO_FIELDS:
        assert name in mi


def test_meminfo_this_machine():
    mi = procfs.parse_meminfo((FIX / "meminfo_firecracker_vm.txt").read_text())
    assert mi["MemTotal"] > mi["MemAvailable"] > 0
    assert mi["SwapTotal"] == 0 and mi["SwapFree"] == 0
    assert set(procfs.MEMINFO_FIELDS) <= set(mi)


def test_meminfo_skips_malformed_lines():
    mi = procfs.parse_meminfo("MemTotal: 10 kB\ngarbage\nMemFree:\nCached: x kB\nShmem: 3 kB\n")
    assert mi == {"MemTotal": 10, "Shmem": 3}


def test_live_meminfo_readable():
    mi = procfs.read_meminfo()
    assert mi["MemAvailable"] > 0


def test_vmstat_parse():
    vm = procfs.parse_vmstat((FIX / "vmstat_firecracker_vm.txt").read_text())
    assert vm["pgfault"] > 0 and vm["pgmajfault"] > 0
    assert vm["pswpin"] == 0 and vm["pswpout"] == 0  # no swap device on this VM
    assert all(isinstance(v, int) for v in vm.values())
    wsl = procfs.parse_vmstat((FIX / "vmstat_wsl2_t0.txt").read_text())
    assert wsl["pswpin"] == 1812447 and wsl["pgmajfault"] == 612233


def test_vmstat_rates_like_vmstat_si_so():
    t0 = procfs.parse_vmstat((FIX / "vmstat_wsl2_t0.txt").read_text())
    t1 = procfs.parse_vmstat((FIX / "vmstat_wsl2_t1.txt").read_text())
    r = procfs.vmstat_rates(t0, t1, 1.0, page_size_bytes=4096)
    assert r.pswpin_kib_s == pytest.approx(137 * 4)  # 548 KiB/s, seed 000's si≈547
    assert r.pswpout_kib_s == 0
    assert r.pgmajfault_s == pytest.approx(121)
    assert r.pgfault_s == pytest.approx(2311)
    # over 2 s and 64 KiB pages
    r2 = procfs.vmstat_rates(t0, t1, 2.0, page_size_bytes=65536)
    assert r2.pswpin_kib_s == pytest.approx(137 * 64 / 2)


def test_vmstat_rates_absent_counters_are_none_and_never_negative():
    r = procfs.vmstat_rates({"pgfault": 10}, {"pgfault": 5}, 1.0)
    assert r.pswpin_kib_s is None and r.pswpout_kib_s is None and r.pgmajfault_s is None
    assert r.pgfault_s == 0
    with pytest.raises(ValueError):
        procfs.vmstat_rates({}, {}, 0)


def test_read_meminfo_field_and_mem_available(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       131072000 kB\nMemFree:  1 kB\nMemAvailable:   100000000 kB\n")
    assert procfs.read_meminfo_field("MemAvailable", str(f)) == 100000000
    assert procfs.read_meminfo_field("SwapTotal", str(f)) is None
    assert procfs.read_meminfo_field("MemTotal", str(tmp_path / "missing")) is None
    assert procfs.read_mem_available_kib(str(f)) == 100000000
    f.write_text("MemTotal: 5 kB\n")
    assert procfs.read_mem_available_kib(str(f)) == 0
    with pytest.raises(OSError):
        procfs.read_mem_available_kib(str(tmp_path / "missing"))


def test_cpu_model(tmp_path):
    text = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\n"
    assert procfs.parse_cpu_model(text) == "AMD EPYC 9654 96-Core Processor"
    assert procfs.parse_cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n") is None  # arm64 has none
    assert procfs.read_cpu_model(str(tmp_path / "missing")) is None


def test_picking_fields_by_name_gives_what_the_full_parsers_give():
    """The sampler reads its meminfo fields and vmstat counters by name (`pick_fields`); on every
    captured /proc text and on odd ones, those equal the full parsers' values."""
    from harness.run.sampler import MEMINFO_FIELDS, VMSTAT_FIELDS

    odd_meminfo = "MemAvailable: 5 kB\nSwapCached: 7 kB\nCached: x kB\nMemFree:\nShmem: 3 kB"
    for text in [*(p.read_text() for p in FIX.glob("meminfo_*.txt")), odd_meminfo]:
        full = procfs.parse_meminfo(text)
        names = (*MEMINFO_FIELDS, "MemTotal", "Nonexistent")
        assert procfs.pick_fields(text, names, ":") == {k: full[k] for k in names if k in full}
    assert procfs.pick_fields(odd_meminfo, MEMINFO_FIELDS, ":") == {"MemAvailable": 5, "Shmem": 3}
    odd_vmstat = "pswpin 4\npgfault 1 2\npgmajfault x\npswpout 9"
    for text in [*(p.read_text() for p in FIX.glob("vmstat_*.txt")), odd_vmstat]:
        full = procfs.parse_vmstat(text)
        assert procfs.pick_fields(text, VMSTAT_FIELDS, " ") == {k: full[k] for k in VMSTAT_FIELDS if k in full}
    assert procfs.pick_fields(odd_vmstat, VMSTAT_FIELDS, " ") == {"pswpin": 4, "pswpout": 9}
