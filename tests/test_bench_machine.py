"""`bench/machine.py`: the CPU line every benchmark prints with its figures."""

import os

import pytest

from tests.bench_helpers import load_bench


def load_machine():
    return load_bench("machine")


def cpuinfo(tmp_path, flags, model="AMD EPYC 7B13"):
    # Two processors, as /proc/cpuinfo lists them; only the first is read.
    block = (
        "processor\t: {}\nvendor_id\t: AuthenticAMD\n"
        f"model name\t: {model}\nflags\t\t: {flags}\n\n"
    )
    path = tmp_path / "cpuinfo"
    path.write_text(block.format(0) + block.format(1).replace(flags, "fpu"))
    return str(path)


@pytest.mark.parametrize(
    "flags, isa",
    [
        ("fpu sse2 avx avx2 fma avx512f avx512bw", "avx512f"),
        ("fpu sse2 avx avx2 fma", "avx2"),
        ("fpu sse2 avx", "neither"),
        # A flag that only starts with the name is not the flag.
        ("fpu avx2_vnni_like avx512fx", "neither"),
    ],
)
def test_widest_extension_from_the_first_processor(tmp_path, flags, isa):
    machine = load_machine()
    info = machine.cpu(cpuinfo(tmp_path, flags))
    assert info["model"] == "AMD EPYC 7B13"
    assert info["isa"] == isa
    assert info["cores"] == os.cpu_count()


def test_describe_names_the_onednn_cap(tmp_path, monkeypatch):
    machine = load_machine()
    path = cpuinfo(tmp_path, "avx2 avx512f")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    cores = os.cpu_count()
    assert machine.describe(machine.cpu(path)) == f"AMD EPYC 7B13, {cores} cores, avx512f"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert machine.describe(machine.cpu(path)) == (
        f"AMD EPYC 7B13, {cores} cores, avx512f (ONEDNN_MAX_CPU_ISA=AVX2)"
    )


def test_no_cpuinfo_falls_back_to_platform(tmp_path):
    info = load_machine().cpu(str(tmp_path / "absent"))
    assert info["isa"] == "neither" and info["model"]


def test_this_machine_agrees_with_grep():
    # The reference is the rule's own command: `grep -o avx512f /proc/cpuinfo`.
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo")
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        words = handle.read().split()
    isa = load_machine().cpu()["isa"]
    assert (isa == "avx512f") == ("avx512f" in words)
    assert (isa == "avx2") == ("avx2" in words and "avx512f" not in words)
