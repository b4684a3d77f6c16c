"""Config loading and validation: every error names the field."""

import re

import pytest

from tf_transformer.config import ConfigError, list_presets, load_config


def test_every_preset_loads_and_validates():
    names = list_presets()
    assert {"base", "big", "multi30k_small"} <= set(names)
    assert len([n for n in names if n.startswith("table3/")]) == 18
    for name in names:
        load_config(name).validate(require_vocab=True)


def test_base_and_big_match_the_paper():
    base, big = load_config("base"), load_config("big")
    m = base.model.resolved()
    assert (m.num_layers, m.d_model, m.d_ff, m.num_heads, m.key_dim, m.value_dim, m.dropout) == \
        (6, 512, 2048, 8, 64, 64, 0.1)
    assert (base.train.train_steps, base.train.warmup_steps, base.train.label_smoothing) == (100000, 4000, 0.1)
    assert (base.train.adam_beta_1, base.train.adam_beta_2, base.train.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert (base.decode.beam_size, base.decode.alpha, base.decode.max_extra_length) == (4, 0.6, 50)
    assert base.decode.stop_rule == "bound"  # the paper's early stop; multi30k_tiny takes fairseq's
    assert load_config("multi30k_tiny").decode.stop_rule == "beam_finished"
    b = big.model.resolved()
    assert (b.d_model, b.d_ff, b.num_heads, b.key_dim, b.dropout) == (1024, 4096, 16, 64, 0.3)
    assert big.train.train_steps == 300000 and big.train.average_last == 20


def test_multi30k_tiny_fairseq_is_the_tiny_recipe_with_only_fairseqs_details():
    """The fairseq variant changes exactly the fields that differ between fairseq's Transformer
    and ours, and inherits everything else (model size, schedule, peak learning rate 0.005)."""
    import dataclasses

    overrides = ["model.attention_bias=true", "model.qkv_init_gain=0.7071067811865476",
                 "model.layer_norm_epsilon=1e-5", "model.ffn_init=fan_in_uniform", "train.adam_epsilon=1e-8",
                 "data.batching=source_sorted", "data.parallel_pipelines=1", "data.shuffle_buffer=29000"]
    variant = load_config("multi30k_tiny_fairseq")
    expected = load_config("multi30k_tiny", overrides)
    assert variant.name == "multi30k_tiny_fairseq"
    assert dataclasses.replace(variant, name=expected.name) == expected
    assert variant.model != load_config("multi30k_tiny").model  # the overrides are not defaults
    t, m = variant.train, variant.model
    assert t.learning_rate_scale * m.d_model ** -0.5 * t.warmup_steps ** -0.5 == pytest.approx(0.005)


def test_table3_rows_change_only_their_fields():
    a1 = load_config("table3/A1").model.resolved()
    assert (a1.num_heads, a1.key_dim, a1.value_dim) == (1, 512, 512)
    b1 = load_config("table3/B1").model.resolved()
    assert (b1.key_dim, b1.value_dim) == (16, 64)
    assert load_config("table3/E").model.position_encoding == "learned"
    assert load_config("table3/D3").train.label_smoothing == 0.0
    for name in list_presets():  # section 6.2: Table 3 used no checkpoint averaging
        if name.startswith("table3/"):
            assert load_config(name).train.average_last == 1, name


@pytest.mark.parametrize("override, message", [
    ("model.d_model=500", "model.d_model=500 is not divisible by model.num_heads=8"),
    ("model.dropout=-0.1", "model.dropout=-0.1 must be in [0, 1)"),
    ("decode.stop_rule=first", "decode.stop_rule='first' must be one of 'bound', 'beam_finished'"),
    ("model.num_layers=0", "model.num_layers=0 must be > 0"),
    ("model.position_encoding=rotary", "model.position_encoding='rotary'"),
    ("model.d_ff=abc", "model.d_ff='abc' must be an integer"),
    ("model.dmodel=3", "unknown field model.dmodel"),
    ("train.label_smoothing=1.5", "train.label_smoothing=1.5 must be in [0, 1)"),
    ("train.strategy=tpu", "train.strategy='tpu'"),
    ("decode.beam_size=0", "decode.beam_size=0 must be > 0"),
    ("data.source=csv", "data.source='csv'"),
    ("model.qkv_init_gain=0", "model.qkv_init_gain=0.0 must be > 0"),
    ("model.attention_bias=maybe", "model.attention_bias='maybe'"),
    ("model.attention_init=mimetic", "model.attention_init='mimetic' is not one of 'independent', 'tied_qk'"),
    ("model.ffn_init=he", "model.ffn_init='he' is not one of 'glorot_uniform', 'fan_in_uniform'"),
    ("train.seed=-1", "train.seed=-1 must be in [0, 2**32)"),
    ("train.seed=4294967296", "train.seed=4294967296 must be in [0, 2**32)"),
    ("data.seed=-3", "data.seed=-3 must be in [0, 2**32)"),
    ("train.validation_steps=0", "train.validation_steps=0 must be > 0 or null"),
])
def test_validation_errors_name_the_field(override, message):
    with pytest.raises(ConfigError) as e:
        load_config("base", [override])
    assert message in str(e.value)


def test_errors_blame_the_override_or_the_file_that_holds_the_mistake(tmp_path):
    # A bad --set names the override, not the preset it was applied to; a bad value in a
    # file names the file; a misspelt field gets the fields it may have meant.
    with pytest.raises(ConfigError) as e:
        load_config("multi30k_tiny", ["model.d_modl=3"])
    assert str(e.value).startswith("override 'model.d_modl=3': unknown field model.d_modl (did you mean ")
    assert "d_model" in str(e.value) and "multi30k_tiny.yaml" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config("multi30k_tiny", ["decode.alhpa=1"])
    assert "(did you mean alpha?)" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config("multi30k_tiny", ["model.d_model=abc"])
    assert str(e.value) == "override 'model.d_model=abc': model.d_model='abc' must be an integer"
    path = tmp_path / "bad.yaml"
    path.write_text("extends: multi30k_tiny\nmodel:\n  d_model: big\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: model.d_model='big' must be an integer"
    path.write_text("extends: multi30k_tiny\ntrain:\n  warmup_step: 10\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: unknown field train.warmup_step (did you mean warmup_steps?)")
    # a value that is fine alone but clashes with the file's others: both the file and the override named
    with pytest.raises(ConfigError) as e:
        load_config("multi30k_tiny", ["model.d_model=130", "train.seed=3"])
    assert "multi30k_tiny.yaml with overrides model.d_model=130 train.seed=3: model.d_model=130 is not divisible by " \
        "model.num_heads=4" in str(e.value)


def test_a_key_given_twice_is_an_error_naming_both_lines(tmp_path):
    """PyYAML keeps the later of two equal keys without a word: a second ``train:`` section
    silently dropped the first one's settings."""
    path = tmp_path / "twice.yaml"
    path.write_text("extends: multi30k_tiny\ntrain:\n  train_steps: 50\nmodel:\n  d_model: 64\n"
                    "train:\n  warmup_steps: 10\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path} line 6: 'train' is given twice in one mapping (first on line 2)")
    path.write_text("extends: multi30k_tiny\nmodel:\n  d_model: 64\n  num_heads: 4\n  d_model: 128\n")
    with pytest.raises(ConfigError, match=r"line 5: 'd_model' is given twice in one mapping \(first on line 3\)"):
        load_config(path)
    path.write_text("extends: multi30k_tiny\ntrain:\n  train_steps: 50\n  warmup_steps: 10\n")
    cfg = load_config(path)
    assert (cfg.train.train_steps, cfg.train.warmup_steps) == (50, 10)


def test_explicit_key_dim_allows_indivisible_d_model():
    cfg = load_config("base", ["model.d_model=500", "model.key_dim=50", "model.value_dim=50"])
    assert cfg.model.resolved().key_dim == 50


def test_exponent_notation_without_a_dot_is_a_number(tmp_path):
    # PyYAML (YAML 1.1) reads "1e-5" as a string; the config reads it as the number it is,
    # in overrides and in files alike, and still rejects text that is not a number.
    cfg = load_config("base", ["model.layer_norm_epsilon=1e-5", "train.adam_epsilon=1E-8",
                               "train.warmup_steps=4e3", "train.learning_rate_scale=+2.5e0"])
    assert cfg.model.layer_norm_epsilon == 1e-5 and isinstance(cfg.model.layer_norm_epsilon, float)
    assert cfg.train.adam_epsilon == 1e-8
    assert cfg.train.warmup_steps == 4000 and isinstance(cfg.train.warmup_steps, int)
    assert cfg.train.learning_rate_scale == 2.5
    path = tmp_path / "c.yaml"
    path.write_text("extends: base\ntrain:\n  adam_epsilon: 1e-9\n  label_smoothing: .1e0\n")
    cfg = load_config(path)
    assert (cfg.train.adam_epsilon, cfg.train.label_smoothing) == (1e-9, 0.1)
    # YAML 1.1's other surprise: "no" (Norwegian) is false there; here only true/false are booleans
    cfg = load_config("base", ["data.source_lang=en", "data.target_lang=no"])
    assert cfg.data.target_lang == "no"
    path.write_text("extends: base\ndata:\n  source_lang: no\n  target_lang: on\nmodel:\n  attention_bias: true\n")
    cfg = load_config(path)
    assert (cfg.data.source_lang, cfg.data.target_lang, cfg.model.attention_bias) == ("no", "on", True)
    for bad, message in [("model.attention_bias=yes", "model.attention_bias='yes' must be true or false"),
                         ("train.adam_epsilon=1e", "train.adam_epsilon='1e' must be a number"),
                         ("train.warmup_steps=4.5e0", "train.warmup_steps=4.5 must be an integer"),
                         ("train.adam_epsilon=e-5", "train.adam_epsilon='e-5' must be a number")]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config("base", [bad])


def test_missing_vocab_is_reported(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_model: 64\n  num_heads: 4\n")
    with pytest.raises(ConfigError, match="model.vocab_size is missing"):
        load_config(path, require_vocab=True)
    assert load_config(path).model.vocab_size is None


def test_extends_and_bad_files(tmp_path):
    (tmp_path / "parent.yaml").write_text("model:\n  vocab_size: 100\n  d_model: 64\n  num_heads: 4\n")
    (tmp_path / "child.yaml").write_text("extends: parent.yaml\nmodel:\n  num_layers: 2\n")
    cfg = load_config(tmp_path / "child.yaml")
    assert (cfg.model.vocab_size, cfg.model.d_model, cfg.model.num_layers) == (100, 64, 2)
    (tmp_path / "bad.yaml").write_text("model: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load_config(tmp_path / "bad.yaml")
    (tmp_path / "sec.yaml").write_text("modle:\n  d_model: 3\n")
    with pytest.raises(ConfigError, match="unknown section"):
        load_config(tmp_path / "sec.yaml")
    with pytest.raises(ConfigError, match="neither a file nor a preset"):
        load_config(tmp_path / "nope.yaml")
    (tmp_path / "cyc.yaml").write_text("extends: cyc.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "cyc.yaml")


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="the key must be section.field"):
        load_config("base", ["warmup=3"])
