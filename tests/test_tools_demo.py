"""tools/demo.py: mixed_bfloat16 only on a CPU whose flags say it multiplies bfloat16 natively."""

from __future__ import annotations

import pytest
from helpers.tools import load_tool


@pytest.fixture(scope="module")
def demo():
    return load_tool("demo")


CPUINFO = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 fma {extra}\nbogomips\t: 4000\n"


@pytest.mark.parametrize("extra, expected", [
    ("avx512f avx512bw avx512_bf16 avx512_vnni", True),
    ("amx_tile amx_bf16 amx_int8", True),
    ("avx512f avx512bw avx512_vnni", False),  # AVX-512 without bfloat16
    ("", False),
    ("avx512_bf16x", False),  # a flag is a whole word
])
def test_cpu_has_bf16_reads_the_flags(demo, tmp_path, extra, expected):
    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO.format(extra=extra))
    assert demo.cpu_has_bf16(str(path)) is expected


def test_cpu_has_bf16_is_false_without_cpuinfo(demo, tmp_path):
    assert demo.cpu_has_bf16(str(tmp_path / "missing")) is False
    (tmp_path / "noflags").write_text("processor\t: 0\n")
    assert demo.cpu_has_bf16(str(tmp_path / "noflags")) is False


def test_the_demos_overrides_load_into_its_preset(demo):
    from tf_transformer.config import load_config

    cfg = load_config("multi30k_small", [*demo.DEMO_OVERRIDES, *demo.BF16_OVERRIDES])
    assert cfg.train.mixed_precision == "mixed_bfloat16" and cfg.data.tokens_per_batch == 2048
