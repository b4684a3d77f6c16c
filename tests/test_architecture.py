"""The package's layering (pyproject.toml's [tool.importlinter] contracts, run by lint-imports)
and its packaging list; each contract is also shown to fail on code that breaks it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(package_root: Path) -> subprocess.CompletedProcess:
    """Run the repository's contracts over the ``tf_transformer`` found in ``package_root``."""
    env = dict(os.environ, PYTHONPATH=str(package_root))
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", str(REPO / "pyproject.toml")], cwd=package_root,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def copy_package(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    shutil.copytree(REPO / "tf_transformer", root / "tf_transformer", ignore=shutil.ignore_patterns("__pycache__"))
    return root / "tf_transformer"


def test_the_contracts_are_kept():
    out = lint_imports(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 kept, 0 broken" in out.stdout


def test_layers_contract_fails_on_the_old_upward_import(tmp_path):
    """The import that made layers -> training -> model -> layers a cycle (LayerNorm's fast
    path imported from training/), put back into a copy of the package, breaks the contract."""
    pkg = copy_package(tmp_path)
    shutil.copyfile(pkg / "ops" / "layer_norm.py", pkg / "training" / "kernels.py")
    norm = pkg / "layers" / "normalization.py"
    text = norm.read_text()
    assert "from tf_transformer.ops.layer_norm import layer_norm_last_axis" in text
    norm.write_text(text.replace("from tf_transformer.ops.layer_norm import",
                                 "from tf_transformer.training.kernels import"))
    out = lint_imports(pkg.parent)
    assert out.returncode != 0
    assert "BROKEN" in out.stdout
    assert "tf_transformer.layers.normalization -> tf_transformer.training.kernels" in out.stdout


def test_keras_ops_only_contract_fails_on_a_tensorflow_import(tmp_path):
    pkg = copy_package(tmp_path)
    encoder = pkg / "layers" / "encoder.py"
    encoder.write_text(encoder.read_text().replace("import keras\n", "import keras\nimport tensorflow  # noqa\n", 1))
    out = lint_imports(pkg.parent)
    assert out.returncode != 0
    assert "tf_transformer.layers.encoder -> tensorflow" in out.stdout


def test_cli_is_the_top_layer_and_errors_the_bottom():
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "layers")["layers"]
    order = [name.strip() for layer in layers for name in layer.replace(":", "|").split("|")]
    assert order[0] == "cli" and order[-1] == "errors"
    expected = [m for m in ("cli", "tuning", "training", "decoding", "data", "io", "model", "layers", "ops", "config")
                if m in order]
    assert sorted(expected, key=order.index) == expected


def test_packaging_lists_every_package_and_maps_the_shipped_directories():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "tf_transformer").rglob("__init__.py")}
    listed = set(setuptools["packages"])
    assert {p for p in listed if "._shipped." not in p} == on_disk
    from tf_transformer.resources import SHIPPED

    mapped = setuptools["package-dir"]
    assert {k.rsplit(".", 1)[1]: v for k, v in mapped.items()} == SHIPPED
    for directory in mapped.values():
        assert (REPO / directory).is_dir() and not (REPO / directory).is_symlink()


def test_shipped_directories_are_found_in_a_wheel_layout_first(tmp_path, monkeypatch):
    from tf_transformer import resources

    monkeypatch.setattr(resources, "_PACKAGE", tmp_path / "site" / "tf_transformer")
    assert resources.shipped_dir("configs") is None
    (tmp_path / "site" / "tf_transformer" / "_shipped" / "configs").mkdir(parents=True)
    assert resources.shipped_dir("configs") == tmp_path / "site" / "tf_transformer" / "_shipped" / "configs"
    message = resources.missing_message("multi30k", "the bundled Multi30k files")
    assert str(tmp_path / "site" / "tf_transformer" / "_shipped" / "multi30k") in message
    with pytest.raises(KeyError):
        resources.candidates("nope")


@pytest.mark.parametrize("argv", [["--help"], ["train", "--help"], ["translate", "--help"]])
def test_help_answers_without_tensorflow(argv):
    code = ("import sys\nfrom tf_transformer.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print('tensorflow loaded:', 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         cwd=REPO)
    assert "usage: tft" in out.stdout, out.stdout + out.stderr
    assert out.stdout.strip().endswith("tensorflow loaded: False")


@pytest.fixture(scope="module")
def compiled_files(tmp_path_factory):
    """A Transformer compiled as the README does (``make_optimizer``, the smoothed loss, token
    accuracy) and a ``TrainingModel``, each fitted for a step and saved to ``.keras``: such files
    name the schedule, ``FusedAdam``, the loss, the metrics and the wrapper besides the layers."""
    import keras
    import numpy as np

    from tf_transformer.model import Transformer
    from tf_transformer.training import LabelSmoothedCrossEntropy, TokenAccuracy, TrainingModel, make_optimizer

    root = tmp_path_factory.mktemp("compiled")
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(4, 60, (4, 6)), rng.integers(4, 60, (4, 5))
    data = ((src, tgt[:, :-1]), tgt[:, 1:])
    small = dict(vocab_size=60, d_model=16, num_layers=1, num_heads=2, d_ff=32)
    model = Transformer(**small)
    model.compile(optimizer=make_optimizer(d_model=16, warmup_steps=10), loss=LabelSmoothedCrossEntropy(0.1),
                  metrics=[TokenAccuracy()])
    model.fit(*data, epochs=1, verbose=0)
    model.save(root / "compiled.keras")
    trainer = TrainingModel(Transformer(**small), label_smoothing=0.2)
    trainer.build()
    trainer.compile(optimizer=make_optimizer(d_model=16, warmup_steps=10))
    trainer.fit(*data, epochs=1, verbose=0)
    trainer.save(root / "trainer.keras")
    keras.backend.clear_session()
    return root / "compiled.keras", root / "trainer.keras"


@pytest.mark.parametrize("first_import", [
    "import tf_transformer.layers",
    "from tf_transformer.layers.encoder import EncoderLayer",
    "from tf_transformer.layers.linear import linear",
    "import tf_transformer.model",
    "import tf_transformer\nimport keras",
    "from tf_transformer.training.losses import TokenAccuracy",
    "from tf_transformer.training import make_optimizer",
    "import tf_transformer.training.trainer",
    # a probe for Keras before its import (TensorFlow's own import makes one) must not use up the hook
    "import tf_transformer\nimport importlib.util\nassert importlib.util.find_spec('keras')",
    "import tf_transformer\nimport tensorflow",
])
def test_any_first_import_works_and_registers_the_model_with_keras(first_import, compiled_files):
    """Each import order in a fresh interpreter (Keras not yet loaded): the package's hook runs when
    ``import keras`` finishes (not when something only looks Keras up), possibly inside a half-built
    module of ours; the import must succeed and
    ``.keras`` files of the model, of a compiled model and of the training wrapper must then load with
    plain ``keras.saving.load_model``."""
    compiled, trainer = compiled_files
    code = (f"{first_import}\nimport keras\n"
            "model = keras.saving.load_model('tests/data/transformer-0.1.0.keras', compile=False)\n"
            "print('loaded', type(model).__module__, type(model).__name__)\n"
            f"model = keras.saving.load_model({str(compiled)!r})\n"
            "print('compiled', type(model.optimizer).__name__, type(model.loss).__name__)\n"
            f"print('wrapper', type(keras.saving.load_model({str(trainer)!r})).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-3:] == [
        "loaded tf_transformer.model Transformer", "compiled FusedAdam LabelSmoothedCrossEntropy",
        "wrapper TrainingModel"], out.stdout + out.stderr[-3000:]
