"""train.mixed_precision: auto chooses bfloat16 only where the hardware multiplies it natively."""

import keras
import pytest

from tf_transformer.config import load_config
from tf_transformer.errors import ConfigError
from tf_transformer.training import precision
from tf_transformer.training.precision import cpu_flags, cpu_has_native_bf16, cpu_model_name, resolve_mixed_precision

AMD_BF16 = "fpu vme sse2 avx2 fma avx512f avx512bw avx512_vnni avx512_bf16 vaes"
INTEL_AMX = "fpu sse2 avx2 avx512f amx_bf16 amx_tile amx_int8"
AVX2_ONLY = "fpu vme sse2 avx2 fma"


def _cpuinfo(tmp_path, flags):
    path = tmp_path / f"cpuinfo-{abs(hash(flags))}"
    path.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\n"
                    f"flags\t\t: {flags}\n")
    return str(path)


def test_cpu_flags_reads_the_first_flags_line(tmp_path):
    assert cpu_flags(_cpuinfo(tmp_path, AVX2_ONLY)) == frozenset(AVX2_ONLY.split())
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()
    (tmp_path / "noflags").write_text("processor\t: 0\n")
    assert cpu_flags(str(tmp_path / "noflags")) == frozenset()


def test_cpu_model_name_reads_the_first_model_name_line(tmp_path):
    assert cpu_model_name(_cpuinfo(tmp_path, AVX2_ONLY)) == "Some CPU"
    assert cpu_model_name(str(tmp_path / "missing")) == ""
    (tmp_path / "noname").write_text("processor\t: 0\nflags\t\t: avx2\n")
    assert cpu_model_name(str(tmp_path / "noname")) == ""


@pytest.mark.parametrize("flags, expected", [(AMD_BF16, True), (INTEL_AMX, True), (AVX2_ONLY, False),
                                             ("avx512_bf16x avx512f", False)])
def test_native_bf16_needs_one_of_the_two_flags(tmp_path, flags, expected):
    assert cpu_has_native_bf16(_cpuinfo(tmp_path, flags)) is expected


@pytest.mark.parametrize("value, policy", [(None, None), ("float32", None), ("mixed_float16", "mixed_float16"),
                                           ("mixed_bfloat16", "mixed_bfloat16")])
def test_explicit_values_are_used_as_given(tmp_path, value, policy):
    # whatever the hardware: neither the GPUs nor the CPU flags are looked at
    assert resolve_mixed_precision(value, gpus=[(7, 0)], cpuinfo=_cpuinfo(tmp_path, AVX2_ONLY))[0] == policy
    assert resolve_mixed_precision(value, gpus=[], cpuinfo=_cpuinfo(tmp_path, AMD_BF16))[0] == policy


@pytest.mark.parametrize("gpus, policy", [([(8, 0)], "mixed_bfloat16"), ([(9, 0), (8, 6)], "mixed_bfloat16"),
                                          ([(7, 5)], None), ([(9, 0), (7, 0)], None), ([(9, 0), None], None)])
def test_auto_on_gpus_follows_the_weakest_capability(tmp_path, gpus, policy):
    # the CPU's flags do not matter once GPUs train
    for flags in (AMD_BF16, AVX2_ONLY):
        got, why = resolve_mixed_precision("auto", gpus=gpus, cpuinfo=_cpuinfo(tmp_path, flags))
        assert got == policy and why.startswith("auto: ")


@pytest.mark.parametrize("flags, policy", [(AMD_BF16, "mixed_bfloat16"), (INTEL_AMX, "mixed_bfloat16"),
                                           (AVX2_ONLY, None)])
def test_auto_on_the_cpu_follows_its_flags(tmp_path, flags, policy):
    got, why = resolve_mixed_precision("auto", gpus=[], cpuinfo=_cpuinfo(tmp_path, flags))
    assert got == policy
    assert ("natively" in why) == (policy is not None)


def test_auto_is_a_valid_setting_and_others_are_named_in_the_error():
    assert load_config("multi30k_small", ["train.mixed_precision=auto"]).train.mixed_precision == "auto"
    with pytest.raises(ConfigError, match=r"train\.mixed_precision='bf16'.*'auto'"):
        load_config("multi30k_small", ["train.mixed_precision=bf16"])


@pytest.mark.parametrize("native", [True, False])
def test_the_training_model_is_built_under_the_resolved_policy(monkeypatch, native):
    from tf_transformer.training.trainer import build_training_model

    monkeypatch.setattr(precision, "_gpu_capabilities", lambda: [])
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda cpuinfo="": native)
    cfg = load_config("multi30k_small", ["train.mixed_precision=auto", "model.num_layers=1", "model.d_model=32",
                                         "model.num_heads=2", "model.d_ff=64", "model.vocab_size=64",
                                         "data.vocab_size=64"])
    before = keras.config.dtype_policy().name
    trainer = build_training_model(cfg)
    assert trainer.transformer.dtype_policy.name == ("mixed_bfloat16" if native else "float32")
    assert all(v.dtype == "float32" for v in trainer.transformer.trainable_variables)
    assert keras.config.dtype_policy().name == before  # the global policy is restored


def test_model_keras_of_a_mixed_precision_run_decodes_in_float32(tmp_path, monkeypatch):
    """``train.mixed_precision: auto`` on a bf16 CPU trains in mixed_bfloat16 and says so; the
    saved model.keras computes in float32 with exactly the trained (float32) weights."""
    import numpy as np
    from helpers.synthetic import dataset_fn, task_batches, tiny_config

    from tf_transformer.io import load_model
    from tf_transformer.training import train

    monkeypatch.setattr(precision, "_gpu_capabilities", lambda: [])
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda cpuinfo="": True)
    lines = []
    batches = task_batches(2, 8, 16, "reverse", max_len=6)
    cfg = tiny_config(16, str(tmp_path / "run"), train_steps=3, steps_per_epoch=3, mixed_precision="auto")
    result = train(cfg, train_data=dataset_fn(batches), valid_data=False, verbose=0, log=lines.append)
    assert result.model.dtype_policy.name == "mixed_bfloat16"  # what trained
    assert any(line.startswith("train: mixed_bfloat16 (auto: this CPU multiplies bfloat16 natively")
               for line in lines), lines
    loaded = load_model(result.model_path)
    assert loaded.dtype_policy.name == "float32"
    assert all(layer.dtype_policy.name == "float32" for layer in loaded._flatten_layers())
    for saved, trained in zip(loaded.get_weights(), result.model.get_weights()):
        np.testing.assert_array_equal(saved, trained)
    (src, tin), _ = batches[0]
    logits = keras.ops.convert_to_numpy(loaded((src, tin)))
    assert logits.dtype == np.float32
    # bf16 compute differs from float32 compute of the same weights by bf16 rounding only
    np.testing.assert_allclose(logits, keras.ops.convert_to_numpy(result.model((src, tin))), atol=0.1)


def test_float32_copy_keeps_a_float32_model_as_it_is():
    from tf_transformer.model import Transformer
    from tf_transformer.training.loop import float32_copy

    model = Transformer(vocab_size=16, d_model=16, num_layers=1, num_heads=2, d_ff=32)
    model.build()
    assert float32_copy(model) is model


class _Overflow(keras.callbacks.Callback):
    """Sets the loss scale to ``2**power`` before update ``at``, once: float16 gradients then
    overflow and dynamic loss scaling skips updates while it halves the scale back."""

    def __init__(self, at: int, power: int):
        super().__init__()
        self.at, self.power, self.done, self.batches = at, power, False, 0

    def on_train_batch_begin(self, batch, logs=None):
        if not self.done and int(self.model.optimizer.iterations.numpy()) == self.at:
            self.model.optimizer.dynamic_scale.assign(2.0 ** self.power)
            self.done = True

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1


def test_updates_skipped_by_float16_loss_scaling_still_count(tmp_path):
    """Under ``mixed_float16`` an update skipped for overflowing gradients counts as an update:
    a run of N updates consumes N batches and ends at update N, and a run stopped and resumed
    across the skipped updates ends with the same weights as a straight run."""
    import numpy as np
    from helpers.synthetic import dataset_fn, task_batches, tiny_config

    from tf_transformer.training import train

    batches = task_batches(12, 8, 16, "reverse", max_len=6)

    def run(model_dir, steps):
        cfg = tiny_config(16, str(model_dir), train_steps=steps, steps_per_epoch=3, mixed_precision="mixed_float16",
                          backup_every_steps=3)
        overflow = _Overflow(at=2, power=28)
        result = train(cfg, train_data=dataset_fn(batches), valid_data=False, verbose=0, callbacks=(overflow,),
                       log=lambda line: None)
        return result, overflow

    straight, overflow = run(tmp_path / "straight", 12)
    optimizer = straight.training_model.optimizer
    assert type(optimizer).__name__ == "CountingLossScaleOptimizer"
    assert overflow.done and float(optimizer.dynamic_scale.numpy()) < 2.0 ** 27  # updates were skipped
    assert straight.final_step == int(optimizer.iterations.numpy()) == overflow.batches == 12
    run(tmp_path / "split", 6)
    resumed, _ = run(tmp_path / "split", 12)
    assert resumed.start_step == 6 and resumed.final_step == 12
    for a, b in zip(straight.model.get_weights(), resumed.model.get_weights()):
        np.testing.assert_array_equal(a, b)
