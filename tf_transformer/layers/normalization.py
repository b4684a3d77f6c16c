"""Layer normalization with a closed-form gradient under TensorFlow (paper 3.1:
``LayerNorm(x + Sublayer(x))`` after every sublayer).

:class:`LayerNorm` *is* ``keras.layers.LayerNormalization`` (same weights ``gamma``/``beta``,
same config, same values): models saved with either load into the other. Under the
TensorFlow backend, for the usual case (normalize over the last axis, with scale and
offset), it computes in float32 (as Keras does for half-precision inputs) through
:func:`tf_transformer.ops.layer_norm.layer_norm_last_axis`, whose gradient is written out
instead of TensorFlow differentiating ``moments``/``rsqrt`` op by op. That module is imported
on the first such call only, so this one needs nothing but Keras. Every other backend and
configuration uses Keras' own ``call``.
"""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="tf_transformer")
class LayerNorm(keras.layers.LayerNormalization):
    """``keras.layers.LayerNormalization`` with a fused closed-form gradient under TensorFlow.

    Example:
        >>> import numpy as np
        >>> norm = LayerNorm(epsilon=1e-6)
        >>> y = norm(np.array([[1.0, 2.0, 3.0, 6.0]], "float32"))
        >>> [round(float(v), 3) for v in keras.ops.convert_to_numpy(y)[0]]
        [-1.069, -0.535, 0.0, 1.604]
    """

    def _fast_path(self) -> bool:
        axis = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        return (keras.backend.backend() == "tensorflow" and self.center and self.scale
                and not self.rms_scaling and len(axis) == 1 and axis[0] in (-1, self._rank - 1))

    def build(self, input_shape):
        self._rank = len(input_shape)
        super().build(input_shape)

    def call(self, inputs):
        if not self._fast_path():
            return super().call(inputs)
        from tf_transformer.ops.layer_norm import layer_norm_last_axis  # TensorFlow only

        outputs = layer_norm_last_axis(inputs, self.gamma, self.beta, self.epsilon)
        return keras.ops.cast(outputs, self.compute_dtype)
