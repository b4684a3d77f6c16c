"""tf-transformer: the Transformer of "Attention Is All You Need" for Keras 3 / TensorFlow.

Layers and the model are written with ``keras.ops`` only, so ``import tf_transformer.model``
does not need TensorFlow; the data pipeline, training, decoding and serving code do.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
