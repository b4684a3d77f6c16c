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
    # the demo's model: 2+2 layers, 8 heads of 32 (d_model 256 split eight ways)
    assert (cfg.model.num_layers, cfg.model.num_heads) == (2, 8)
    assert cfg.model.key_dim is None and cfg.model.d_model // cfg.model.num_heads == 32  # key_dim derived


def test_the_demo_lifts_the_presets_update_limit(demo):
    """On a fast CPU the preset's 2,000 updates came before the 12 minutes were up; the demo's
    budget is its time, so its own limit must be far beyond what 12 minutes can reach."""
    from tf_transformer.config import load_config

    preset = load_config("multi30k_small")
    cfg = load_config("multi30k_small", list(demo.DEMO_OVERRIDES))
    assert cfg.train.train_steps >= 20 * preset.train.train_steps
    # the learning-rate schedule is the preset's: lifting the limit changes no update before it
    assert (cfg.train.warmup_steps, cfg.train.learning_rate_scale) == (
        preset.train.warmup_steps, preset.train.learning_rate_scale)


def test_choose_on_val_takes_the_highest_val_score_first_on_ties(demo):
    scores = {("averaged", 0.6): 30.1, ("averaged", 1.0): 31.4, ("averaged", 1.4): 31.0,
              ("final", 0.6): 29.0, ("final", 1.0): 31.4, ("final", 1.4): 30.2}
    assert demo.choose_on_val(scores) == ("averaged", 1.0)  # tie with final at 1.0: the first wins
    scores[("final", 1.4)] = 31.5
    assert demo.choose_on_val(scores) == ("final", 1.4)


@pytest.mark.parametrize("text, expected", [
    ("0.6,1.0,1.4", [0.6, 1.0, 1.4]), ("1", [1.0]), (" 0.6, 1.0 ,", [0.6, 1.0]), ("0.6,0.6,1", [0.6, 1.0]),
])
def test_parse_alphas(demo, text, expected):
    assert demo.parse_alphas(text) == expected


@pytest.mark.parametrize("text", ["", "0.6,x", "-1", ",,"])
def test_parse_alphas_rejects_bad_lists_with_the_value(demo, text):
    from tf_transformer.errors import UserError

    with pytest.raises(UserError, match="--alphas"):
        demo.parse_alphas(text)


def test_a_bad_alphas_list_fails_before_any_work(demo, tmp_path, capsys):
    model_dir = tmp_path / "demo"
    assert demo.main(["--model-dir", str(model_dir), "--alphas", "0.6,abc"]) == 2
    assert "--alphas '0.6,abc'" in capsys.readouterr().err
    assert not model_dir.exists()
