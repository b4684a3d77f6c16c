"""``x @ kernel`` over the last axis of a tensor of any rank, as one 2-D matmul.

``keras.ops.matmul`` of a ``[batch, length, d_in]`` tensor and a ``[d_in, d_out]`` kernel
becomes ``tf.tensordot`` on the TensorFlow backend, which, with the batch and length known
only at run time, builds about twenty shape ops (shape, gathers, products, a transpose,
concatenations) around the one ``MatMul`` it needs. A Transformer's projections are almost
all of its matmuls, so those ops were most of the nodes of the decoding graph: each is
traced, optimised and instantiated when a ``tft translate`` process starts, and the ones
inside the decoding loop run at every step. :func:`linear` reshapes to ``[rows, d_in]``,
multiplies, and reshapes back: the same ``MatMul`` on the same operands (so the same
numbers) with two reshapes and at most one shape op around it (:func:`leading_shape`).
"""

from __future__ import annotations

from keras import ops


def leading_shape(x, axes=None):
    """The sizes of ``x``'s leading axes as a reshape target: the first ``axes`` of them
    (default: all but the last), or the axes listed when ``axes`` is a tuple. Static sizes are
    ints. When exactly one size is known only at run time it is ``-1`` (the reshape infers it,
    also when it is 0), so a ``[batch, 1, d]`` decoding step needs no shape op at all; when
    several are, they are scalar tensors read from one shape op (a ``-1`` could not be
    inferred from an empty tensor: an empty replica batch of ``MirroredStrategy``)."""
    if axes is None:
        axes = len(x.shape) - 1
    axes = tuple(range(axes)) if isinstance(axes, int) else tuple(axes)
    sizes = [x.shape[a] for a in axes]
    unknown = [i for i, size in enumerate(sizes) if size is None]
    if len(unknown) == 1:
        sizes[unknown[0]] = -1
    elif unknown:
        dynamic = ops.shape(x)
        for i in unknown:
            sizes[i] = dynamic[axes[i]]
    return tuple(sizes)


def linear(x, kernel, bias=None, lead=None):
    """``x [..., d_in] @ kernel [d_in, d_out] (+ bias [d_out])`` -> ``[..., d_out]``, in
    ``x``'s dtype.

    ``lead``: the output's leading sizes (default: :func:`leading_shape` of ``x``; a 2-D
    ``x`` stays 2-D), or ``"rows"`` to return the 2-D product ``[rows, d_out]`` for a caller
    that reshapes it itself (one reshape instead of two).

    Example:
        >>> import numpy as np
        >>> x, w = np.ones((2, 3, 4), "float32"), np.ones((4, 5), "float32")
        >>> tuple(linear(x, w).shape)
        (2, 3, 5)
    """
    x = ops.convert_to_tensor(x)
    if isinstance(lead, str) and lead != "rows":
        raise ValueError(f"lead={lead!r}: expected a shape tuple, None or 'rows'")
    if lead is None and len(x.shape) > 2:
        lead = leading_shape(x)
    rows = x if len(x.shape) == 2 else ops.reshape(x, (-1, x.shape[-1]))
    y = ops.matmul(rows, ops.cast(kernel, x.dtype))
    if bias is not None:
        y = y + ops.cast(bias, x.dtype)
    if lead is None or isinstance(lead, str):
        return y
    return ops.reshape(y, (*lead, y.shape[-1]))
