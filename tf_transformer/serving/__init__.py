"""Serving: ``tft export`` writes SavedModels for TF Serving (:mod:`tf_transformer.serving.export`,
docs/serving.md)."""
