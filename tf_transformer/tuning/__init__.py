"""Hyper-parameter search with Keras Tuner (``tft tune``) and the paper's Table 3 at small
scale (``tft ablate``).

::

    import keras_tuner as kt
    from tf_transformer.config import load_config
    from tf_transformer.tuning import TransformerHyperModel, SearchSpace, run_search

    # the hypermodel in any Keras Tuner tuner
    hm = TransformerHyperModel(load_config("multi30k_small"), SearchSpace(num_heads=(1, 4, 8)))
    tuner = kt.RandomSearch(hm, objective="val_loss", max_trials=4, directory="runs/tune")
    tuner.search(epochs=2, steps_per_epoch=100)

    # or the whole search with its results table, as tft tune runs it
    result = run_search(load_config("multi30k_small"), "runs/tune", algorithm="hyperband",
                        steps_per_trial=600, steps_per_epoch=100)

Modules: ``hypermodel`` (:class:`TransformerHyperModel`), ``space`` (:class:`SearchSpace`), ``search``
(:func:`run_search`, :func:`make_tuner`, the results table), ``rows`` (Table 3 rows scaled
to a small config), ``ablation`` (the study behind ``tft ablate``), ``scoring`` (perplexity
and BLEU); both commands are in :mod:`tf_transformer.cli.tune`. Names are imported on first
use.
"""

from __future__ import annotations

from tf_transformer._lazy import lazy_exports

_EXPORTS = {
    "TransformerHyperModel": "hypermodel",
    "SearchSpace": "space",
    "OBJECTIVES": "hypermodel",
    "objective_for": "hypermodel",
    "run_search": "search",
    "make_tuner": "search",
    "write_results": "search",
    "trial_rows": "search",
    "SearchResult": "search",
    "ROWS": "rows",
    "TABLE3_ROWS": "rows",
    "row_config": "rows",
    "scaled_change": "rows",
    "run_ablation": "ablation",
    "AblationResult": "ablation",
    "split_perplexity": "scoring",
    "corpus_bleu": "scoring",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
