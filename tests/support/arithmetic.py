"""The arithmetic settings ``make test-arith`` runs the tests under: those of TensorFlow's
CPU kernels that this machine does not run by default, one per line as environment
assignments.

TensorFlow 2.19 runs oneDNN's kernels by default only on CPUs with AVX-512 VNNI and the
like (``IsMklEnabled()``), else its Eigen kernels. Both pick their instructions by the
CPU, so neither rounds alike on every machine: the settings here are Eigen and oneDNN
held to AVX2 (``ONEDNN_MAX_CPU_ISA``), less the one the machine runs anyway.

    .venv/bin/python -m tests.support.arithmetic
"""

from __future__ import annotations

EIGEN = "TF_ENABLE_ONEDNN_OPTS=0"
ONEDNN_AVX2 = "TF_ENABLE_ONEDNN_OPTS=1 ONEDNN_MAX_CPU_ISA=AVX2"


def other_settings(onednn_by_default: bool, avx512: bool) -> list[str]:
    """The settings that differ from the machine's default arithmetic."""
    settings = []
    if onednn_by_default:
        settings.append(EIGEN)
    if not onednn_by_default or avx512:
        settings.append(ONEDNN_AVX2)
    return settings


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def main() -> None:
    from tensorflow.python.util import _pywrap_util_port

    onednn = bool(_pywrap_util_port.IsMklEnabled())
    for setting in other_settings(onednn, "avx512f" in _cpu_flags()):
        print(setting)


if __name__ == "__main__":
    main()
