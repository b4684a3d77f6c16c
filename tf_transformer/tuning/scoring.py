"""Scores shared by ``tft tune`` and ``tft ablate``: perplexity over a split and corpus BLEU.

* :func:`split_perplexity`: ``exp(mean unsmoothed NLL per real target token)`` over a whole
  split, batched by ``make_dataset`` (label smoothing plays no part, whatever the model was
  trained with).
* :func:`corpus_bleu`: translate sentences with :class:`~tf_transformer.decoding.translator.Translator`
  (``beam_size=1``: greedy) and score them with sacreBLEU (detokenized, cased, 13a).
"""

from __future__ import annotations

import time
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
    logs = scorer.evaluate(ds, steps=steps, verbose=0, return_dict=True)
    return {"perplexity": float(logs["perplexity"]), "nll": float(logs["loss"]),
            "accuracy": float(logs["accuracy"])}


def corpus_bleu(model, tokenizer, sources: Sequence[str], references: Sequence[str], beam_size: int = 1,
                alpha: float = 0.6, max_extra_length: int = 50, batch_size: int = 64, progress=None) -> dict:
    """Translate ``sources`` and score against ``references`` with sacreBLEU.

    Returns ``{"bleu", "signature", "sentences", "seconds", "hypotheses"}``.
    """
    import sacrebleu

    from tf_transformer.decoding.translator import Translator

    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    start = time.time()
    translator = Translator(model, tokenizer, beam_size=beam_size, alpha=alpha,
                            max_extra_length=max_extra_length, batch_size=batch_size)
    hypotheses, _, _ = translator.translate(list(sources), progress=progress)
    metric = sacrebleu.metrics.BLEU()
    score = metric.corpus_score(hypotheses, [list(references)])
    return {"bleu": float(score.score), "signature": str(metric.get_signature()),
            "sentences": len(sources), "seconds": time.time() - start, "hypotheses": hypotheses}
