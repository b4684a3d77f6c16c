"""Training (paper section 5): the paper's schedule, label-smoothed loss, ``model.fit`` with
checkpoints every N minutes, resumable backups, distribution, gradient accumulation and
checkpoint averaging.

::

    from tf_transformer.training import train
    result = train(load_config("multi30k_small"), model_dir="runs/demo")
    print(result.summary())

Modules: ``schedule`` (learning rate, Adam), ``losses`` (loss and metrics), ``trainer``
(``TrainingModel``: the train step, accumulation), ``strategy`` (tf.distribute),
``callbacks`` (checkpoints, backups, budgets), ``loop`` (``train``), ``averaging``
(checkpoint averaging). The commands are in :mod:`tf_transformer.cli`. Names are imported
on first use.
"""

from __future__ import annotations

from tf_transformer._lazy import lazy_exports

_EXPORTS = {
    "train": "loop",
    "TrainResult": "loop",
    "TransformerSchedule": "schedule",
    "make_optimizer": "schedule",
    "paper_learning_rate": "schedule",
    "LabelSmoothedCrossEntropy": "losses",
    "label_smoothed_loss": "losses",
    "token_statistics": "losses",
    "TokenAccuracy": "losses",
    "Perplexity": "losses",
    "TrainingModel": "trainer",
    "make_strategy": "strategy",
    "average_checkpoints": "averaging",
    "list_checkpoints": "callbacks",
}

__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
