"""TensorFlow kernels with written-out gradients for the training hot path.

* :mod:`~tf_transformer.ops.layer_norm`: layer normalization over the last axis.
* :mod:`~tf_transformer.ops.loss`: label-smoothed token statistics, alone and fused with the
  tied pre-softmax projection.
* :mod:`~tf_transformer.ops.smoothing`: the smoothed target's constants (plain Python).

Each computes the same values as the ``keras.ops`` code that calls it on other backends and
is tested against it. These modules depend on TensorFlow only: the layers, which are
``keras.ops`` only, import them lazily and only when the backend is TensorFlow.
"""
