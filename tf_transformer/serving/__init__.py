"""Serving: ``tft export`` writes SavedModels for TF Serving (:mod:`tf_transformer.serving.export`)
or, with ``--format ctranslate2``, a CTranslate2 model directory that ``tft translate --engine
ctranslate2`` decodes without TensorFlow (:mod:`tf_transformer.serving.ctranslate2`); both
describe themselves in a JSON file (:mod:`tf_transformer.serving.info`). See docs/serving.md."""
