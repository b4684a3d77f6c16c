"""Evaluation: sacreBLEU and chrF with signatures, lowercased BLEU and the paper's tokenized
BLEU with compound splitting (:mod:`tf_transformer.evaluation.bleu`); ``tft evaluate``."""

from tf_transformer.evaluation.bleu import Score, evaluate_translations, format_scores  # noqa: F401
