"""bf16 autocast on the CPU (`nas.engine.precision`): the CPU check reads the instruction flags,
and the warning says what was measured. The rule itself is tested where the standalone variant is
chosen (tests/engine/fidelity/test_standalone_variant.py)."""
from __future__ import annotations

import pytest
import torch

from nas.engine import precision


@pytest.mark.parametrize("has_bf16", [True, False])
def test_the_bf16_warning_says_what_was_measured(monkeypatch, has_bf16):
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: has_bf16)
    message = precision.bf16_cpu_warning()
    assert message.startswith("train.precision: bf16 autocast on CPU is often slower than fp32; measured "
                              "(benchmarks/notes/23-bf16.md): ")
    assert precision.BF16_MEASURED in message and "1.15-1.41x faster than fp32 for cell201" in message
    assert message.endswith("this CPU has bf16 instructions" if has_bf16 else "this CPU lacks bf16 instructions")


def test_the_cpu_check_reads_the_instruction_flags_without_torch_s(monkeypatch, tmp_path):
    flags = {"avx512f avx512_bf16": True, "avx512f amx_bf16 amx_tile": True, "avx512f avx2": False}
    for line, has in flags.items():
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 {line}\n")
        monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
        real_open = open
        monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(cpuinfo if path == "/proc/cpuinfo"
                                                                               else path, *a, **k))
        assert precision.cpu_has_bf16.__wrapped__() is has, line
        monkeypatch.undo()
