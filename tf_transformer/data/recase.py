"""Recasing: the case of a lowercased translation, learned from the cased training text.

A model trained with ``data.lowercase: true`` writes lowercase only. A :class:`Recaser`
gives its outputs back their case with statistics of the cased target side of the training
data (the role of the Moses recaser in phrase-based pipelines), so that such a model can be
read, and scored with cased metrics, like any other:

* every word (a maximal run of letters) takes its most frequent written form in the training
  text away from the sentence start (``mann`` -> ``Mann``, ``usa`` -> ``USA``);
* where the form after a given word differs from that and holds in at least ``min_count``
  training occurrences, it wins after that word (German ``das essen`` -> ``das Essen`` beside
  ``sie essen``);
* the first word of a sentence is capitalised when most training sentences start with a
  capital;
* a word never seen takes the case of its longest known ending of at least ``min_head``
  letters (German compounds take the case of their last part: ``straßenmusiker`` ->
  ``Straßenmusiker``), else stays lowercase.

Everything that is not a letter (spaces, digits, punctuation) is kept as it is. Lowercasing
and recasing the bundled Multi30k German val / test2016 references gives sacreBLEU 96.4 /
96.2 against the originals (``tests/test_data_recase.py`` holds a bound on it).

A vocabulary built with ``data.lowercase`` carries its recaser inside the SentencePiece model
file, in a field of the range the model format leaves to third-party extensions
(:func:`attach`, :func:`attached`); SentencePiece and ``tensorflow_text`` ignore it, so the
pieces and ids are those of the model without it. :class:`~tf_transformer.data.tokenizer.Tokenizer`
reads it back and recases what it decodes, in Python (:meth:`Recaser.recase`) and in graphs
(:meth:`Recaser.tf_recase`, the same strings: tested on every line of the bundled corpus).
"""

from __future__ import annotations

import json
import zlib
from collections import Counter, defaultdict
from typing import Iterable

__all__ = ["FIELD", "Recaser", "RecaserFitter", "attach", "attached"]

#: field number of the recaser in a SentencePiece ``ModelProto`` (``extensions 200 to max``)
FIELD = 20240
_FORMAT = "tf-transformer recaser"


def _spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each word: a maximal run of letters (``str.isalpha``: Unicode
    categories Lu Ll Lt Lm Lo, RE2's ``\\p{L}``)."""
    spans, start = [], None
    for i, c in enumerate(text):
        if c.isalpha():
            if start is None:
                start = i
        elif start is not None:
            spans.append((start, i))
            start = None
    if start is not None:
        spans.append((start, len(text)))
    return spans


def _title(word: str) -> str:
    return word[:1].upper() + word[1:]


def _capitalised(word: str) -> bool:
    return word[:1] != word[:1].lower()


def _commonest(forms: Counter) -> tuple[str, int]:
    """The most frequent form and its count; ties go to the form that sorts first, so the same
    text gives the same recaser."""
    return min(forms.items(), key=lambda form_count: (-form_count[1], form_count[0]))


def _tf_title(words):
    """:func:`_title` of each string of ``words`` (``tf.string``), in a graph."""
    import tensorflow as tf

    length = tf.strings.length(words, unit="UTF8_CHAR")
    rest = tf.strings.substr(words, tf.ones_like(length), length, unit="UTF8_CHAR")
    first = tf.strings.substr(words, 0, 1, unit="UTF8_CHAR")
    return tf.strings.join([tf.strings.upper(first, encoding="utf-8"), rest])


class Recaser:
    """Restores the case of lowercased text; see the module docstring for the rules.

    Build one with :meth:`fit` on cased text; :meth:`to_bytes` / :meth:`from_bytes` store it.
    """

    def __init__(self, words: dict, after: dict, capitalize_first: bool, min_head: int = 4,
                 min_count: int = 2):
        self.words = dict(words)  # lowercase word -> its form (every word seen)
        self.after = dict(after)  # "previous<TAB>word" -> its form there, where not words[word]
        self.capitalize_first = bool(capitalize_first)
        self.min_head = int(min_head)
        self.min_count = int(min_count)

    # -- building ---------------------------------------------------------------------
    @classmethod
    def fit(cls, texts: Iterable[str], *, min_count: int = 2, min_head: int = 4) -> "Recaser":
        """The recaser of the cased ``texts`` (one sentence each)."""
        fitter = RecaserFitter(min_count=min_count, min_head=min_head)
        for text in texts:
            fitter.add(text)
        return fitter.result()

    # -- Python side ------------------------------------------------------------------
    def _known_or_head(self, lower: str) -> str:
        form = self.words.get(lower)
        if form is not None:
            return form
        for k in range(1, len(lower) - self.min_head + 1):  # longest known ending first
            head = self.words.get(lower[k:])
            if head is not None:
                return _title(lower) if _capitalised(head) else lower
        return lower

    def recase(self, text: str) -> str:
        """``text`` with the case its words most often have in the training text (the case
        ``text`` has is ignored: cased text comes back recased)."""
        out, last, previous = [], 0, None
        for start, end in _spans(text):
            lower = text[start:end].lower()  # (a model of a lowercasing vocabulary writes no capitals)
            form = None if previous is None else self.after.get(f"{previous}\t{lower}")
            if form is None:
                form = self._known_or_head(lower)
            if previous is None and self.capitalize_first:
                form = _title(form)
            out += [text[last:start], form]
            last, previous = end, lower
        out.append(text[last:])
        return "".join(out)

    def __call__(self, texts: Iterable[str]) -> list[str]:
        return [self.recase(t) for t in texts]

    # -- storage ----------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        blob = {"format": _FORMAT, "version": 1, "capitalize_first": self.capitalize_first,
                "min_head": self.min_head, "min_count": self.min_count,
                "words": self.words, "after": self.after}
        return zlib.compress(json.dumps(blob, ensure_ascii=False, sort_keys=True).encode("utf-8"), 9)

    @classmethod
    def from_bytes(cls, data: bytes) -> "Recaser":
        try:
            blob = json.loads(zlib.decompress(data).decode("utf-8"))
        except (zlib.error, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"not a stored recaser: {e}") from None
        if not isinstance(blob, dict) or blob.get("format") != _FORMAT or blob.get("version") != 1:
            raise ValueError(f"not a stored recaser (format {blob.get('format')!r}, version "
                             f"{blob.get('version')!r}; expected {_FORMAT!r} 1)"
                             if isinstance(blob, dict) else "not a stored recaser")
        return cls(blob["words"], blob["after"], blob["capitalize_first"], blob["min_head"], blob["min_count"])

    def __eq__(self, other) -> bool:
        return isinstance(other, Recaser) and self.to_bytes() == other.to_bytes()

    def __repr__(self) -> str:
        return (f"Recaser({len(self.words):,} words, {len(self.after):,} context forms, "
                f"capitalize_first={self.capitalize_first})")

    # -- graph side -------------------------------------------------------------------
    def tf_recase(self, texts):
        """``tf.string [N]`` -> ``tf.string [N]``: :meth:`recase` inside a graph (lookup tables
        built once, in the init scope, so that exported signatures carry them)."""
        import tensorflow as tf
        import tensorflow_text as tf_text

        tables = self.tf_tables()
        texts = tf.convert_to_tensor(texts, tf.string)
        # words and what lies between them, in order: letter runs and non-letter runs alternate
        pieces = tf_text.regex_split(texts, r"\p{L}+", keep_delim_regex_pattern=r"\p{L}+")
        flat = pieces.flat_values
        is_word = tf.strings.regex_full_match(flat, r"\p{L}+")
        # the previous word of each word, "" for a sentence's first: number the words of each row
        row = pieces.value_rowids()
        words = tf.strings.lower(tf.boolean_mask(flat, is_word), encoding="utf-8")
        word_rows = tf.boolean_mask(row, is_word)
        # (shifted by one: the row and the text of the word before; [:-1] keeps empty inputs empty)
        first = word_rows != tf.concat([[-1], word_rows], axis=0)[:-1]
        previous = tf.where(first, "", tf.concat([[""], words], axis=0)[:-1])
        known = tables["words"].lookup(words)
        in_context = tables["after"].lookup(tf.strings.join([previous, words], separator="\t"))
        form = tf.where(known != "", known, self._tf_heads(words, tables))
        form = tf.where(first, form, tf.where(in_context != "", in_context, form))
        if self.capitalize_first:
            form = tf.where(first, _tf_title(form), form)
        flat = tf.tensor_scatter_nd_update(flat, tf.where(is_word), form)
        return tf.strings.reduce_join(pieces.with_flat_values(flat), axis=-1)

    def _tf_heads(self, words, tables):
        """Each word title-cased where its longest known ending of ``min_head`` letters or more
        is capitalised, else unchanged (``words`` not found in the table)."""
        import tensorflow as tf

        length = tf.strings.length(words, unit="UTF8_CHAR")
        decided = tf.zeros_like(length, tf.bool)
        upper = tf.zeros_like(length, tf.bool)
        longest = max((len(w) for w in self.words), default=0)
        for size in range(longest, self.min_head - 1, -1):  # longest known ending first
            start = length - size  # the ending leaves at least one letter before it
            head = tf.strings.substr(words, tf.maximum(start, 0), tf.fill(tf.shape(words), size),
                                     unit="UTF8_CHAR")
            found = tables["heads"].lookup(head)  # 1: capitalised, 0: not, -1: unknown
            take = ~decided & (start >= 1) & (found >= 0)
            upper = tf.where(take, found == 1, upper)
            decided |= take
        return tf.where(upper, _tf_title(words), words)

    def tf_tables(self) -> dict:
        """The lookup tables :meth:`tf_recase` reads (``tf.lookup.StaticHashTable``), created
        once; a ``tf.Module`` that exports a signature recasing text must hold them."""
        tables = getattr(self, "_tables", None)
        if tables is None:
            import tensorflow as tf

            def table(mapping, default, dtype):
                keys = list(mapping)
                init = tf.lookup.KeyValueTensorInitializer(
                    tf.constant(keys or [""], tf.string),
                    tf.constant([mapping[k] for k in keys] or [default], dtype))
                return tf.lookup.StaticHashTable(init, default_value=default)

            with tf.init_scope():
                tables = {
                    "words": table(self.words, "", tf.string),
                    "after": table(self.after, "", tf.string),
                    "heads": table({w: int(_capitalised(f)) for w, f in self.words.items()}, -1, tf.int32),
                }
            self._tables = tables
        return tables


class RecaserFitter:
    """Counts written forms sentence by sentence (:meth:`add`); :meth:`result` is the
    :class:`Recaser` of everything added (for callers that stream the text once)."""

    def __init__(self, *, min_count: int = 2, min_head: int = 4):
        self.min_count, self.min_head = int(min_count), int(min_head)
        self._forms = defaultdict(Counter)  # lowercase word -> written forms away from the start
        self._pairs = defaultdict(Counter)  # (previous lowercase word, lowercase word) -> forms
        self._sentences = self._first_upper = 0

    def add(self, text: str) -> None:
        previous = None
        for start, end in _spans(text):
            word = text[start:end]
            lower = word.lower()
            if previous is None:
                self._sentences += 1
                self._first_upper += _capitalised(word)
            else:
                self._forms[lower][word] += 1
                self._pairs[(previous, lower)][word] += 1
            previous = lower

    def result(self) -> Recaser:
        words = {w: _commonest(c)[0] for w, c in self._forms.items()}
        after = {}
        for (previous, lower), c in self._pairs.items():
            form, n = _commonest(c)
            if form != words[lower] and n >= self.min_count:
                after[f"{previous}\t{lower}"] = form
        return Recaser(words, after, capitalize_first=2 * self._first_upper > self._sentences,
                       min_head=self.min_head, min_count=self.min_count)


# -- inside a SentencePiece model file ---------------------------------------------------
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated protobuf varint")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(proto: bytes):
    """``(number, start, end, payload)`` of each top-level field of a serialised message."""
    pos = 0
    while pos < len(proto):
        start = pos
        tag, pos = _read_varint(proto, pos)
        number, wire = tag >> 3, tag & 7
        payload = None
        if wire == 0:
            _, pos = _read_varint(proto, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _read_varint(proto, pos)
            payload = proto[pos:pos + size]
            pos += size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if pos > len(proto):
            raise ValueError("truncated protobuf field")
        yield number, start, pos, payload


def attach(proto: bytes, recaser: Recaser) -> bytes:
    """The serialised SentencePiece model ``proto`` carrying ``recaser`` (any earlier one replaced)."""
    kept = b"".join(proto[s:e] for n, s, e, _ in _fields(proto) if n != FIELD)
    data = recaser.to_bytes()
    return kept + _varint(FIELD << 3 | 2) + _varint(len(data)) + data


def attached(proto: bytes) -> Recaser | None:
    """The recaser a serialised SentencePiece model carries, or ``None``."""
    found = None
    for number, _, _, payload in _fields(proto):
        if number == FIELD and payload is not None:
            found = payload
    return None if found is None else Recaser.from_bytes(found)
