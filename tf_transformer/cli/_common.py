"""What the command modules share: rewording library errors in terms of the flags."""

from __future__ import annotations

import contextlib
from typing import Iterator, Mapping

from tf_transformer.errors import UserError


def reword(error: UserError, words: Mapping[str, str]) -> UserError:
    """``error`` (same class) with the library word of ``words`` it starts with replaced by
    that word's flag (the library names the argument an error is about first)."""
    text = str(error)
    for word, flag in words.items():
        if text.startswith(word):
            return type(error)(flag + text[len(word):])
    return error


@contextlib.contextmanager
def flags(words: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a :class:`UserError` of the block with :func:`reword`'s ``words``, e.g.
    ``flags({"model ": "--model "})``: the library says "model PATH: no such file", the
    command line "--model PATH: no such file"."""
    try:
        yield
    except UserError as e:
        raise reword(e, words) from None
