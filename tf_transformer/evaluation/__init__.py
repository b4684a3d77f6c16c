"""Evaluation: sacreBLEU and chrF with signatures, lowercased BLEU and the paper's tokenized
BLEU with compound splitting (:mod:`tf_transformer.evaluation.bleu`); bootstrap intervals
and paired significance tests (:mod:`tf_transformer.evaluation.significance`); run-on and
looping outputs (:mod:`tf_transformer.evaluation.degenerate`). Used by ``tft evaluate`` and
``tft score``."""

from tf_transformer.evaluation.bleu import Score, evaluate_translations, format_scores  # noqa: F401
