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


_LAYERS = "tf_transformer.layers"
_layers_loading = False  # True while the layers package's modules are being executed
_registration_deferred = False


def _register_with_keras() -> None:
    global _registration_deferred
    if _layers_loading:
        # ``import keras`` came from a layer module that is still half-built (the first of them to
        # load imports Keras); the model module imports those layers, so it waits for the end of
        # the layers package (see ``_RegisterAfterKeras``).
        _registration_deferred = True
        return
    _registration_deferred = False
    import tf_transformer.model  # noqa: F401  (its import registers Transformer and every layer)


class _RegisterAfterKeras:
    """A ``sys.meta_path`` finder that runs :func:`_register_with_keras` right after ``import keras``
    has finished, once (a plain class: ``importlib.abc`` alone would cost ``tft --help`` 15 ms).

    It also watches the import of the layers package: when Keras is first imported from inside it,
    the registration runs once the package has finished loading instead."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in ("keras", _LAYERS):
            return None
        import importlib.util

        sys.meta_path.remove(self)  # find the real spec without coming back here
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            if fullname == _LAYERS:
                sys.meta_path.insert(0, self)  # still waiting for ``import keras``
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        if fullname == "keras":
            def exec_module(module):
                run(module)
                _register_with_keras()
        else:
            def exec_module(module):
                global _layers_loading
                _layers_loading = True
                try:
                    run(module)
                finally:
                    _layers_loading = False
                if _registration_deferred:
                    _register_with_keras()

        loader.exec_module = exec_module
        return spec


if "keras" in sys.modules:
    _register_with_keras()
elif not any(isinstance(f, _RegisterAfterKeras) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterKeras())
