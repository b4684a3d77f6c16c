"""The shared SentencePiece vocabulary: training it (``tft build-vocab``) and using it.

One subword model serves both languages, as in the paper (a shared BPE vocabulary of
about 37,000 tokens for WMT14 En-De; 8,000 for the bundled Multi30k). Its ids are fixed:

====  ==========  =======================================================
 id    piece       role
====  ==========  =======================================================
 0     ``<pad>``   padding; never produced by the tokenizer; carries no loss
 1     ``<unk>``   characters outside the vocabulary (and replaced bytes)
 2     ``<s>``     BOS: first token of every decoder input
 3     ``</s>``    EOS: last token of every label sequence
====  ==========  =======================================================

Ids 0, 2 and 3 are SentencePiece *control* symbols: tokenizing text never yields them
and detokenizing drops them. :class:`Tokenizer` refuses a model with other ids.

A vocabulary built with ``data.case_markup: true`` holds the case markers ``▁⇧`` and ``▁⇪``
at ids 4 and 5 (user-defined symbols); a :class:`Tokenizer` of such a vocabulary marks the
case of the text before SentencePiece sees it and restores it after decoding
(:mod:`tf_transformer.data.case_markup`), in Python and in the graph alike, so every user of
the tokenizer (training, evaluation, ``tft translate``, exported signatures) reads and
writes cased text.

A vocabulary built with ``data.lowercase: true`` was trained on lowercased text and says so
in its normalizer's name (``nmt_nfkc+lowercase``; SentencePiece itself ignores the name and
normalises with the NFKC table it stores). A :class:`Tokenizer` of such a vocabulary
lowercases every text before SentencePiece sees it (``str.lower`` in Python,
``tf.strings.lower(..., encoding="utf-8")`` in the graph, between NUL bytes, where TensorFlow's
would stop: :func:`~tf_transformer.data.case_markup.tf_lower`; the same full Unicode mapping, so
``ẞ`` and ``ß`` stay ``ß``, unlike case folding's ``ss``), so the model reads and writes
lowercase only. Such a vocabulary also carries a recaser fitted on the cased target side of
the training data (:mod:`tf_transformer.data.recase`, stored in the model file where
SentencePiece ignores it): :meth:`Tokenizer.decode` and :meth:`Tokenizer.detokenize` give
the decoded text its case back, so translations read (and score) as cased text.

Training is deterministic: the trainer runs on one thread over the sentences in file
order with its own sampling and shuffling switched off; when the corpus holds more than
``data.vocab_input_sentence_size`` sentences, we pick the sample ourselves with
``data.seed``. The model is serialised from memory (no output path inside it), so the
same inputs, settings and seed give a byte-identical ``.model`` file wherever it is
written.

Two ways to use the model:

* in the graph (``tf.data``, exported signatures): :meth:`Tokenizer.tokenize` /
  :meth:`Tokenizer.detokenize`, built on ``tensorflow_text.SentencepieceTokenizer``;
* in Python (evaluation, tests): :meth:`Tokenizer.encode` / :meth:`Tokenizer.decode`
  with the ``sentencepiece`` library. Both give the same ids.
"""

from __future__ import annotations

import io
import itertools
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tf_transformer.errors import DataError, UserError
from tf_transformer.io import atomic_write, check_writable, say

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
#: appended to the normalizer name of a vocabulary built with ``data.lowercase: true``
LOWERCASE_MARK = "+lowercase"
PAD_PIECE, UNK_PIECE, BOS_PIECE, EOS_PIECE = "<pad>", "<unk>", "<s>", "</s>"


def _keras_session():
    """An object that ``keras.backend.clear_session()`` replaces (Keras' global state tracker), or
    ``None`` where Keras is not loaded or keeps it elsewhere."""
    import sys

    if "keras" not in sys.modules:
        return None
    try:
        from keras.src.backend.common import global_state
    except ImportError:
        return None
    return getattr(global_state, "GLOBAL_STATE_TRACKER", None)


class Tokenizer:
    """A SentencePiece model with the ids above, usable in Python and in TF graphs.

    Args:
        model: path of a ``.model`` file, or the serialised model proto (``bytes``).

    Example::

        tok = Tokenizer("runs/multi30k_small/spm.model")
        ids = tok.encode(["A dog runs."])           # [[...]]: list of int lists (Python)
        tok.decode([ids[0] + [tok.eos_id, 0]])      # ["A dog runs."]
        tok.tokenize(tf.constant(["A dog runs."]))  # the same ids, tf.RaggedTensor int32
    """

    def __init__(self, model: str | os.PathLike | bytes):
        import sentencepiece as spm

        if isinstance(model, (bytes, bytearray)):
            self.model_path: str | None = None
            proto = bytes(model)
            where = "<model bytes>"
        else:
            self.model_path = str(model)
            where = self.model_path
            try:
                with open(model, "rb") as f:
                    proto = f.read()
            except FileNotFoundError:
                raise DataError(
                    f"SentencePiece model {where} does not exist; build one with "
                    "`tft build-vocab --config CONFIG --output PREFIX` and set data.vocab_model"
                ) from None
            except OSError as e:
                raise DataError(f"cannot read SentencePiece model {where}: {e}") from None
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(proto)
        except Exception as e:  # noqa: BLE001  (sentencepiece raises RuntimeError/OSError variants)
            raise DataError(f"{where} is not a SentencePiece model: {e}") from None
        expected = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
        actual = {
            "pad": self._sp.pad_id(),
            "unk": self._sp.unk_id(),
            "bos": self._sp.bos_id(),
            "eos": self._sp.eos_id(),
        }
        if actual != expected:
            raise DataError(
                f"{where}: special ids are {actual}, expected {expected}; "
                "rebuild the vocabulary with `tft build-vocab`"
            )
        self.model_proto: bytes = proto
        self._tf_tokenizer = None
        self._tf_session = None  # the Keras session the graph tokenizer was made in
        from tf_transformer.data.case_markup import PIECES

        # a case-markup vocabulary: its markers are the pieces right after the special ids
        marker_ids = range(len(expected), len(expected) + len(PIECES))
        self.case_markup: bool = self.vocab_size > marker_ids[-1] and tuple(self.id_to_piece(marker_ids)) == PIECES
        self.lowercase: bool = normalizer_name(proto).endswith(LOWERCASE_MARK)
        #: the recaser of a lowercasing vocabulary (None: outputs stay as decoded)
        self.recaser = None
        if self.lowercase:
            from tf_transformer.data.recase import attached

            try:
                self.recaser = attached(proto)
            except ValueError as e:
                raise DataError(f"{where}: its recaser cannot be read ({e}); rebuild the vocabulary "
                                "with `tft build-vocab`") from None

    # -- ids -------------------------------------------------------------------------
    pad_id = PAD_ID
    unk_id = UNK_ID
    bos_id = BOS_ID
    eos_id = EOS_ID

    @property
    def vocab_size(self) -> int:
        return int(self._sp.get_piece_size())

    def __repr__(self) -> str:
        where = self.model_path or "<bytes>"
        markup = ", case_markup=True" if self.case_markup else ""
        markup += ", lowercase=True" if self.lowercase else ""
        markup += ", recased" if self.recaser is not None else ""
        return f"Tokenizer({where!r}, vocab_size={self.vocab_size}{markup})"

    @classmethod
    def from_config(cls, data_config) -> Tokenizer:
        """The tokenizer named by ``data.vocab_model`` (with a clear error when unset)."""
        if not data_config.vocab_model:
            raise DataError(
                "data.vocab_model is not set: build a vocabulary with `tft build-vocab --config "
                "CONFIG --output runs/NAME/spm` and set data.vocab_model=runs/NAME/spm.model"
            )
        return cls(data_config.vocab_model)

    # -- Python side -----------------------------------------------------------------
    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Subword ids of each text, without BOS/EOS."""
        if isinstance(texts, str):
            raise TypeError("Tokenizer.encode takes a list of strings, got one string")
        return [list(ids) for ids in self._sp.encode(self._marked(texts), out_type=int)]

    def _marked(self, texts) -> list[str]:
        """``texts`` as SentencePiece is given them: lowercased or case-marked where the
        vocabulary says so."""
        if self.lowercase:
            return [t.lower() for t in texts]
        if not self.case_markup:
            return list(texts)
        from tf_transformer.data.case_markup import mark

        return [mark(t) for t in texts]

    def decode(self, ids: Iterable[Sequence[int]]) -> list[str]:
        """Text of each id sequence. Ids after the first EOS are ignored; pad/BOS dropped; the
        case restored where the vocabulary uses case markup or carries a recaser."""
        out = []
        for seq in ids:
            seq = [int(i) for i in seq]
            if EOS_ID in seq:
                seq = seq[: seq.index(EOS_ID)]
            out.append(self._sp.decode([i for i in seq if i not in (PAD_ID, BOS_ID)]))
        if self.case_markup:
            from tf_transformer.data.case_markup import unmark

            out = [unmark(t) for t in out]
        if self.recaser is not None:
            out = self.recaser(out)
        return out

    def id_to_piece(self, ids: Sequence[int]) -> list[str]:
        """Subword strings of ids (``"▁dog"``), e.g. to label attention plots."""
        return [self._sp.id_to_piece(int(i)) for i in ids]

    def pieces(self, text: str) -> list[str]:
        """Subword strings of one text (lowercased, or with its case markers, where the
        vocabulary says so)."""
        return list(self._sp.encode(self._marked([text])[0], out_type=str))

    # -- graph side ------------------------------------------------------------------
    @property
    def tf_tokenizer(self):
        """The underlying ``tensorflow_text.SentencepieceTokenizer`` (int32 ids).

        Made again after ``keras.backend.clear_session()`` (Keras Tuner calls it before every
        trial): that clears TensorFlow's kernel cache, which holds the SentencePiece resource,
        and a dataset made afterwards with the old one fails with ``NotFoundError``."""
        session = _keras_session()
        if self._tf_tokenizer is None or session is not self._tf_session:
            import tensorflow as tf
            import tensorflow_text as tf_text

            with tf.init_scope():  # created eagerly even when first used inside a graph
                self._tf_tokenizer = tf_text.SentencepieceTokenizer(
                    model=self.model_proto, out_type=tf.int32
                )
            self._tf_session = session
        return self._tf_tokenizer

    def tokenize(self, texts):
        """``tf.string [N]`` -> ``tf.RaggedTensor int32 [N, None]`` (no BOS/EOS), in-graph."""
        if self.lowercase:
            from tf_transformer.data.case_markup import tf_lower

            texts = tf_lower(texts)
        if self.case_markup:
            from tf_transformer.data.case_markup import tf_mark

            texts = tf_mark(texts)
        return self.tf_tokenizer.tokenize(texts)

    def detokenize(self, ids):
        """int ids ``[N, T]`` (dense, 0-padded, or ragged) -> ``tf.string [N]``, in-graph.

        Like :meth:`decode`: ids after the first EOS are ignored, pad and BOS dropped, the
        case restored (case markup, recaser).
        """
        import tensorflow as tf

        if not isinstance(ids, tf.RaggedTensor):
            ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(ids))
        ids = tf.cast(ids, tf.int32)
        after_eos = tf.cast(tf.math.cumsum(tf.cast(ids == EOS_ID, tf.int32), axis=1), tf.bool)
        keep = tf.logical_not(after_eos) & (ids != PAD_ID) & (ids != BOS_ID)
        texts = self.tf_tokenizer.detokenize(tf.ragged.boolean_mask(ids, keep))
        if self.case_markup:
            from tf_transformer.data.case_markup import tf_unmark

            texts = tf_unmark(texts)
        if self.recaser is not None:
            texts = self.recaser.tf_recase(texts)
        return texts


def _parsed(proto: bytes):
    """A serialised SentencePiece model as its protobuf message."""
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    return model


def normalizer_name(proto: bytes) -> str:
    """The normalizer name recorded in a serialised SentencePiece model (``nmt_nfkc``, ...)."""
    return _parsed(proto).normalizer_spec.name


def mark_lowercase(proto: bytes) -> bytes:
    """``proto`` with :data:`LOWERCASE_MARK` appended to its normalizer's name: the record
    that it was trained on lowercased text, read back by :class:`Tokenizer`. The name is
    informational for SentencePiece (it normalises with the table stored beside it), so the
    model's pieces and ids are unchanged."""
    model = _parsed(proto)
    if not model.normalizer_spec.name.endswith(LOWERCASE_MARK):
        model.normalizer_spec.name += LOWERCASE_MARK
    return model.SerializeToString()


# ---------------------------------------------------------------------------------------
# Training the vocabulary
# ---------------------------------------------------------------------------------------


def train_sentencepiece(
    sentences: Iterator[str],
    vocab_size: int,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    user_defined_symbols: Sequence[str] = (),
) -> bytes:
    """Train a SentencePiece model on ``sentences`` (in this order) and return its proto.

    Deterministic: one thread, no sampling or shuffling inside the trainer.
    ``user_defined_symbols`` take the ids after the four special ones, in this order.
    """
    import sentencepiece as spm

    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences,
            model_writer=writer,
            model_type=model_type,
            vocab_size=vocab_size,
            character_coverage=character_coverage,
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece=PAD_PIECE,
            unk_piece=UNK_PIECE,
            bos_piece=BOS_PIECE,
            eos_piece=EOS_PIECE,
            user_defined_symbols=list(user_defined_symbols),
            num_threads=1,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            minloglevel=2,
        )
    except RuntimeError as e:
        text = str(e)
        if "Vocabulary size" in text:
            raise DataError(
                f"data.vocab_size={vocab_size} does not fit this corpus: {text.strip()}"
            ) from None
        raise DataError(f"SentencePiece training failed: {text.strip()}") from None
    return writer.getvalue()


def vocab_lines(model_proto: bytes) -> list[str]:
    """``piece<TAB>score`` lines, the ``.vocab`` file format of SentencePiece."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(model_proto)
    return [f"{sp.id_to_piece(i)}\t{sp.get_score(i) + 0.0:g}" for i in range(sp.get_piece_size())]


def build_vocab(
    data_config,
    output: str | os.PathLike,
    vocab_size: int | None = None,
    overwrite: bool = False,
    progress=None,
) -> dict:
    """Train the shared vocabulary on the training split (both languages) of
    ``data_config`` and write ``<output>.model`` and ``<output>.vocab``.

    ``output`` is a prefix; a trailing ``.model`` is removed. An existing model with
    different contents is not replaced unless ``overwrite``. ``progress`` is a callable
    taking a message (default: print to stderr). Returns a summary dict (paths, sizes,
    sentence counts, seconds, ``summary`` = the one-line text).
    """
    from tf_transformer.data import sources

    progress = progress or say
    cfg = data_config
    vocab_size = int(vocab_size or cfg.vocab_size)
    prefix = str(output)
    prefix = prefix.removesuffix(".model")
    if prefix.endswith(("/", os.sep)) or Path(prefix).is_dir() or not Path(prefix).name:
        raise UserError(f"{output}: a folder; the vocabulary takes a file prefix, e.g. {Path(prefix) / 'spm'} (writes "
                        "spm.model and spm.vocab)")
    model_path, vocab_path = Path(prefix + ".model"), Path(prefix + ".vocab")
    check_writable(model_path.parent)  # before the work, not after it

    start = time.time()
    described, count = sources.training_sentences_count(cfg)
    if not count:
        raise DataError(f"{described}: no sentences to build a vocabulary from")
    limit = cfg.vocab_input_sentence_size
    selected = None
    if limit and count > limit:
        import numpy as np

        rng = np.random.default_rng(cfg.seed)
        selected = np.sort(rng.choice(count, size=limit, replace=False))
        progress(
            f"build-vocab: sampling {limit:,} of {count:,} sentences from {described} "
            f"(data.vocab_input_sentence_size, seed {cfg.seed})"
        )
    else:
        progress(f"build-vocab: reading {count:,} sentences from {described}")

    used = [0]
    case_markup = bool(getattr(cfg, "case_markup", False))
    lowercase = bool(getattr(cfg, "lowercase", False))
    from tf_transformer.data.case_markup import PIECES, mark
    from tf_transformer.data.recase import RecaserFitter

    # a lowercasing vocabulary carries a recaser of the (cased) target side: the second half
    # of the sentences read, sources first
    recaser = RecaserFitter() if lowercase else None
    chosen = None if selected is None else selected.tolist()

    def sentences():
        indices = itertools.count() if chosen is None else chosen
        for index, text in zip(indices, sources.iter_training_sentences(cfg, chosen)):
            text = text.strip()
            if text:
                used[0] += 1
                if recaser is not None and 2 * index >= count:
                    recaser.add(text)
                yield text.lower() if lowercase else mark(text) if case_markup else text

    progress(
        f"build-vocab: training SentencePiece {cfg.vocab_model_type.upper()} with {vocab_size:,} "
        "pieces (one thread)"
    )
    try:
        proto = train_sentencepiece(
            sentences(), vocab_size, cfg.vocab_model_type, cfg.vocab_character_coverage,
            user_defined_symbols=PIECES if case_markup else (),
        )
    except DataError:
        if not used[0]:
            raise DataError(f"{described}: all {count:,} lines are blank; no sentences to build a vocabulary "
                            "from") from None
        raise
    if lowercase:
        from tf_transformer.data.recase import attach

        recaser = recaser.result()
        proto = attach(mark_lowercase(proto), recaser)
    if model_path.exists() and not overwrite and model_path.read_bytes() != proto:
        raise DataError(
            f"{model_path} exists and holds a different model; write the new one elsewhere or "
            "replace it (overwrite=True); models trained with the old one need it"
        )
    atomic_write(model_path, proto)
    atomic_write(vocab_path, "\n".join(vocab_lines(proto)) + "\n")
    seconds = time.time() - start
    summary = (
        f"wrote {model_path} and {vocab_path}: {cfg.vocab_model_type.upper()} vocabulary of "
        f"{vocab_size:,} pieces (pad={PAD_ID} unk={UNK_ID} bos={BOS_ID} eos={EOS_ID}"
        f"{', case markers ' + ' '.join(PIECES) + ' = 4 5' if case_markup else ''}"
        f"{f', lowercased text, recaser of {len(recaser.words):,} target words' if lowercase else ''}) from "
        f"{used[0]:,} sentences of {described} in {seconds:.1f} s"
    )
    return {
        "model": str(model_path),
        "vocab": str(vocab_path),
        "vocab_size": vocab_size,
        "sentences": used[0],
        "case_markup": case_markup,
        "lowercase": lowercase,
        "seconds": seconds,
        "summary": summary,
    }


def resolve_vocabulary(cfg, default_path, *, tokenizer=None, build_missing: bool = True, log=None,
                       who: str = "train"):
    """The tokenizer of a run, with ``cfg`` (a ``Config``, modified) made to agree with it.

    Without ``tokenizer`` it loads ``data.vocab_model`` (default ``default_path``), building
    the vocabulary there first when the file does not exist (``build_missing=False``: an
    error instead), and sets ``data.vocab_model`` to the file read. Then ``model.vocab_size``
    is set to the vocabulary's size (a different value in the config, e.g. a preset's, is
    replaced, with a note to ``log``). ``log`` gets one-line messages prefixed with ``who``.
    """

    log = log or say
    if tokenizer is None:
        if cfg.data.source == "prepared" and cfg.data.prepared_dir:
            from tf_transformer.data.prepared import read_manifest

            read_manifest(cfg.data.prepared_dir)  # a folder prepare wrote, or an error naming it
            if not cfg.data.vocab_model:
                cfg.data.vocab_model = str(Path(cfg.data.prepared_dir).expanduser() / "vocab.model")  # its own
        path = Path(cfg.data.vocab_model) if cfg.data.vocab_model else Path(default_path)
        if not path.is_file():
            if not build_missing:
                raise UserError(f"vocabulary {path} does not exist; build it before starting the "
                                "workers (tft build-vocab) so that all of them read the same one")
            log(f"{who}: vocabulary {path} does not exist: building it (data.vocab_size="
                f"{cfg.data.vocab_size}) with tft build-vocab's code")
            build_vocab(cfg.data, path, progress=log)
        cfg.data.vocab_model = str(path)
        tokenizer = Tokenizer(path)
    # settings the vocabulary was built with: the config must say the same
    markup = bool(getattr(cfg.data, "case_markup", False))
    lowercase = bool(getattr(cfg.data, "lowercase", False))
    for setting, wanted, has, how in (
        ("case_markup", markup, tokenizer.case_markup,
         f"{'without' if markup else 'with'} case markup (its pieces 4 and 5 are {'not ' if markup else ''}the "
         "case markers)"),
        ("lowercase", lowercase, tokenizer.lowercase,
         f"{'on cased' if lowercase else 'on lowercased'} text (its normalizer is named "
         f"{normalizer_name(tokenizer.model_proto)!r})"),
    ):
        if wanted != has:
            where = cfg.data.vocab_model or "the given tokenizer"
            raise UserError(
                f"data.{setting}={str(wanted).lower()} but the vocabulary {where} "
                f"was built {how}; build a vocabulary with the same setting (tft build-vocab --set "
                f"data.{setting}=...) or change the setting")
    size = int(tokenizer.vocab_size)
    if cfg.model.vocab_size is not None and cfg.model.vocab_size != size:
        # the model must have one row per piece: the vocabulary the user built decides
        log(f"{who}: model.vocab_size={cfg.model.vocab_size} of the config replaced by {size}, the size of the "
            f"vocabulary {cfg.data.vocab_model}")
    cfg.model.vocab_size = size
    return tokenizer

