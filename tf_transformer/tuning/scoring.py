"""Scores shared by ``tft tune`` and ``tft ablate``: perplexity over a split and corpus BLEU.

* :func:`split_perplexity`: ``exp(mean unsmoothed NLL per real target token)`` over a whole
  split, batched by ``make_dataset`` (label smoothing plays no part, whatever the model was
  trained with).
* :func:`corpus_bleu`: translate sentences with :class:`~tf_transformer.decoding.translator.Translator`
  (``beam_size=1``: greedy) and score them with sacreBLEU (detokenized, cased, 13a), and
  optionally the other metrics of :mod:`tf_transformer.evaluation.bleu`.
"""

from __future__ import annotations

import time
import warnings
from typing import Optional, Sequence


def split_perplexity(model, data_config, tokenizer, split: str = "valid", steps: Optional[int] = None) -> dict:
    """Unsmoothed perplexity of the Transformer ``model`` on ``split``.

    Returns ``{"perplexity", "nll", "accuracy"}`` (per real target token).
    """
    from tf_transformer.data import make_dataset
    from tf_transformer.training.trainer import TrainingModel

    scorer = TrainingModel(model, label_smoothing=0.0, name="scorer")
    scorer.build()
    scorer.compile(optimizer="sgd")
    ds = make_dataset(data_config, split, tokenizer, training=False, repeat=False, verbose=False)
    with warnings.catch_warnings():
        # a token-bucketed split has no known length: Keras reads it to the end and then warns
        # that the input "ran out of data", which is exactly what was asked for here
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        logs = scorer.evaluate(ds, steps=steps, verbose=0, return_dict=True)
    return {"perplexity": float(logs["perplexity"]), "nll": float(logs["loss"]),
            "accuracy": float(logs["accuracy"])}


def corpus_bleu(model, tokenizer, sources: Sequence[str], references: Sequence[str], beam_size: int = 1,
                alpha: float = 0.6, max_extra_length: int = 50, batch_size: int = 64, progress=None,
                all_metrics: bool = False, stop_rule: str = "bound") -> dict:
    """Translate ``sources`` and score against ``references`` with sacreBLEU
    (:mod:`tf_transformer.evaluation.bleu`).

    Returns ``{"bleu", "signature", "sentences", "seconds", "hypotheses"}``; with
    ``all_metrics`` also ``bleu_lowercase`` (lowercased 13a BLEU, comparable with Multi30k
    papers), ``bleu_tokenized`` (the paper's tokenized, compound-split BLEU) and ``chrf``.
    ``stop_rule``: the beam search's (:class:`~tf_transformer.decoding.translator.Translator`).
    """
    from tf_transformer.decoding.translator import Translator
    from tf_transformer.evaluation import bleu as metrics

    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    start = time.time()
    translator = Translator(model, tokenizer, beam_size=beam_size, alpha=alpha,
                            max_extra_length=max_extra_length, batch_size=batch_size, stop_rule=stop_rule)
    hypotheses, _, _ = translator.translate(list(sources), progress=progress)
    references = metrics.references_for(tokenizer, references)
    score = metrics.sacre_bleu(hypotheses, references)
    out = {"bleu": float(score.score), "signature": score.signature, "sentences": len(sources),
           "seconds": time.time() - start, "hypotheses": hypotheses}
    if all_metrics:
        out["bleu_lowercase"] = float(metrics.lowercase_bleu(hypotheses, references).score)
        out["bleu_tokenized"] = float(metrics.compound_split_bleu(hypotheses, references).score)
        out["chrf"] = float(metrics.chrf(hypotheses, references).score)
    return out
