"""Evaluation: sacreBLEU and chrF with signatures, lowercased BLEU and the paper's tokenized
BLEU with compound splitting (:mod:`tf_transformer.evaluation.bleu`); bootstrap intervals
and paired significance tests (:mod:`tf_transformer.evaluation.significance`); run-on and
looping outputs (:mod:`tf_transformer.evaluation.degenerate`); minimum Bayes risk choice
among candidate translations (:mod:`tf_transformer.evaluation.mbr`). Used by ``tft evaluate``,
``tft score`` and ``tft translate --mbr``."""

from tf_transformer.evaluation.bleu import Score, evaluate_translations, format_scores  # noqa: F401
