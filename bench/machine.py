"""The machine a benchmark ran on, as every reported time must name it.

The project's CPUs differ in their widest vector extension (AVX-512 or AVX2
only), and a step can take 4.5x as long on one as on the other, so each
benchmark prints the CPU's model, cores and extension with its figures: what
`grep -o avx512f /proc/cpuinfo` shows, and `ONEDNN_MAX_CPU_ISA` where set.
"""

import os
import platform


def cpu(path="/proc/cpuinfo"):
    """This machine's CPU: `{"model", "cores", "isa", "onednn_max_cpu_isa"}`.

    `isa` is `"avx512f"`, `"avx2"` or `"neither"`, from the first processor's
    flags in `path`; where that file cannot be read (not Linux) it is
    `"neither"` and the model is what `platform` reports.
    """
    model, flags = "", None
    try:
        with open(path, encoding="utf-8") as info:
            for line in info:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "flags" and flags is None:
                    flags = set(value.split())
    except OSError:
        pass
    flags = flags or set()
    return {
        "model": model or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "isa": "avx512f" if "avx512f" in flags else "avx2" if "avx2" in flags else "neither",
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
    }


def describe(info=None):
    """One line for a transcript: "AMD EPYC, 2 cores, avx512f" (and the
    oneDNN cap where one is set)."""
    info = info or cpu()
    line = f"{info['model']}, {info['cores']} cores, {info['isa']}"
    if info["onednn_max_cpu_isa"]:
        line += f" (ONEDNN_MAX_CPU_ISA={info['onednn_max_cpu_isa']})"
    return line
