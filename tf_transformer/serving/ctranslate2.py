"""CTranslate2 export (``tft export --format ctranslate2``) and decoding with it
(``tft translate --engine ctranslate2``).

`CTranslate2 <https://github.com/OpenNMT/CTranslate2>`_ is a C++ inference engine for
Transformer models. :func:`export_ctranslate2` describes our model with its Python spec API
(``ctranslate2.specs.TransformerSpec``) and writes a model directory that
``ctranslate2.Translator`` loads; :class:`CT2Translator` decodes with it behind the same
interface as :class:`tf_transformer.decoding.translator.Translator`. Neither imports
TensorFlow for decoding, so a ``tft translate --engine ctranslate2`` process starts in a
fraction of a second.

The mapping, checked weight by weight against the Keras model (``tests/test_serving_ctranslate2.py``):

==========================  ===============================================================
ours                        CTranslate2 spec
==========================  ===============================================================
shared table ``E``          ``encoder.embeddings[0]``, ``decoder.embeddings`` and
                            ``decoder.projection`` (tied, no bias); CTranslate2 stores one copy
``E * sqrt(d_model)``       ``scale_embeddings = True`` (its default)
sinusoids, interleaved      an explicit ``position_encodings`` table of ``max_length`` rows
(sin at even columns)       for the encoder and the decoder: CTranslate2's built-in
                            sinusoids concatenate ``[sin..., cos...]`` with another frequency
                            spacing, so they are not ours; a learned table is copied as is
post-LN                     ``pre_norm = False``: each sublayer's ``layer_norm`` runs after
                            its residual, and there is no final stack norm
Q/K/V/O (biases optional)   fused ``linear[0]`` (Q|K|V for self-attention; Q, then K|V, for
                            cross-attention), kernels transposed to ``[out, in]``; the
                            biases (``model.attention_bias``) concatenated the same way
FFN with biases, ReLU       ``ffn.linear_0`` / ``ffn.linear_1`` with biases, ``Activation.RELU``
LayerNorm epsilon           ``config.layer_norm_epsilon = model.layer_norm_epsilon``
ids 0-3 pad/unk/BOS/EOS     the vocabulary is the SentencePiece pieces in id order, so
                            ``<unk>``, ``<s>`` (decoder start), ``</s>`` are CTranslate2's
                            defaults at our ids; the source gets no BOS/EOS (ours neither)
==========================  ===============================================================

Decoding differences, and what :class:`CT2Translator` does about them:

* **Length penalty.** Our beam search ranks finished hypotheses by GNMT's
  ``log P / ((5 + |Y|) / 6) ** alpha``; CTranslate2 by ``log P / |Y| ** length_penalty``.
  With ``alpha = 0`` both are ``log P`` and the searches agree. For ``alpha > 0`` there is no
  exact equivalent; :func:`ct2_length_penalty` picks the exponent whose penalty has the same
  slope in ``log |Y|`` as GNMT's at the expected output length (the source length), the
  nearest CTranslate2 setting, and ``tft translate`` says so on stderr. CTranslate2 takes one
  ``length_penalty`` per call, so each call holds sentences of one source length: every
  sentence gets the exponent of its own length, and its translation does not depend on the
  batch size or on the other sentences of its batch.
* **Minimum length.** CTranslate2 forbids EOS at the first step by default
  (``min_decoding_length = 1``); ours does not, so it is called with 0.
* **Per-sentence length limit.** Ours stops each sentence at ``min(n + max_extra_length,
  max_length)`` tokens; CTranslate2 takes one ``max_decoding_length`` per call. Batches are
  decoded with the largest limit in the batch, and a sentence whose output ran past its own
  limit is decoded again alone with its own.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from tf_transformer.decoding import batches
from tf_transformer.decoding.batches import TranslationStats
from tf_transformer.errors import UserError
from tf_transformer.io import atomic_path, check_writable
from tf_transformer.serving.info import export_info

__all__ = [
    "CT2Translator",
    "EXPORT_INFO",
    "QUANTIZATIONS",
    "build_spec",
    "ct2_length_penalty",
    "export_ctranslate2",
    "require_ctranslate2",
]

# Weight types CTranslate2 converts to (``ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES``).
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
                 "float16", "bfloat16")
EXPORT_INFO = "tft_export.json"   # our decoding settings and ids, beside CTranslate2's files
SPM_FILE = "sentencepiece.model"  # the vocabulary, copied into the model directory
SPECIAL_PIECES = {0: "<pad>", 1: "<unk>", 2: "<s>", 3: "</s>"}
INSTALL_HINT = "pip install 'tf-transformer[ct2]' (or: pip install 'ctranslate2>=4.8,<5')"


def require_ctranslate2(what: str = "--format ctranslate2"):
    """Import ``ctranslate2`` or raise a :class:`UserError` saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise UserError(f"{what} needs the ctranslate2 package: {INSTALL_HINT}") from None
    return ctranslate2


# ---------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------


def check_exportable(model) -> None:
    """Raise :class:`UserError` for model settings CTranslate2's Transformer cannot express."""
    problems = []
    head = model.d_model // model.num_heads
    if model.key_dim != model.value_dim or model.key_dim * model.num_heads != model.d_model:
        problems.append(f"key_dim={model.key_dim}, value_dim={model.value_dim} with num_heads={model.num_heads}, "
                        f"d_model={model.d_model} (CTranslate2 needs key_dim = value_dim = d_model / num_heads "
                        f"= {head})")
    if model.position_encoding not in ("sinusoidal", "learned"):
        problems.append(f"position_encoding={model.position_encoding!r}")
    if problems:
        raise UserError("--format ctranslate2: this model cannot be exported: " + "; ".join(problems))


def _np(variable):
    import keras
    import numpy as np

    return np.ascontiguousarray(keras.ops.convert_to_numpy(variable), dtype=np.float32)


def position_table(model):
    """``[max_length, d_model]`` float32: the position signal our model adds at positions
    ``0..max_length-1`` (the same function the model calls, evaluated once)."""
    import numpy as np

    positions = np.arange(model.max_length, dtype=np.int32)
    return _np(model.positions.encoding(positions, model.d_model))


def _set_linear(spec, kernel, bias=None):
    spec.weight = kernel.T.copy()  # Keras [in, out] -> CTranslate2 [out, in]
    if bias is not None:
        spec.bias = bias


def _set_norm(spec, norm):
    spec.gamma = _np(norm.gamma)
    spec.beta = _np(norm.beta)


def _set_self_attention(spec, attention, norm):
    _set_linear(spec.linear[0], *_fused(attention, "query", "key", "value"))
    _set_linear(spec.linear[1], *_fused(attention, "output"))
    _set_norm(spec.layer_norm, norm)


def _set_cross_attention(spec, attention, norm):
    _set_linear(spec.linear[0], *_fused(attention, "query"))
    _set_linear(spec.linear[1], *_fused(attention, "key", "value"))
    _set_linear(spec.linear[2], *_fused(attention, "output"))
    _set_norm(spec.layer_norm, norm)


def _fused(attention, *projections):
    """``(kernel, bias)`` of the named projections side by side, as CTranslate2 fuses them
    (``bias`` None when the attention has no biases)."""
    import numpy as np

    kernel = np.concatenate([_np(getattr(attention, f"{name}_kernel")) for name in projections], axis=1)
    if not attention.use_bias:
        return kernel, None
    return kernel, np.concatenate([_np(getattr(attention, f"{name}_bias")) for name in projections])


def _set_ffn(spec, ffn, norm):
    _set_linear(spec.linear_0, _np(ffn.inner_kernel), _np(ffn.inner_bias))
    _set_linear(spec.linear_1, _np(ffn.outer_kernel), _np(ffn.outer_bias))
    _set_norm(spec.layer_norm, norm)


def build_spec(model, pieces: Sequence[str]):
    """A ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights, with ``pieces``
    (the SentencePiece pieces in id order) as the shared vocabulary."""
    ctranslate2 = require_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    check_exportable(model)
    if len(pieces) != model.vocab_size:
        raise UserError(f"--vocab has {len(pieces)} pieces but the model's vocab_size is {model.vocab_size}")
    for i, piece in SPECIAL_PIECES.items():
        if pieces[i] != piece:
            raise UserError(f"--vocab: id {i} is {pieces[i]!r}, expected {piece!r} (the ids of tft build-vocab)")
    del ctranslate2
    spec = transformer_spec.TransformerSpec.from_config(
        (model.num_layers, model.num_layers), model.num_heads, pre_norm=False,
        activation=common_spec.Activation.RELU)
    table = _np(model.embedding.embeddings)
    positions = position_table(model)

    enc = spec.encoder
    enc.embeddings[0].weight = table
    enc.scale_embeddings = True
    enc.position_encodings.encodings = positions
    for layer_spec, layer in zip(enc.layer, model.encoder.layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.ffn_norm)

    dec = spec.decoder
    dec.embeddings.weight = table
    dec.scale_embeddings = True
    dec.position_encodings.encodings = positions
    dec.projection.weight = table  # tied: logits = h E^T; no bias
    for layer_spec, layer in zip(dec.layer, model.decoder.layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm)
        _set_cross_attention(layer_spec.attention, layer.cross_attention, layer.cross_attention_norm)
        _set_ffn(layer_spec.ffn, layer.ffn, layer.ffn_norm)

    cfg = spec.config
    cfg.layer_norm_epsilon = float(model.layer_norm_epsilon)
    cfg.unk_token, cfg.bos_token, cfg.eos_token = SPECIAL_PIECES[1], SPECIAL_PIECES[2], SPECIAL_PIECES[3]
    cfg.decoder_start_token = SPECIAL_PIECES[2]
    cfg.add_source_bos = False
    cfg.add_source_eos = False
    spec.register_source_vocabulary(list(pieces))
    spec.register_target_vocabulary(list(pieces))
    return spec


def export_ctranslate2(model, tokenizer, output_dir, quantization: str | None = None, overwrite: bool = False,
                       source: str = "", decode: dict | None = None) -> dict:
    """Write a CTranslate2 model directory: ``model.bin``, ``config.json`` and the shared
    vocabulary (CTranslate2's files), ``sentencepiece.model`` (a copy of ``tokenizer``'s
    model) and ``tft_export.json`` (ids, length limit, decoding defaults, provenance).

    ``quantization``: one of :data:`QUANTIZATIONS`, or ``None`` for float32 weights.
    Returns ``{"dir": ..., "info": ...}``.
    """
    require_ctranslate2()
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UserError(f"--quantization {quantization}: not one of {', '.join(QUANTIZATIONS)}")
    out = Path(output_dir)
    if out.exists() and not overwrite:
        raise UserError(f"--output {out} already exists; pass --force to replace it")
    if out.exists() and not out.is_dir():
        raise UserError(f"--output {out} is a file, not a directory")
    check_writable(out.parent)
    if not getattr(tokenizer, "model_path", None):
        raise UserError("--vocab: the tokenizer must come from a .model file (it is copied into the export)")
    pieces = tokenizer.id_to_piece(range(tokenizer.vocab_size))
    spec = build_spec(model, pieces)
    spec.register_file(tokenizer.model_path, SPM_FILE)
    spec.validate()
    spec.optimize(quantization=quantization)

    with atomic_path(out) as tmp:
        tmp.mkdir(parents=True)
        spec.save(str(tmp))
        info = export_info(model, tokenizer, source=source, decode=decode, format="ctranslate2",
                           vocab_file=SPM_FILE, quantization=quantization or "float32")
        (tmp / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return {"dir": str(out), "info": str(out / EXPORT_INFO)}


def read_export_info(model_dir) -> dict:
    """``tft_export.json`` of a CTranslate2 export, with clear errors for a wrong ``--model``."""
    path = Path(model_dir)
    if not path.is_dir():
        raise UserError(f"--model {model_dir}: not a directory (--engine ctranslate2 takes the directory "
                        "written by tft export --format ctranslate2)")
    info_path = path / EXPORT_INFO
    if not (path / "model.bin").is_file() or not info_path.is_file():
        raise UserError(f"--model {model_dir}: no model.bin and {EXPORT_INFO} in it; export one with "
                        "tft export --format ctranslate2")
    try:
        return json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"--model {model_dir}: cannot read {EXPORT_INFO} ({e})") from None


# ---------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------


def ct2_length_penalty(alpha: float, expected_length: float) -> float:
    """CTranslate2's ``length_penalty`` nearest to GNMT's ``alpha`` around ``expected_length``.

    GNMT divides by ``lp(n) = ((5 + n) / 6) ** alpha``, CTranslate2 by ``n ** beta``. Ranking
    two hypotheses depends on the ratio of their penalties, i.e. on the slope of
    ``log lp`` in ``log n``: ``alpha * n / (5 + n)`` for GNMT, ``beta`` for CTranslate2.
    Equal slopes at the expected length give ``beta = alpha * n / (5 + n)``; 0 for 0.
    """
    if alpha <= 0:
        return 0.0
    n = max(float(expected_length), 1.0)
    return float(alpha) * n / (5.0 + n)


@dataclasses.dataclass
class _Stats(TranslationStats):
    redecoded: int = 0  # sentences decoded again alone because they ran past their own limit


class CT2Translator:
    """Translate with a CTranslate2 export; the interface of
    :class:`tf_transformer.decoding.translator.Translator` (``translate``, ``translate_ids``,
    ``limit``, ``tokenizer``).

    Args:
      model_dir: a directory written by :func:`export_ctranslate2`.
      tokenizer: a :class:`tf_transformer.data.Tokenizer`; default: the ``sentencepiece.model``
        in ``model_dir``.
      beam_size, alpha, max_extra_length, batch_size: as for ``Translator``; ``alpha`` is
        mapped by :func:`ct2_length_penalty` for each sentence's source length (exact for 0);
        with ``alpha > 0`` and ``beam_size > 1`` a batch is decoded in one call per source length.
      threads: CPU threads of the one CTranslate2 worker (0: CTranslate2's default).
      compute_type: CTranslate2's ``compute_type`` (``"default"``: the exported weight type).
      device: ``"cpu"`` or ``"cuda"``.
      n_best, sample, top_k, top_p, temperature, seed: as for ``Translator`` (``epsilon`` > 0 is
        refused: CTranslate2 has no such cut; n-best lists, and
        ``n_best`` samples, from CTranslate2's ``num_hypotheses``: its samples come sorted by
        score, not in the order drawn; sampling from its own random sampler: each batch is
        drawn by a CTranslate2 translator made afresh for it, seeded from ``seed`` and the
        batch's ids, so that the draws depend on them only (reproducible for the same input and
        ``batch_size``, whatever came before, as a resumed run needs), but they are not
        ``Translator``'s draws, and a sentence's draws depend on the batch it is in:
        :attr:`draws_per_batch`).

    Example::

        tr = CT2Translator("export/ct2", beam_size=4, alpha=0.0)
        tr.translate(["A dog runs.", ""])[0]     # ["Ein Hund rennt.", ""]
    """

    #: Sampled draws depend on the whole batch (CTranslate2 has one generator per call), unlike
    #: ``Translator``'s, which depend on each sentence alone.
    draws_per_batch = True

    def __init__(self, model_dir, tokenizer=None, beam_size: int = 4, alpha: float = 0.6,
                 max_extra_length: int = 50, batch_size: int = 64, threads: int = 0,
                 compute_type: str = "default", device: str = "cpu", n_best: int = 1, sample: bool = False,
                 top_k: int = 0, temperature: float = 1.0, seed: int = 0, top_p: float = 1.0,
                 epsilon: float = 0.0):
        ctranslate2 = require_ctranslate2("--engine ctranslate2")
        batches.check_decode_settings(beam_size, alpha, max_extra_length, batch_size)
        self.sampling = batches.check_search_kind(beam_size, n_best, sample, top_k, temperature, seed, top_p,
                                                  epsilon)
        if self.sampling is not None and self.sampling.epsilon > 0:
            raise UserError(f"epsilon={epsilon}: CTranslate2's sampler has no epsilon cut; sample with "
                            "--engine tensorflow for it")
        self.n_best = int(n_best)
        self._set_seed = ctranslate2.set_random_seed
        if threads < 0:
            raise UserError(f"threads={threads}: must be >= 0")
        info = read_export_info(model_dir)
        if tokenizer is None:
            from tf_transformer.data.tokenizer import Tokenizer

            tokenizer = Tokenizer(os.path.join(model_dir, info.get("vocab_file", SPM_FILE)))
        if int(tokenizer.vocab_size) != int(info["vocab_size"]):
            raise UserError(f"--vocab has {tokenizer.vocab_size} pieces but the export at {model_dir} has "
                            f"{info['vocab_size']}; pass the vocabulary it was exported with")
        self.tokenizer = tokenizer
        self.info = info
        self.beam_size = int(beam_size)
        self.alpha = float(alpha)
        self.max_extra_length = int(max_extra_length)
        self.batch_size = int(batch_size)
        self.limit = int(info["max_length"])
        self.pieces = tokenizer.id_to_piece(range(tokenizer.vocab_size))
        self.piece_ids = {p: i for i, p in enumerate(self.pieces)}
        # CTranslate2 seeds a worker thread's generator once, from the seed set when that thread
        # first draws (ctranslate2.set_random_seed later changes nothing there): a sampled batch
        # gets a new translator, hence a new worker, built from the model files read once here
        files = ({name: Path(model_dir, name).read_bytes() for name in os.listdir(model_dir)
                  if Path(model_dir, name).is_file()} if self.sampling is not None else None)
        self._new_engine = functools.partial(ctranslate2.Translator, str(model_dir), device=device,
                                             compute_type=compute_type, inter_threads=1,
                                             intra_threads=int(threads), files=files)
        try:
            self.engine = self._new_engine()
        except (RuntimeError, ValueError) as e:
            raise UserError(f"--model {model_dir}: CTranslate2 cannot load it ({e})") from None

    def _options(self, source_length: int, max_length: int) -> dict:
        # greedy: ours ignores alpha and scores the total log-probability; CTranslate2 would
        # normalise its greedy scores too
        penalty = ct2_length_penalty(self.alpha, source_length) if self.length_dependent else 0.0
        options = dict(beam_size=self.beam_size, length_penalty=penalty,
                       max_decoding_length=int(max_length), min_decoding_length=0, max_input_length=self.limit,
                       return_scores=True, num_hypotheses=self.n_best)
        if self.sampling is not None:
            options.update(sampling_topk=self.sampling.top_k, sampling_topp=self.sampling.top_p,
                           sampling_temperature=self.sampling.temperature)
        return options

    @property
    def length_dependent(self) -> bool:
        """Whether CTranslate2's ``length_penalty`` depends on the source length (beam search
        with ``alpha > 0``): then each call decodes sentences of one source length only."""
        return self.beam_size > 1 and self.alpha > 0

    def _decode(self, batch: list[list[int]]) -> list[tuple[list[int], float]]:
        if not self.length_dependent:
            return self._decode_call(batch)
        groups: dict[int, list[int]] = {}
        for i, s in enumerate(batch):
            groups.setdefault(len(s), []).append(i)
        out: list = [None] * len(batch)
        for idx in groups.values():
            for i, result in zip(idx, self._decode_call([batch[i] for i in idx])):
                out[i] = result
        return out

    def _decode_call(self, batch: list[list[int]]) -> list[tuple]:
        """One ``translate_batch`` call (the sources all of one length when
        :attr:`length_dependent`), and the sentences that ran past their own limit again alone.
        A row: ``(ids, score)``, or with ``n_best > 1`` ``([ids, ...], [score, ...])``."""
        limits = [min(len(s) + self.max_extra_length, self.limit) for s in batch]
        tokens = [[self.pieces[i] for i in s] for s in batch]
        results = self._call(batch, tokens, self._options(len(batch[0]), max(limits)))
        out = []
        for s, toks, limit, r in zip(batch, tokens, limits, results):
            hyps = [[self.piece_ids.get(p, 1) for p in h] for h in r.hypotheses]
            # max_decoding_length counts EOS, which the hypothesis omits: decoded under the
            # larger batch limit, an output of >= `limit` tokens would have been cut at this
            # sentence's own limit, so it is decoded again with that limit
            if any(len(h) >= limit for h in hyps) and limit < max(limits):
                self.stats.redecoded += 1
                (r,) = self._call([s], [toks], self._options(len(s), limit))
                hyps = [[self.piece_ids.get(p, 1) for p in h] for h in r.hypotheses]
            scores = [float(x) for x in r.scores] if r.scores else [0.0] * len(hyps)
            out.append((hyps[0], scores[0]) if self.n_best == 1 else (hyps, scores))
        return out

    def _call(self, batch: list[list[int]], tokens: list[list[str]], options: dict):
        """``translate_batch``; when sampling, by a new translator whose generator starts from
        the seed and the batch's ids (reproducible, and other batches draw differently)."""
        if self.sampling is not None:
            salt = sum((r + 1) * 1_000_003 * sum((c + 1) * t for c, t in enumerate(ids)) for r, ids in enumerate(batch))
            self._set_seed((self.sampling.seed * 7_919 + salt) % (2**31 - 1))
            self.engine = self._new_engine()
        return self.engine.translate_batch(tokens, **options)

    def translate_ids(self, sources: Sequence[Sequence[int]], progress: Callable[[int], None] | None = None):
        """As :meth:`tf_transformer.decoding.translator.Translator.translate_ids`; ``stats`` also
        counts ``redecoded`` (see the module's notes on the per-sentence length limit)."""
        self.stats = _Stats()
        return batches.decode_in_batches(sources, self.limit, self.batch_size, self._decode, progress=progress,
                                         stats=self.stats, n_best=self.n_best)

    def translate(self, texts: Sequence[str], progress: Callable[[int], None] | None = None):
        """As :meth:`tf_transformer.decoding.translator.Translator.translate`."""
        return batches.translate_texts(texts, self.tokenizer, self.translate_ids, progress=progress,
                                       n_best=self.n_best)

    def score(self, sources: Sequence[str], targets: Sequence[str], progress: Callable[[int], None] | None = None):
        """As :meth:`tf_transformer.decoding.translator.Translator.score`, by CTranslate2's
        forward pass."""
        return batches.score_texts(sources, targets, self.tokenizer, self.score_ids, progress=progress)

    def score_ids(self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                        progress: Callable[[int], None] | None = None):
        """As :meth:`tf_transformer.decoding.translator.Translator.score_ids`."""
        def totals(src, tgt):
            return [(sum(lps), len(lps)) for lps in self.token_log_probs(src, tgt)]

        return batches.score_in_batches(sources, targets, self.limit, self.batch_size, totals, progress=progress)

    def token_log_probs(self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]]
                        ) -> list[list[float]]:
        """Per-token log-probabilities of ``targets`` (no BOS/EOS; EOS is scored last) given
        ``sources``, by CTranslate2's forward pass (teacher forcing)."""
        src = [[self.pieces[i] for i in s[: self.limit]] for s in sources]
        tgt = [[self.pieces[i] for i in t] for t in targets]
        return [list(r.log_probs) for r in self.engine.score_batch(src, tgt, max_input_length=self.limit)]
