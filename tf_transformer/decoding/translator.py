"""Python-side translation of many sentences: tokenize, sort by length, batch, decode with
one compiled graph, restore the input order, detokenize.

Rules for awkward input (also in ``tft translate --help``):

* An empty (or whitespace-only) line translates to an empty line; it is not decoded.
* A source longer than the model's limit (``model.max_length`` subword tokens) is cut to
  its first ``max_length`` tokens and counted in :attr:`TranslationStats.truncated`.
* Output may be up to ``source tokens + max_extra_length`` tokens, never more than
  ``model.max_length`` (see :mod:`tf_transformer.decoding.model_fns`).
* Invalid UTF-8 is the reader's business: :func:`read_lines` replaces bad bytes with
  U+FFFD and reports which lines had them.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence

from tf_transformer.decoding import batches
from tf_transformer.decoding.batches import TranslationStats
from tf_transformer.errors import UserError
from tf_transformer.io import load_model  # noqa: F401 (its home before tf_transformer.io)

__all__ = ["ProgressBar", "TranslationStats", "Translator", "load_model", "load_tokenizer", "read_lines",
           "set_cpu_threads", "translate"]


class ProgressBar:
    """A one-line progress bar on stderr for long jobs (``done/total``, rate, ETA).

    On a terminal it redraws in place; otherwise (a log file) it prints a line about
    every 10 %. Silent when ``total`` is below ``min_total`` or ``enabled`` is False.
    """

    def __init__(self, total: int, label: str, unit: str = "sentences", min_total: int = 200,
                 enabled: bool = True, stream=None):
        self.total = int(total)
        self.label = label
        self.unit = unit
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.total >= min_total
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = time.time()
        self.done = 0
        self._last_draw = 0.0
        self._last_decile = -1

    def update(self, n: int) -> None:
        self.done += int(n)
        if not self.enabled:
            return
        now = time.time()
        if self.tty:
            if now - self._last_draw >= 0.2 or self.done >= self.total:
                self._last_draw = now
                self.stream.write("\r" + self._text(now))
                self.stream.flush()
        else:
            decile = int(10 * self.done / max(self.total, 1))
            if decile != self._last_decile:
                self._last_decile = decile
                self.stream.write(self._text(now) + "\n")
                self.stream.flush()

    def _text(self, now: float) -> str:
        frac = self.done / max(self.total, 1)
        width = 24
        filled = round(width * frac)
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta_text = f"{eta:4.0f}s left" if eta != float("inf") else "  ?s left"
        return (f"{self.label}: [{'#' * filled}{'.' * (width - filled)}] {self.done:,}/{self.total:,} "
                f"{self.unit} ({100 * frac:3.0f}%) {rate:6.1f}/s {eta_text}")

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def read_lines(data: bytes, where: str = "<stdin>") -> tuple[list[str], list[int]]:
    """Split raw input into lines (``\\n``, with ``\\r\\n`` accepted) and decode each as
    UTF-8, replacing invalid bytes with U+FFFD. Returns ``(lines, bad_line_numbers)``
    (1-based numbers of the lines that had invalid bytes)."""
    if not data:
        return [], []
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    lines, bad = [], []
    for i, line in enumerate(raw, start=1):
        text, valid = decode_line(line)
        lines.append(text)
        if not valid:
            bad.append(i)
    return lines, bad


def decode_line(line: bytes) -> tuple[str, bool]:
    """One raw input line (its ``\n`` or ``\r\n`` ending dropped) as text, invalid UTF-8
    replaced with U+FFFD; and whether it was valid."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if line.endswith(b"\r"):
        line = line[:-1]
    try:
        return line.decode("utf-8"), True
    except UnicodeDecodeError:
        return line.decode("utf-8", errors="replace"), False


def set_cpu_threads(threads: int) -> None:
    """Give TensorFlow ``threads`` CPU threads for ops that run side by side (its inter-op
    pool) and one thread per op (its intra-op pool): the setting for decoding ``threads``
    batches at once, one thread each (:class:`Translator`'s ``workers``).

    TensorFlow's default splits every op over all cores (and runs ops side by side on as
    many). A decoding step is a chain of small ops, so the split buys little and costs much:
    idle pool threads spin while they wait, and each hand-over waits for a core. On the
    2-core machine of tools/bench/RESULTS.md one thread per op decodes faster than the
    default and spends 30-40% less CPU time; whole batches side by side are what keeps two
    cores busy. Must be called before TensorFlow runs its first op in the process; later, only
    the current setting is accepted.
    """
    import tensorflow as tf

    if threads < 1:
        raise UserError(f"threads={threads}: must be >= 1")
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        current = (tf.config.threading.get_intra_op_parallelism_threads(),
                   tf.config.threading.get_inter_op_parallelism_threads())
        raise UserError(f"threads={threads}: TensorFlow is already running in this process with intra-op and "
                        f"inter-op threads {current} (0 = its default); its threads can only be set before its "
                        "first op") from None


def load_tokenizer(path: str, model=None):
    """Load the SentencePiece vocabulary and check that it matches the model."""
    from tf_transformer.data.tokenizer import Tokenizer

    if not os.path.exists(path):
        raise UserError(f"vocabulary {path}: no such file (expected the SentencePiece .model used in training)")
    tok = Tokenizer(path)
    if model is not None:
        from tf_transformer.model import as_transformer

        model = as_transformer(model)
    if model is not None and int(tok.vocab_size) != int(model.vocab_size):
        raise UserError(
            f"vocabulary {path} has {tok.vocab_size} pieces but the model's vocab_size is {model.vocab_size}; "
            "pass the vocabulary the model was trained with"
        )
    return tok


class Translator:
    """Translate lists of sentences with one model and one decoding setting.

    Args:
      model: a Transformer, or a model wrapping one (the ``TrainingModel`` that
        ``TransformerHyperModel``'s tuner returns from ``get_best_models()``).
      tokenizer: a :class:`tf_transformer.data.Tokenizer` (``encode``/``decode``).
      beam_size, alpha, max_extra_length: decoding settings (``beam_size=1``: greedy).
      stop_rule: when beam search stops a sentence (``decode.stop_rule``, ``tft translate
        --stop-rule``): ``"bound"``, the exact early stop under the length penalty, or
        ``"beam_finished"``, also once ``beam_size`` hypotheses have ended.
      batch_size: sentences per decoding batch (sorted by length first).
      jit_compile: compile the decoding graph with XLA (one compilation per batch shape).
      cached: use the key/value cache (``False`` only for comparisons).
      n_best: translations per sentence (at most ``beam_size``). With ``n_best > 1``,
        ``translate`` gives each sentence a list of translations, best first, and a list of
        scores (the first is the 1-best translation; a list is shorter when the search could
        finish fewer hypotheses within the length limit). With ``sample``: ``n_best`` samples
        per sentence (any number), in the order drawn, each with random numbers of its own
        (the first is what ``n_best=1`` samples); a batch of ``batch_size`` sentences then
        decodes ``batch_size * n_best`` rows.
      sample, top_k, epsilon, top_p, temperature, seed: draw each token from the model's
        distribution instead of searching (``beam_size=1``), from the ``top_k`` most probable
        (0: all), of those the ones of probability at least ``epsilon`` (0: all) and of those the
        nucleus of probability ``top_p`` (1: all), at ``temperature``, seeded by
        ``seed``, for back-translation. A sentence's draws depend on its source ids and
        ``seed`` only: the same in any batch, ``batch_size`` or ``workers`` (and the same for
        a sentence given twice). See :mod:`tf_transformer.decoding.greedy`.
      workers: batches decoded at once, each from its own Python thread (TensorFlow
        releases the GIL while it runs them); with :func:`set_cpu_threads` of the same number,
        each batch runs on one core. Every batch is decoded as it is alone: the outputs do
        not depend on ``workers``.

    Example::

        tr = Translator(model, tok, beam_size=4, alpha=0.6)
        translations, scores, stats = tr.translate(["A dog runs.", ""])
        translations                          # ["Ein Hund rennt.", ""]
        scores[1], stats.decoded              # (0.0, 1): the empty line is not decoded
    """

    def __init__(self, model, tokenizer, beam_size: int = 4, alpha: float = 0.6, max_extra_length: int = 50,
                 batch_size: int = 64, jit_compile: bool = False, cached: bool = True, workers: int = 1,
                 stop_rule: str = "bound", n_best: int = 1, sample: bool = False, top_k: int = 0,
                 temperature: float = 1.0, seed: int = 0, top_p: float = 1.0, epsilon: float = 0.0):
        import tensorflow as tf

        from tf_transformer.decoding.model_fns import model_limit, score_batch, translate_batch
        from tf_transformer.model import as_transformer

        model = as_transformer(model)
        batches.check_decode_settings(beam_size, alpha, max_extra_length, batch_size)
        batches.check_stop_rule(stop_rule)
        if workers < 1:
            raise UserError(f"workers={workers}: must be >= 1")
        self.sampling = batches.check_search_kind(beam_size, n_best, sample, top_k, temperature, seed, top_p,
                                                  epsilon)
        self.n_best = int(n_best)
        self.workers = int(workers)
        self.model = model
        self.tokenizer = tokenizer
        self.beam_size = int(beam_size)
        self.alpha = float(alpha)
        self.stop_rule = stop_rule
        self.max_extra_length = int(max_extra_length)
        self.batch_size = int(batch_size)
        self.limit = model_limit(model)
        eos = int(getattr(tokenizer, "eos_id", 3))
        bos = int(getattr(tokenizer, "bos_id", 2))

        def decode(source_ids):
            return translate_batch(model, source_ids, beam_size=self.beam_size, alpha=self.alpha,
                                   max_extra_length=self.max_extra_length, bos_id=bos, eos_id=eos, cached=cached,
                                   stop_rule=self.stop_rule, n_best=self.n_best, sampling=self.sampling)

        # autograph=False: the decoding code writes its loops with tf.while_loop/tf.cond itself,
        # and converting the Keras layers' Python for nothing took most of the tracing time
        # (7-10 s of a `tft translate` process, 2 s without)
        if jit_compile:
            # XLA needs static shapes: trace per batch shape (lengths are bucketed below).
            self._decode = tf.function(decode, jit_compile=True, autograph=False)
        else:
            self._decode = tf.function(decode, input_signature=[tf.TensorSpec([None, None], tf.int32)],
                                       autograph=False)
        self._bucket = 8 if jit_compile else 1
        self._bos, self._eos = bos, eos
        spec = tf.TensorSpec([None, None], tf.int32)
        self._score = tf.function(lambda src, tgt_in, tgt_out: score_batch(model, src, tgt_in, tgt_out),
                                  input_signature=[spec, spec, spec], autograph=False)

    def trace(self) -> None:
        """Trace the decoding graph now rather than in the first batch (the same work; for a
        caller that times or hides it). Under XLA, which traces per batch shape, nothing."""
        if self._bucket == 1:
            self._decode.get_concrete_function()

    def translate_ids(self, sources: Sequence[Sequence[int]], progress: Callable[[int], None] | None = None
                      ) -> tuple[list[list[int]], list[float], TranslationStats]:
        """Decode subword-id sources (no BOS/EOS). Returns ``(outputs, scores, stats)`` in
        input order; outputs have no BOS/EOS/pad. Empty sources give ``[]`` (score 0)
        (:func:`tf_transformer.decoding.batches.decode_in_batches`)."""
        return batches.decode_in_batches(sources, self.limit, self.batch_size, self._decode_rows, progress=progress,
                                         workers=self.workers, n_best=self.n_best)

    def _decode_rows(self, rows: list[list[int]]) -> list[tuple]:
        """One batch: ``rows`` padded to a common width (bucketed under XLA), decoded by the graph."""
        width = max(len(r) for r in rows)
        ids, scores = self._decode(_padded(rows, min(-(-width // self._bucket) * self._bucket, self.limit)))
        return list(zip(ids.numpy(), scores.numpy()))

    def translate(self, texts: Sequence[str], progress: Callable[[int], None] | None = None
                  ) -> tuple[list[str], list[float], TranslationStats]:
        """Translate detokenized sentences; returns ``(translations, scores, stats)``
        (:func:`tf_transformer.decoding.batches.translate_texts`)."""
        return batches.translate_texts(texts, self.tokenizer, self.translate_ids, progress=progress,
                                       n_best=self.n_best)

    def score(self, sources: Sequence[str], targets: Sequence[str], progress: Callable[[int], None] | None = None
              ) -> tuple[list[float], list[int], TranslationStats]:
        """The model's log-probability of each given translation: ``(log_probs, tokens,
        stats)``, in input order. ``log_probs[i]`` is ``log P(targets[i] | sources[i])``, summed
        over its subword tokens and EOS (``tokens[i]`` of them), what greedy decoding scores
        its own output with; divide by ``tokens`` for a per-token figure (for filtering
        parallel data or reranking n-best lists). An empty or whitespace-only source is not
        scored: ``nan`` and 0 tokens. See :meth:`score_ids` for the limits. A target is
        scored as the tokenizer segments it; a search may have written the same text in other
        pieces (then :meth:`score_ids` of its ids gives the score it searched with)."""
        return batches.score_texts(sources, targets, self.tokenizer, self.score_ids, progress=progress)

    def score_ids(self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                  progress: Callable[[int], None] | None = None) -> tuple[list[float], list[int], TranslationStats]:
        """:meth:`score` of subword ids (no BOS/EOS): :func:`tf_transformer.decoding.batches.score_in_batches`
        (the limits, empty sources, batches of ``batch_size`` pairs of similar length)."""
        return batches.score_in_batches(sources, targets, self.limit, self.batch_size, self._score_rows,
                                        progress=progress)

    def _score_rows(self, sources: list[list[int]], targets: list[list[int]]) -> list[tuple[float, int]]:
        sums, counts = self._score(_padded(sources), _padded([[self._bos] + t for t in targets]),
                                   _padded([t + [self._eos] for t in targets]))
        return [(float(lp), int(n)) for lp, n in zip(sums.numpy(), counts.numpy())]


def _padded(rows: list[list[int]], width: int | None = None):
    """``rows`` as an int32 array padded with 0 to ``width`` (default: the longest row)."""
    import numpy as np

    out = np.zeros((len(rows), width or max(map(len, rows))), np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def translate(model, texts: Sequence[str] | str, tokenizer, beam_size: int = 4, alpha: float = 0.6,
              max_extra_length: int = 50, batch_size: int = 64, stop_rule: str = "bound", n_best: int = 1):
    """One call: translate ``texts`` (a list, or one string) with ``model`` (a Transformer or a
    model wrapping one) and its ``tokenizer``; returns the translations (a string for a string;
    with ``n_best > 1``, a list of translations, best first, for each).
    The settings are :class:`Translator`'s (``stop_rule="beam_finished"`` for a config whose
    ``decode.stop_rule`` says so, as ``tft translate`` reads it). Also
    ``Transformer.translate(texts, tokenizer, ...)``. For many calls with one setting, build a
    :class:`Translator` once (it compiles the decoding graph once)."""
    single = isinstance(texts, str)
    translator = Translator(model, tokenizer, beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length,
                            batch_size=batch_size, stop_rule=stop_rule, n_best=n_best)
    outputs, _, _ = translator.translate([texts] if single else list(texts))
    return outputs[0] if single else outputs
