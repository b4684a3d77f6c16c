"""tf-transformer: the Transformer of "Attention Is All You Need" for Keras 3 / TensorFlow.

Layers and the model are written with ``keras.ops`` only, so ``import tf_transformer.model``
does not need TensorFlow; the data pipeline, training, decoding and serving code do.

Importing the package makes ``.keras`` files of our models loadable with plain
``keras.saving.load_model``: the classes such a file names (``tf_transformer>Transformer``,
the layers, and what a compiled model's file also names: the schedule, ``FusedAdam``, the
loss and metrics; under the TensorFlow backend ``TrainingModel`` too) are registered with
Keras as soon as Keras itself is imported (at once when it already is). Importing the package
alone does not import Keras (``tft --help`` stays fast).
"""

import sys

__version__ = "0.1.0"

__all__ = ["__version__"]


_loading = 0  # how many of the package's modules are being executed (nested imports)
_registration_deferred = False


def _register_with_keras() -> None:
    global _registration_deferred
    if _loading:
        # ``import keras`` came from one of our modules that is still half-built (the first of
        # them to load imports Keras); the registering imports below may need its names, so they
        # wait until the outermost of our modules being imported has finished (see
        # ``_RegisterAfterKeras``).
        _registration_deferred = True
        return
    _registration_deferred = False
    import keras

    import tf_transformer.model  # noqa: F401  (its import registers Transformer and every layer)

    # A model saved after ``compile`` names its optimizer, schedule, loss and metrics too;
    # these modules need Keras only.
    import tf_transformer.training.losses  # noqa: F401
    import tf_transformer.training.schedule  # noqa: F401

    if keras.backend.backend() == "tensorflow":  # the training wrapper's step is TensorFlow code
        import tf_transformer.training.trainer  # noqa: F401


class _RegisterAfterKeras:
    """A ``sys.meta_path`` finder that runs :func:`_register_with_keras` right after ``import keras``
    has finished, once (a plain class: ``importlib.abc`` alone would cost ``tft --help`` 15 ms).

    Until then it also watches the imports of the package's own modules: when Keras is first
    imported from inside one of them, the registration runs once the outermost of them has
    finished loading instead.

    A spec found for ``keras`` is not yet an import: ``importlib.util.find_spec("keras")`` only
    asks where Keras is (TensorFlow's ``import tensorflow`` does so before it imports Keras), and
    the import that follows finds the spec again. So the finder stays in ``sys.meta_path`` until
    Keras' module has actually been executed through a spec it patched."""

    def __init__(self):
        self._searching = False

    def find_spec(self, fullname, path=None, target=None):
        if self._searching or (fullname != "keras" and not fullname.startswith("tf_transformer.")):
            return None
        import importlib.util

        self._searching = True  # find the real spec without coming back here
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._searching = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        if fullname == "keras":
            def exec_module(module):
                run(module)
                if self in sys.meta_path:
                    sys.meta_path.remove(self)
                _register_with_keras()
        else:
            def exec_module(module):
                global _loading
                _loading += 1
                try:
                    run(module)
                finally:
                    _loading -= 1
                if _registration_deferred and not _loading:
                    _register_with_keras()

        loader.exec_module = exec_module
        return spec


if "keras" in sys.modules:
    _register_with_keras()
elif not any(isinstance(f, _RegisterAfterKeras) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterAfterKeras())
