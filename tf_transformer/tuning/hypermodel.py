"""A Keras Tuner ``HyperModel`` over the Transformer's heads, depth, FFN size and dropout.

The hypermodel is an ordinary ``keras_tuner.HyperModel``: hand it to any tuner::

    import keras_tuner as kt
    from tf_transformer.config import load_config
    from tf_transformer.tuning import TransformerHyperModel, SearchSpace

    cfg = load_config("multi30k_small")
    hypermodel = TransformerHyperModel(cfg, SearchSpace(num_heads=(2, 4, 8), num_layers=(2, 3)),
                                       vocab_dir="runs/tune")
    tuner = kt.RandomSearch(hypermodel, objective=kt.Objective("val_loss", "min"), max_trials=6,
                            directory="runs/tune", project_name="random")
    tuner.search(epochs=3, steps_per_epoch=100)   # data come from cfg.data when not given

What a trial is:

* ``build(hp)`` chooses ``num_heads`` (with ``d_k = d_v = d_model / h``), ``num_layers``,
  ``d_ff`` and ``dropout`` (``hp.Choice`` over the :class:`SearchSpace`; also ``word_dropout``,
  one rate for both sides, when the space gives it values), builds the
  Transformer of the config with those values and returns it wrapped in the training
  module's :class:`~tf_transformer.training.trainer.TrainingModel` (the paper's
  token-weighted label-smoothed loss, logs ``loss``/``perplexity``/``accuracy``), compiled
  with the paper's Adam and learning-rate schedule (``make_optimizer``). Everything else
  (d_model, label smoothing, warmup, batch size) comes from the config.
* ``fit(hp, model, ...)`` trains it with ``model.fit``. Without data arguments it reads the
  config's data section (``make_dataset``: token-budget batches of the ``train`` split,
  the whole ``valid`` split for validation), split over the replicas of the strategy the
  model was built under (``distribution_strategy=`` of the tuner). Budget per trial:
  ``epochs * steps_per_epoch`` updates, and optionally ``max_minutes`` of wall-clock time
  (training stops at the first update past it, then validates). Your own data go in as
  ``tuner.search(train, validation_data=valid, ...)``; give *functions* that make the datasets
  (``lambda: make_dataset(cfg.data, "train", tok)``) when they tokenize in the graph, as
  ``make_dataset`` does: Keras Tuner clears the Keras session before each trial, which
  destroys the SentencePiece resource a dataset made beforehand holds. A function is called
  once per trial (our :class:`~tf_transformer.data.Tokenizer` remakes its graph side after a
  ``clear_session``; another tokenizer with TensorFlow resources is best made inside it).
* It returns the epoch with the best objective (last epoch for BLEU) as a dict:
  ``val_loss`` (label-smoothed validation loss per token: the default objective),
  ``val_perplexity`` (unsmoothed), ``val_accuracy``, ``loss``, and besides ``params``,
  ``train_minutes`` and ``steps``; with ``bleu=True`` (or ``objective="val_bleu"``) also
  ``val_bleu``: sacreBLEU of greedy translations of the first ``bleu_sentences``
  validation sentences after training (use ``kt.Objective("val_bleu", "max")``).

Hyperband continues a trial from the best checkpoint of an earlier one: the weights are
restored by Keras Tuner and the learning-rate schedule continues at the update where that
trial stopped (``initial_epoch * steps_per_epoch``); Adam's moments start afresh.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from pathlib import Path
from typing import Callable, Optional

import keras
import keras_tuner as kt

from tf_transformer.config import Config, ConfigError
from tf_transformer.io import say
from tf_transformer.tuning.space import SearchSpace  # noqa: F401 (public here too)

#: Objectives the hypermodel reports, with their direction.
OBJECTIVES = {"val_loss": "min", "val_perplexity": "min", "val_accuracy": "max", "val_bleu": "max"}


def objective_for(name: str) -> kt.Objective:
    """``kt.Objective`` for one of :data:`OBJECTIVES`."""
    if name not in OBJECTIVES:
        raise ConfigError(f"objective {name!r} is not one of {', '.join(OBJECTIVES)}")
    return kt.Objective(name, OBJECTIVES[name])


class TransformerHyperModel(kt.HyperModel):
    """Keras Tuner hypermodel of the Transformer (see the module docstring).

    Args:
        config: a :class:`~tf_transformer.config.Config` (``load_config(...)``): the data,
            the training recipe and every model field that is not searched.
        search_space: a :class:`SearchSpace` (default :meth:`SearchSpace.around` the config).
        tokenizer: a :class:`~tf_transformer.data.Tokenizer`; default ``data.vocab_model``,
            built into ``vocab_dir/vocab.model`` when that is unset or missing.
        vocab_dir: where a vocabulary is built if needed (default ``train.model_dir``).
        steps_per_epoch: updates per epoch when ``fit``/``search`` is not given
            ``steps_per_epoch`` (default ``train.steps_per_epoch``).
        max_minutes: wall-clock budget per trial (default ``train.max_minutes``; ``None``: none).
        objective: the tuner's objective name; ``"val_bleu"`` turns ``bleu`` on.
        bleu: also report ``val_bleu`` (greedy decoding of ``bleu_sentences`` validation sentences).
        bleu_sentences: how many validation sentences to translate for BLEU.
        verbose: ``model.fit``'s ``verbose`` when ``search`` does not set it.
        log: where one-line messages go (default stderr).
    """

    def __init__(self, config: Config, search_space: Optional[SearchSpace] = None, *, tokenizer=None,
                 vocab_dir=None, steps_per_epoch: Optional[int] = None, max_minutes: Optional[float] = None,
                 objective: str = "val_loss", bleu: bool = False, bleu_sentences: int = 300,
                 verbose="auto", log: Callable[[str], None] = say, name: str = "transformer",
                 tunable: bool = True):
        super().__init__(name=name, tunable=tunable)
        if objective not in OBJECTIVES:
            raise ConfigError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}")
        self.config = copy.deepcopy(config)
        self.config.validate(require_vocab=False)
        self.search_space = (search_space or SearchSpace.around(self.config.model)).validate(self.config.model.d_model)
        self.tokenizer = tokenizer
        self.vocab_dir = Path(vocab_dir) if vocab_dir is not None else Path(self.config.train.model_dir)
        self.steps_per_epoch = steps_per_epoch
        self._validation_steps: dict = {}  # (data section, replicas) -> validation steps
        self.max_minutes = max_minutes if max_minutes is not None else self.config.train.max_minutes
        self.objective = objective
        self.bleu = bool(bleu) or objective == "val_bleu"
        if bleu_sentences < 1:
            raise ConfigError(f"bleu_sentences={bleu_sentences} must be >= 1")
        self.bleu_sentences = int(bleu_sentences)
        self.verbose = verbose
        self.log = log
        self._bleu_data = None

    # -- vocabulary --------------------------------------------------------------------
    def prepare(self):
        """Load (or build) the vocabulary and fill ``model.vocab_size``; returns the tokenizer."""
        from tf_transformer.data import resolve_vocabulary

        self.tokenizer = resolve_vocabulary(self.config, self.vocab_dir / "vocab.model", tokenizer=self.tokenizer,
                                            log=self.log, who="tune")
        return self.tokenizer

    # -- the search space --------------------------------------------------------------
    def declare(self, hp) -> dict:
        """Register the searched hyper-parameters on ``hp`` (the four, and ``word_dropout`` when the
        space has it); returns their values for this trial."""
        kinds = {"num_heads": int, "num_layers": int, "d_ff": int, "dropout": float, "word_dropout": float}
        return {name: hp.Choice(name, [kinds[name](v) for v in values], ordered=True)
                for name, values in self.search_space.searched().items()}

    def trial_config(self, values: dict) -> Config:
        """The config of one trial: the hypermodel's config with the searched model fields."""
        cfg = copy.deepcopy(self.config)
        d = cfg.model.d_model
        h = int(values["num_heads"])
        if h < 1 or d % h:  # a value the search space refuses can still come from hp.Fixed or an oracle
            raise ConfigError(f"num_heads={h} does not divide d_model={d} (d_k = d_v = d_model / h)")
        cfg.model = dataclasses.replace(cfg.model, num_heads=h, key_dim=d // h, value_dim=d // h,
                                        num_layers=int(values["num_layers"]), d_ff=int(values["d_ff"]),
                                        dropout=float(values["dropout"]))
        if values.get("word_dropout") is not None:  # one rate for both sides
            rate = float(values["word_dropout"])
            cfg.model = dataclasses.replace(cfg.model, source_word_dropout=rate, target_word_dropout=rate)
        cfg.validate(require_vocab=False)
        return cfg

    # -- HyperModel API ----------------------------------------------------------------
    def build(self, hp):
        """A compiled ``TrainingModel`` around the Transformer chosen by ``hp``."""
        from tf_transformer.training.trainer import build_training_model

        self.prepare()
        cfg = self.trial_config(self.declare(hp))
        keras.utils.set_random_seed(cfg.train.seed)
        return build_training_model(cfg)

    def _dataset_fns(self, cfg: Config):
        """``(train_fn, valid_fn)``: per-input-context dataset functions over ``cfg.data``."""
        from tf_transformer import data as data_api

        # A fresh in-graph tokenizer per trial: Keras Tuner clears the Keras session before each
        # build, which invalidates the SentencePiece resource an earlier dataset created.
        tokenizer = data_api.Tokenizer(self.prepare().model_proto)

        def train_fn(context):
            return data_api.make_dataset(cfg.data, "train", tokenizer, training=True, input_context=context,
                                         verbose=False)

        def valid_fn(context):
            return data_api.make_dataset(cfg.data, "valid", tokenizer, training=False, input_context=context,
                                         verbose=False)

        return train_fn, valid_fn

    def datasets(self, cfg: Config, strategy):
        """``(train, valid)`` for ``model.fit`` from ``cfg.data``, split over ``strategy``'s replicas."""
        from tf_transformer.training.strategy import distribute

        train_fn, valid_fn = self._dataset_fns(cfg)
        return distribute(strategy, train_fn), distribute(strategy, valid_fn)

    def validation_steps_for(self, cfg: Config, strategy) -> int:
        """Steps that cover the config's validation set once on ``strategy``: counted once per
        data section and replica count (trials that change only the model share it), so that
        Keras knows the validation length and prints no "ran out of data" after every epoch."""
        from tf_transformer.training.strategy import steps_per_replica

        replicas = strategy.num_replicas_in_sync
        key = (repr(cfg.data), replicas)
        if key not in self._validation_steps:
            _, valid_fn = self._dataset_fns(cfg)
            steps = steps_per_replica(valid_fn, replicas)
            if not steps:
                from tf_transformer.data.sources import describe
                from tf_transformer.errors import DataError

                raise DataError(f"{describe(cfg.data, 'valid')}: no validation pairs; the search's objective "
                                "(val_loss) needs some")
            self._validation_steps[key] = steps
        return self._validation_steps[key]

    def fit(self, hp, model, *args, validation_data=None, epochs=None, steps_per_epoch=None, callbacks=None,
            initial_epoch: int = 0, validation_steps=None, verbose=None, **kwargs):
        """Train ``model`` (from :meth:`build`) for this trial; returns the metrics dict
        (see the module docstring). Positional ``x`` (and ``validation_data``) override the
        config's data; ``epochs * steps_per_epoch`` is the update budget."""
        from tf_transformer.model import count_parameters
        from tf_transformer.training.callbacks import WallClockBudget, current_step

        cfg = self.trial_config(self.declare(hp))
        k = max(1, int(getattr(model, "accumulation_steps", 1)))
        steps_per_epoch = int(steps_per_epoch or self.steps_per_epoch or cfg.train.steps_per_epoch)
        if epochs is None:
            epochs = max(1, math.ceil(cfg.train.train_steps / steps_per_epoch))
        x = _made(args[0] if args else kwargs.pop("x", None))
        validation_data = _made(validation_data)
        user_data = x is not None or validation_data is not None
        kwargs.pop("y", None)
        own_validation = validation_data is None
        if x is None or validation_data is None:
            train_ds, valid_ds = self.datasets(cfg, model.distribute_strategy)
            x = train_ds if x is None else x
            validation_data = valid_ds if validation_data is None else validation_data
        if validation_steps is None:
            validation_steps = cfg.train.validation_steps
        if validation_steps is None and own_validation:
            validation_steps = self.validation_steps_for(cfg, model.distribute_strategy)
        callbacks = list(callbacks or [])
        # the token-budget batches are shuffled by the pipeline: Keras' default shuffle=True would
        # only print that it ignores it for a tf.data.Dataset
        kwargs.setdefault("shuffle", False)
        budget = None
        if self.max_minutes:
            budget = WallClockBudget(self.max_minutes, k, log=self.log)
            callbacks.insert(0, budget)
        callbacks.insert(0, keras.callbacks.TerminateOnNaN())
        if initial_epoch:
            # Hyperband resumes an earlier trial: continue its learning-rate schedule.
            model.optimizer.iterations.assign(int(initial_epoch) * steps_per_epoch)
        start = time.time()
        try:
            history = model.fit(x, validation_data=validation_data, epochs=int(epochs),
                                initial_epoch=int(initial_epoch), steps_per_epoch=steps_per_epoch * k,
                                validation_steps=validation_steps, callbacks=callbacks,
                                verbose=self.verbose if verbose is None else verbose, **kwargs)
        except Exception as e:  # noqa: BLE001 (only this one case is reworded)
            if user_data and type(e).__name__ == "NotFoundError" and "Resource" in str(e):
                from tf_transformer.errors import UserError

                raise UserError(
                    "a dataset given to tuner.search uses a resource (e.g. make_dataset's in-graph SentencePiece "
                    "tokenizer) that Keras Tuner's clear_session() before this trial destroyed: give a function "
                    "that makes the dataset instead, e.g. tuner.search(lambda: make_dataset(cfg.data, 'train', "
                    "tok), validation_data=lambda: make_dataset(cfg.data, 'valid', tok, training=False), ...)"
                ) from e
            raise
        seconds = time.time() - start
        results = self._pick_epoch(history.history)
        results["params"] = float(count_parameters(model.transformer))
        results["train_minutes"] = seconds / 60.0
        results["steps"] = float(current_step(model))
        if self.bleu:
            results["val_bleu"] = self.bleu_score(model.transformer, cfg)
        return results

    def _pick_epoch(self, history: dict) -> dict:
        """Metrics of the epoch that is best by the objective (the last one if it is not logged),
        ``epoch`` (its number, from 1) and ``epochs`` (how many were trained)."""
        out = self._best_epoch(history)
        out["epochs"] = float(len(next(iter(history.values()), [])))
        return out

    def _best_epoch(self, history: dict) -> dict:
        """Metrics of the epoch that is best by the objective (the last one if it is not logged)."""
        import numpy as np

        def value(v):
            return float(np.asarray(v).reshape(-1)[0])

        epochs = len(next(iter(history.values()), []))
        if epochs == 0:
            raise RuntimeError("model.fit ran no epoch")
        best = epochs - 1
        series = history.get(self.objective)
        if series:
            vals = [value(v) for v in series]
            finite = [i for i, v in enumerate(vals) if math.isfinite(v)]
            if finite:
                pick = min if OBJECTIVES[self.objective] == "min" else max
                best = pick(finite, key=lambda i: vals[i])
        out = {key: value(vs[best]) for key, vs in history.items() if len(vs) == epochs}
        out["epoch"] = float(best + 1)
        return out

    def bleu_score(self, transformer, cfg: Config) -> float:
        """sacreBLEU of greedy translations of the first ``bleu_sentences`` validation sentences."""
        from tf_transformer.data import read_parallel_text
        from tf_transformer.tuning.scoring import corpus_bleu

        if self._bleu_data is None:
            sources, targets = read_parallel_text(cfg.data, "valid")
            self._bleu_data = (sources[: self.bleu_sentences], targets[: self.bleu_sentences])
        sources, targets = self._bleu_data
        result = corpus_bleu(transformer, self.prepare(), sources, targets, beam_size=1,
                             max_extra_length=cfg.decode.max_extra_length, batch_size=cfg.decode.batch_size)
        return result["bleu"]


def _made(data):
    """``data`` itself, or what it makes when it is a function (a dataset factory, called once
    per trial so that its resources belong to this trial's session)."""
    return data() if callable(data) and not hasattr(data, "element_spec") else data
