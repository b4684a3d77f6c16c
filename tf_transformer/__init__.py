"""tf-transformer: the Transformer of "Attention Is All You Need" for Keras 3 / TensorFlow.

Layers and the model are written with ``keras.ops`` only, so ``import tf_transformer.model``
does not need TensorFlow; the data pipeline, training, decoding and serving code do.

Importing the package makes ``.keras`` files of our models loadable with plain
``keras.saving.load_model``: the classes such a file names (``tf_transformer>Transformer``,
the layers) are registered with Keras as soon as Keras itself is imported (at once when it
already is). Importing the package alone does not import Keras (``tft --help`` stays fast).
"""

import sys

__version__ = "0.1.0"

__all__ = ["__version__"]


def _register_with_keras() -> None:
    import tf_transformer.model  # noqa: F401  (its import registers Transformer and every layer)


class _RegisterAfterKeras:
    """A ``sys.meta_path`` finder that runs :func:`_register_with_keras` right after ``import keras``
    has finished, once (a plain class: ``importlib.abc`` alone would cost ``tft --help`` 15 ms)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "keras":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _register_with_keras()

        loader.exec_module = exec_module
        return spec


if "keras" in sys.modules:
    _register_with_keras()
elif not any(isinstance(f, _RegisterAfterKeras) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterKeras())
