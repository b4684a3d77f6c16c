"""Case markup: the vocabulary sees lowercase words, a marker token carries the case.

With ``data.case_markup: true`` every capitalised word of the text is written in lowercase
after a marker word, before SentencePiece sees it::

    "Ein Mann in einem USA-T-Shirt."  ->  "⇧ ein ⇧ mann in einem USA-T-Shirt."
    "A DOG runs."                     ->  "⇧ a ⇪ dog runs."

``⇧`` (U+21E7) says "the first letter of the next word is uppercase", ``⇪`` (U+21EA) "all
letters of the next word are uppercase" (words of two letters or more). A word whose case
is neither (``McDonald``, ``T-Shirt``) and every word that would not come back unchanged are
left as they are. The model then learns one set of subwords for ``Mann``/``mann`` and
``Ein``/``ein`` (sentence-initial words, German nouns), and predicts the case as a token of
its own; decoding removes the markers and restores the case, so what a user reads is cased
text (the scheme of OpenNMT Tokenizer's ``case_markup``, here as whole words before
SentencePiece so that the vocabulary holds the markers as two pieces, ``▁⇧`` and ``▁⇪``).

The Python functions (:func:`mark`, :func:`unmark`) define the scheme; the graph functions
(:func:`tf_mark`, :func:`tf_unmark`) give the same strings inside ``tf.data`` pipelines and
exported signatures (tested on every line of the bundled corpus). Words are split on
whitespace (Python's ``str.split()``: Unicode spaces too) and joined by one space, as
SentencePiece's own normalisation does.
"""

from __future__ import annotations

TITLE = "\u21e7"  # ⇧
UPPER = "\u21ea"  # ⇪
MARKERS = (TITLE, UPPER)
# the two pieces a case-markup vocabulary holds at ids 4 and 5 (user-defined symbols)
PIECES = ("\u2581" + TITLE, "\u2581" + UPPER)

# Python's str.split() whitespace (str.isspace), written for RE2: ASCII controls, U+0085 and
# Unicode separators (\pZ: spaces such as U+00A0, line and paragraph separators)
_TF_WHITESPACE = r"[\t\n\x0b\f\r\x1c-\x1f\x{85}\pZ]+"


def _words(text: str) -> list[str]:
    return text.split()


def _first_letter(word: str) -> int:
    for i, c in enumerate(word):
        if c.isalpha():
            return i
    return -1


def _title(word: str) -> str:
    i = _first_letter(word)
    return word if i < 0 else word[:i] + word[i].upper() + word[i + 1:]


def mark_word(word: str) -> list[str]:
    """``word`` as one or two words: ``[word]`` or ``[marker, lowercase word]``."""
    lower = word.lower()
    if lower == word or TITLE in word or UPPER in word:
        return [word]
    if sum(c.isalpha() for c in word) >= 2 and word.upper() == word and lower.upper() == word:
        return [UPPER, lower]
    i = _first_letter(word)
    if i >= 0:
        rest = word[:i] + word[i + 1:]
        if rest.lower() == rest and word[i].lower().upper() == word[i] and len(word[i].lower()) == 1:
            return [TITLE, word[:i] + word[i].lower() + word[i + 1:]]
    return [word]


def mark(text: str) -> str:
    """Text -> marked text (markers before capitalised words, those words lowercased)."""
    return " ".join(w for word in _words(text) for w in mark_word(word))


def unmark(text: str) -> str:
    """Marked text -> text: each marker applied to the word after it and removed; a marker
    with no word after it (a truncated output) is dropped."""
    out, pending = [], None
    for word in _words(text):
        if word in MARKERS:
            pending = word
            continue
        if pending == TITLE:
            word = _title(word)
        elif pending == UPPER:
            word = word.upper()
        out.append(word)
        pending = None
    return " ".join(out)


# -- the same in the graph ------------------------------------------------------------------
_LETTER, _NON_LETTER = r"\pL", r"\PL"


def _tf_pieces(words):
    """(prefix of non-letters, first letter, the rest) of each word; first == "" without letters."""
    import tensorflow as tf

    prefix = tf.strings.regex_replace(words, rf"^({_NON_LETTER}*).*$", r"\1")
    has_letter = tf.strings.regex_full_match(words, rf"{_NON_LETTER}*{_LETTER}.*")
    first = tf.where(has_letter, tf.strings.regex_replace(words, rf"^{_NON_LETTER}*({_LETTER}).*$", r"\1"), "")
    rest = tf.where(has_letter, tf.strings.regex_replace(words, rf"^{_NON_LETTER}*{_LETTER}", ""), "")
    return prefix, first, rest


def _split(texts):
    import tensorflow as tf

    texts = tf.strings.regex_replace(tf.convert_to_tensor(texts, tf.string), _TF_WHITESPACE, " ")
    return tf.strings.split(tf.strings.strip(texts), sep=" ")


def tf_lower(texts):
    """``str.lower`` in the graph (UTF-8 ``tf.string`` of any shape). TensorFlow's
    ``tf.strings.lower(..., encoding="utf-8")`` ends a string at its first NUL byte (``"A \\0
    B"`` -> ``"a "``), which ``str.lower`` keeps: the parts between NULs are cased apart and
    joined again."""
    return _tf_case(texts, "lower")


def tf_upper(texts):
    """``str.upper`` in the graph, NUL bytes kept as :func:`tf_lower` keeps them."""
    return _tf_case(texts, "upper")


def _tf_case(texts, which: str):
    import tensorflow as tf

    change = tf.strings.lower if which == "lower" else tf.strings.upper
    texts = tf.convert_to_tensor(texts, tf.string)
    shape = tf.shape(texts)  # any rank: cased as one flat list, then given its shape back
    parts = tf.strings.split(tf.reshape(texts, [-1]), sep="\0")  # (a tensor input: NUL is fine there)
    changed = change(parts.flat_values, encoding="utf-8")
    # each part but a text's last gets its NUL back (reduce_join's separator, an attribute, would
    # itself be cut at the NUL)
    rows = parts.value_rowids()
    last = tf.range(tf.size(changed, out_type=rows.dtype)) == tf.gather(parts.row_limits(), rows) - 1
    changed = tf.where(last, changed, changed + "\0")
    return tf.reshape(tf.strings.reduce_join(parts.with_flat_values(changed), axis=-1), shape)


def tf_mark(texts):
    """``tf.string [N]`` -> marked ``tf.string [N]``: :func:`mark` in the graph."""
    import tensorflow as tf

    words = _split(texts)
    w = words.flat_values
    lower = tf_lower(w)
    upper = tf_upper(w)
    n_letters = tf.strings.length(tf.strings.regex_replace(w, _NON_LETTER, ""), unit="UTF8_CHAR")
    has_marker = tf.strings.regex_full_match(w, f".*[{TITLE}{UPPER}].*")
    cased = (lower != w) & ~has_marker
    all_caps = cased & (n_letters >= 2) & (upper == w) & (tf_upper(lower) == w)
    prefix, first, rest = _tf_pieces(w)
    first_lower = tf_lower(first)
    tail = prefix + rest
    title = (cased & ~all_caps & (first != "") & (tf_lower(tail) == tail)
             & (tf_upper(first_lower) == first)
             & (tf.strings.length(first_lower, unit="UTF8_CHAR") == 1))
    marker = tf.where(all_caps, UPPER + " ", tf.where(title, TITLE + " ", ""))
    marked = marker + tf.where(all_caps | title, lower, w)
    return tf.strings.reduce_join(words.with_flat_values(marked), axis=-1, separator=" ")


def tf_unmark(texts):
    """Marked ``tf.string [N]`` -> ``tf.string [N]``: :func:`unmark` in the graph."""
    import tensorflow as tf

    words = _split(texts)
    w = words.flat_values
    # the word before each word, within its own text ("" before the first word of a text)
    previous = tf.concat([tf.fill(tf.stack([words.nrows(), 1]), ""), words[:, :-1]], axis=1).flat_values
    prefix, first, rest = _tf_pieces(w)
    titled = prefix + tf_upper(first) + rest
    restored = tf.where(previous == TITLE, titled, tf.where(previous == UPPER, tf_upper(w), w))
    is_marker = (w == TITLE) | (w == UPPER)
    kept = tf.ragged.boolean_mask(words.with_flat_values(restored), words.with_flat_values(~is_marker))
    return tf.strings.reduce_join(kept, axis=-1, separator=" ")
