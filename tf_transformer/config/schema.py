"""Typed configuration: the model, data, training and decoding sections and their rules.

Every error names the field, the value and the rule, e.g.
``model.d_model=500 is not divisible by model.num_heads=8 (key_dim is derived as d_model/num_heads)``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Union

from tf_transformer.errors import ConfigError

#: ``train.strategy`` values (``tft train --strategy``).
STRATEGIES = ("auto", "default", "mirrored", "multiworker")
#: ``data.source`` values.
DATA_SOURCES = ("multi30k", "text", "tfds", "prepared")
#: ``data.service_mode`` values (``tf.data.experimental.service`` processing modes).
SERVICE_MODES = ("distributed_epoch", "parallel_epochs")
#: ``data.batching`` values (how training batches are formed).
BATCHING_MODES = ("buckets", "sorted_chunks", "source_sorted")
#: ``decode.stop_rule`` values (beam search's stop rules: tf_transformer.decoding.beam_search).
STOP_RULES = ("bound", "beam_finished")
#: ``model.attention_init`` values (how the attention projections start: tf_transformer.layers.encoder).
ATTENTION_INITS = ("independent", "tied_qk")
#: ``model.ffn_init`` values (how the position-wise FFN's weights start: tf_transformer.layers.feed_forward).
FFN_INITS = ("glorot_uniform", "fan_in_uniform")

#: A file field of the data section: one path, a glob (``corpus/*.en.gz``) or a list of them.
Paths = Union[str, list[str], None]


# ---------------------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    """Architecture hyper-parameters (paper sections 3.1-3.5). Defaults are the paper's base model.

    ``key_dim`` (d_k) and ``value_dim`` (d_v) default to ``d_model // num_heads``; Table 3
    sets them independently.
    """

    vocab_size: Optional[int] = None
    d_model: int = 512
    num_layers: int = 6
    num_heads: int = 8
    key_dim: Optional[int] = None
    value_dim: Optional[int] = None
    d_ff: int = 2048
    dropout: float = 0.1  # P_drop: on each sublayer's output and on embeddings + positions
    attention_dropout: float = 0.0  # on the attention weights (not in the paper; tensor2tensor's option)
    relu_dropout: float = 0.0  # inside the FFN, after the ReLU (not in the paper; tensor2tensor's option)
    # word dropout (not in the paper; Sennrich et al., WMT 2016): in training, each source /
    # target-input token's whole embedding is zeroed with this probability (the rest scaled
    # by 1 / (1 - p)) before the positions are added
    source_word_dropout: float = 0.0
    target_word_dropout: float = 0.0
    position_encoding: str = "sinusoidal"  # or "learned" (Table 3 row E)
    max_length: int = 512  # rows of the learned position table; sinusoids have no limit
    layer_norm_epsilon: float = 1e-6
    # biases on the four attention projections (the paper's equations and tensor2tensor have
    # none; fairseq and Keras' own MultiHeadAttention have them)
    attention_bias: bool = False
    # Glorot-uniform gain of the query, key and value kernels (W^O keeps gain 1); fairseq
    # uses 1/sqrt(2) = 0.7071 when the three have one size
    qkv_init_gain: float = 1.0
    # "independent": W^Q, W^K, W^V, W^O each drawn on their own; "tied_qk": W^K starts as a
    # copy of W^Q (then W^Q W^K^T ~ I: every head starts by attending to keys like its query)
    attention_init: str = "independent"
    # "glorot_uniform": both FFN kernels Glorot uniform, biases zero; "fan_in_uniform": kernels
    # and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's nn.Linear default, which fairseq's
    # FFN keeps (about a third of Glorot's output scale at d_ff = 2 d_model)
    ffn_init: str = "glorot_uniform"
    pad_id: int = 0  # the vocabulary's padding id (ours: 0); padded positions are masked everywhere

    def resolved(self) -> "ModelConfig":
        """A copy with ``key_dim``/``value_dim`` filled in."""
        c = dataclasses.replace(self)
        if c.key_dim is None:
            c.key_dim = c.d_model // c.num_heads
        if c.value_dim is None:
            c.value_dim = c.d_model // c.num_heads
        return c

    def validate(self, require_vocab: bool = True) -> None:
        p = "model."
        if require_vocab and self.vocab_size is None:
            raise ConfigError(
                f"{p}vocab_size is missing: set it in the config or build a vocabulary "
                "(tft build-vocab) and point data.vocab_model at it"
            )
        if self.vocab_size is not None:
            _positive(p + "vocab_size", self.vocab_size)
        for name in ("d_model", "num_layers", "num_heads", "d_ff", "max_length"):
            _positive(p + name, getattr(self, name))
        for name in ("key_dim", "value_dim"):
            value = getattr(self, name)
            if value is None:
                if self.d_model % self.num_heads:
                    raise ConfigError(
                        f"{p}d_model={self.d_model} is not divisible by {p}num_heads="
                        f"{self.num_heads} ({name} is derived as d_model/num_heads; "
                        f"set {p}{name} explicitly or change one of them)"
                    )
            else:
                _positive(p + name, value)
        for name in ("dropout", "attention_dropout", "relu_dropout", "source_word_dropout", "target_word_dropout"):
            _probability(p + name, getattr(self, name))
        if self.position_encoding not in ("sinusoidal", "learned"):
            raise ConfigError(
                f"{p}position_encoding={self.position_encoding!r} is not one of "
                "'sinusoidal', 'learned'"
            )
        if self.layer_norm_epsilon <= 0:
            raise ConfigError(f"{p}layer_norm_epsilon={self.layer_norm_epsilon} must be > 0")
        if not self.qkv_init_gain > 0:
            raise ConfigError(f"{p}qkv_init_gain={self.qkv_init_gain} must be > 0")
        if self.attention_init not in ATTENTION_INITS:
            raise ConfigError(f"{p}attention_init={self.attention_init!r} is not one of "
                              + ", ".join(repr(v) for v in ATTENTION_INITS))
        if self.ffn_init not in FFN_INITS:
            raise ConfigError(f"{p}ffn_init={self.ffn_init!r} is not one of " + ", ".join(repr(v) for v in FFN_INITS))
        if self.pad_id < 0:
            raise ConfigError(f"{p}pad_id={self.pad_id} must be >= 0")
        if self.vocab_size is not None and self.pad_id >= self.vocab_size:
            raise ConfigError(f"{p}pad_id={self.pad_id} must be < vocab_size={self.vocab_size}")


@dataclass
class DataConfig:
    """Where the parallel text comes from and how it is batched (paper section 5.1).

    ``source``: ``multi30k`` (the bundled copy), ``text`` (plain parallel files, .txt or
    .gz), ``tfds`` (a TFDS translation dataset such as ``wmt14_translate/de-en``) or
    ``prepared`` (the tokenized TFRecord shards ``tft prepare`` wrote, in ``prepared_dir``).
    The language direction is ``source_lang`` -> ``target_lang`` (for TFDS these are the
    feature keys, for Multi30k ``en``/``de`` in either order).
    Details of every field: ``tf_transformer/data/`` (sources.py, batching.py, tokenizer.py).
    """

    source: str = "multi30k"
    source_lang: str = "en"
    target_lang: str = "de"
    # plain text files (source == "text"): a path, a glob or a list of paths/globs each;
    # source and target files are paired one to one (each glob in sorted order);
    # for multi30k each unset one defaults to <multi30k_dir>/{train,val,test2016}.<lang>.gz
    train_source: Paths = None
    train_target: Paths = None
    valid_source: Paths = None
    valid_target: Paths = None
    test_source: Paths = None
    test_target: Paths = None
    # prepared TFRecord shards (source == "prepared"): the folder `prepare` wrote
    prepared_dir: Optional[str] = None
    multi30k_dir: Optional[str] = None  # default: the bundled copy (data/multi30k, shipped in the package)
    # TFDS (source == "tfds")
    tfds_name: Optional[str] = None
    tfds_data_dir: Optional[str] = None
    # the dataset's split names (TFDS slicing allowed, e.g. "train[:10%]") behind our train /
    # valid / test
    tfds_train_split: str = "train"
    tfds_valid_split: str = "validation"
    tfds_test_split: str = "test"
    tfds_download: bool = False  # false: the dataset must already be prepared in tfds_data_dir
    # vocabulary (tft build-vocab): one SentencePiece model shared by both languages,
    # ids pad=0 unk=1 bos=2 eos=3
    vocab_model: Optional[str] = None  # SentencePiece .model file
    vocab_size: int = 8000
    vocab_model_type: str = "bpe"  # SentencePiece's model_type: bpe, unigram, char or word
    vocab_character_coverage: float = 1.0  # share of characters covered (SentencePiece's; 1.0: all)
    vocab_input_sentence_size: int = 2_000_000  # sentences sampled (with data.seed); 0 = all
    # true: capitalised words are lowercased after a case marker (⇧ first letter, ⇪ all
    # letters) before SentencePiece sees them, and the case is restored after decoding
    # (data/case_markup.py); the vocabulary holds the markers (ids 4, 5) and must be built so
    case_markup: bool = False
    # true: source and target text are lowercased before SentencePiece sees them, as
    # multimodal-MT work prepares Multi30k (its published BLEU is on lowercased text); the
    # vocabulary is built on lowercased text and marked so (data/tokenizer.py), and every
    # tokenizer of it lowercases what it reads: the model reads and writes lowercase, and the
    # recaser the vocabulary carries (fitted on the cased training targets, data/recase.py)
    # gives decoded text its case back
    lowercase: bool = False
    # batching
    tokens_per_batch: int = 4096  # at most this many source AND target slots (padding included)
    max_length: int = 100  # pairs with either side longer (in tokens, incl. BOS/EOS) dropped
    bucket_width: int = 0  # 0 = automatic (2-token buckets up to 64, then 10% wider each)
    # training batches: "buckets" = 2-D length buckets filled pair by pair (group_by_window);
    # "sorted_chunks" = chunks of shuffle_buffer pairs sorted by length and cut into batches
    # by vectorised graph ops (per-batch, not per-pair, serial work: for large corpora);
    # "source_sorted" = the same chunks sorted by source length only and cut greedily at the
    # budget (fairseq's batching: one source length per batch, target lengths free)
    batching: str = "buckets"
    shuffle_buffer: int = 100_000
    seed: int = 1234
    invalid_utf8: str = "error"  # or "replace" (loud: counted and reported)
    stats_pass: bool = True  # one in-graph pass before training counts dropped pairs by reason
    cache: bool = False  # keep the tokenized split in memory after the first epoch (small corpora)
    # statistics and file scans are cached on disk, keyed by the files and the settings
    stats_cache: bool = True
    stats_cache_dir: Optional[str] = None  # None: $TFT_CACHE_DIR, else ~/.cache/tf-transformer
    # parallel input pipelines (each reads, tokenizes, shuffles and buckets its share of
    # the files); 0 = one per CPU core, at most 16. The batch order depends on it.
    parallel_pipelines: int = 0
    # tf.data service (tf.data.experimental.service): dispatcher address, e.g.
    # "grpc://dispatcher:5050"; None = build batches in this process
    service: Optional[str] = None
    service_mode: str = "distributed_epoch"  # or "parallel_epochs"
    service_job: Optional[str] = None  # shared job name: consumers of one job share its batches

    def validate(self) -> None:
        p = "data."
        _seed(p + "seed", self.seed)
        if self.source not in DATA_SOURCES:
            raise ConfigError(f"{p}source={self.source!r} is not one of {', '.join(map(repr, DATA_SOURCES))}")
        if self.source == "prepared" and not self.prepared_dir:
            raise ConfigError(f"{p}source='prepared' needs {p}prepared_dir (a folder written by prepare)")
        for split in ("train", "valid", "test"):
            for side in ("source", "target"):
                name = f"{split}_{side}"
                value = getattr(self, name)
                if isinstance(value, list) and (not value or not all(isinstance(v, str) and v for v in value)):
                    raise ConfigError(f"{p}{name}={value!r} must be a path, a glob or a non-empty list of them")
        if self.parallel_pipelines < 0:
            raise ConfigError(f"{p}parallel_pipelines={self.parallel_pipelines} must be >= 0 (0 = one per core)")
        if self.service_mode not in SERVICE_MODES:
            raise ConfigError(f"{p}service_mode={self.service_mode!r} is not one of "
                              f"{', '.join(map(repr, SERVICE_MODES))}")
        if self.service is not None and "://" not in self.service:
            raise ConfigError(f"{p}service={self.service!r} must be a dispatcher address such as "
                              "'grpc://host:5050'")
        if self.source == "text" and not (self.train_source and self.train_target):
            raise ConfigError(
                f"{p}source='text' needs {p}train_source and {p}train_target (parallel files)"
            )
        if self.source == "tfds" and not self.tfds_name:
            raise ConfigError(f"{p}source='tfds' needs {p}tfds_name, e.g. 'wmt14_translate/de-en'")
        for name in ("vocab_size", "tokens_per_batch", "max_length", "shuffle_buffer"):
            _positive(p + name, getattr(self, name))
        if self.vocab_size < 8:
            raise ConfigError(f"{p}vocab_size={self.vocab_size} must be >= 8 (4 ids are reserved)")
        if self.max_length < 2:
            raise ConfigError(f"{p}max_length={self.max_length} must be >= 2 (target side holds BOS/EOS)")
        if self.tokens_per_batch < self.max_length:
            raise ConfigError(
                f"{p}tokens_per_batch={self.tokens_per_batch} must be >= {p}max_length="
                f"{self.max_length} (a batch must hold at least one pair of the longest length)"
            )
        if self.batching not in BATCHING_MODES:
            raise ConfigError(f"{p}batching={self.batching!r} is not one of {', '.join(map(repr, BATCHING_MODES))}")
        if self.bucket_width < 0:
            raise ConfigError(f"{p}bucket_width={self.bucket_width} must be >= 0")
        if self.vocab_input_sentence_size < 0:
            raise ConfigError(
                f"{p}vocab_input_sentence_size={self.vocab_input_sentence_size} must be >= 0 (0 = all)"
            )
        if not 0.0 < self.vocab_character_coverage <= 1.0:
            raise ConfigError(
                f"{p}vocab_character_coverage={self.vocab_character_coverage} must be in (0, 1]"
            )
        if self.vocab_model_type not in ("bpe", "unigram", "char", "word"):
            raise ConfigError(f"{p}vocab_model_type={self.vocab_model_type!r} is not a SentencePiece model type")
        if self.invalid_utf8 not in ("error", "replace"):
            raise ConfigError(f"{p}invalid_utf8={self.invalid_utf8!r} is not one of 'error', 'replace'")
        if self.source_lang == self.target_lang:
            raise ConfigError(f"{p}source_lang and {p}target_lang are both {self.source_lang!r}")
        if self.lowercase and self.case_markup:
            raise ConfigError(f"{p}lowercase and {p}case_markup are both true: case markup keeps the case "
                              "that lowercasing drops; choose one")
        if self.source == "multi30k" and self.multi30k_dir is None:
            for name in ("source_lang", "target_lang"):
                if getattr(self, name) not in ("en", "de"):
                    raise ConfigError(
                        f"{p}{name}={getattr(self, name)!r}: the bundled Multi30k has 'en' and 'de' only"
                    )


@dataclass
class TrainConfig:
    """The paper's recipe (section 5): Adam(0.9, 0.98, 1e-9), warmup/inverse-sqrt,
    label smoothing 0.1, checkpoints every 10 minutes, averaging of the last 5."""

    train_steps: int = 100_000
    steps_per_epoch: int = 1000  # Keras "epoch" = this many updates (logs, validation)
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0  # multiplies d_model^-0.5 * min(...)
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    label_smoothing: float = 0.1
    clip_norm: Optional[float] = None  # clip the global gradient norm to this; None = no clipping (the paper)
    tokens_per_update: Optional[int] = None  # gradient accumulation target (target tokens)
    checkpoint_every_minutes: float = 10.0
    keep_checkpoints: int = 20
    average_last: int = 5
    backup_every_steps: Optional[int] = None  # resumable backup every N updates; None = every epoch
    model_dir: str = "runs/default"
    strategy: str = "auto"  # auto | default | mirrored | multiworker
    mixed_precision: Optional[str] = None  # None = float32 | mixed_float16 | mixed_bfloat16 | auto (bf16 where native)
    jit_compile: bool = False
    validation_steps: Optional[int] = None  # None = whole validation set
    max_minutes: Optional[float] = None  # wall-clock budget of each sitting (a resume starts it afresh)
    seed: int = 1234
    # BLEU on the validation set during training (training/validation_bleu.py)
    eval_bleu_every_steps: Optional[int] = None  # None = off; a multiple of steps_per_epoch
    eval_beam_size: int = 1  # 1 = greedy
    eval_max_sentences: Optional[int] = None  # None = the whole validation set; N = its first N pairs
    best_metric: str = "val_bleu"  # or "val_loss": what best/ and early stopping look at
    keep_best: int = 1  # best weight files kept in <model_dir>/best/
    early_stopping_patience: Optional[int] = None  # stop after N evaluations without improvement
    # best/ and early stopping follow the mean of best_metric over the last N evaluations
    # (1: each evaluation alone, as fairseq); greedy val BLEU is noisy from one to the next
    best_metric_window: int = 1
    log_every_steps: int = 100  # stdout not a terminal: one progress line every N updates (and per epoch)
    tensorboard_every_steps: Optional[int] = 100  # TensorBoard train scalars every N updates; None = per epoch

    def validate(self) -> None:
        p = "train."
        if self.validation_steps is not None and self.validation_steps <= 0:
            raise ConfigError(f"{p}validation_steps={self.validation_steps} must be > 0 or null (null: the whole "
                              "validation set)")
        _seed(p + "seed", self.seed)
        for name in ("train_steps", "steps_per_epoch", "warmup_steps", "keep_checkpoints", "average_last",
                     "log_every_steps"):
            _positive(p + name, getattr(self, name))
        if self.learning_rate_scale <= 0:
            raise ConfigError(f"{p}learning_rate_scale={self.learning_rate_scale} must be > 0")
        for name in ("adam_beta_1", "adam_beta_2"):
            v = getattr(self, name)
            if not 0.0 <= v < 1.0:
                raise ConfigError(f"{p}{name}={v} must be in [0, 1)")
        if self.adam_epsilon <= 0:
            raise ConfigError(f"{p}adam_epsilon={self.adam_epsilon} must be > 0")
        _probability(p + "label_smoothing", self.label_smoothing)
        if self.clip_norm is not None and self.clip_norm <= 0:
            raise ConfigError(f"{p}clip_norm={self.clip_norm} must be > 0 or null")
        if self.tokens_per_update is not None:
            _positive(p + "tokens_per_update", self.tokens_per_update)
        if self.tensorboard_every_steps is not None:
            _positive("train.tensorboard_every_steps", self.tensorboard_every_steps)
        if self.backup_every_steps is not None:
            _positive(p + "backup_every_steps", self.backup_every_steps)
        if self.checkpoint_every_minutes <= 0:
            raise ConfigError(f"{p}checkpoint_every_minutes={self.checkpoint_every_minutes} must be > 0")
        if self.strategy not in STRATEGIES:
            raise ConfigError(
                f"{p}strategy={self.strategy!r} is not one of {', '.join(map(repr, STRATEGIES))}"
            )
        if self.mixed_precision not in (None, "float32", "mixed_float16", "mixed_bfloat16", "auto"):
            raise ConfigError(
                f"{p}mixed_precision={self.mixed_precision!r} is not one of null, "
                "'float32', 'mixed_float16', 'mixed_bfloat16', 'auto'"
            )
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise ConfigError(f"{p}max_minutes={self.max_minutes} must be > 0 or null")
        if self.eval_bleu_every_steps is not None:
            _positive(p + "eval_bleu_every_steps", self.eval_bleu_every_steps)
            if self.eval_bleu_every_steps % self.steps_per_epoch:
                raise ConfigError(
                    f"{p}eval_bleu_every_steps={self.eval_bleu_every_steps} must be a multiple of "
                    f"{p}steps_per_epoch={self.steps_per_epoch} (BLEU is computed at the end of an epoch, "
                    "next to the validation loss)")
        _positive(p + "eval_beam_size", self.eval_beam_size)
        if self.eval_max_sentences is not None:
            _positive(p + "eval_max_sentences", self.eval_max_sentences)
        if self.best_metric not in ("val_bleu", "val_loss"):
            raise ConfigError(f"{p}best_metric={self.best_metric!r} is not one of 'val_bleu', 'val_loss'")
        _positive(p + "best_metric_window", self.best_metric_window)
        if self.keep_best < 0:
            raise ConfigError(f"{p}keep_best={self.keep_best} must be >= 0")
        if self.early_stopping_patience is not None:
            _positive(p + "early_stopping_patience", self.early_stopping_patience)
            if self.eval_bleu_every_steps is None:
                raise ConfigError(
                    f"{p}early_stopping_patience={self.early_stopping_patience} needs "
                    f"{p}eval_bleu_every_steps (how often the validation set is scored)")


@dataclass
class DecodeConfig:
    """Beam search as in the paper (section 6.1)."""

    beam_size: int = 4
    alpha: float = 0.6
    max_extra_length: int = 50  # output may be up to input length + this
    batch_size: int = 64  # sentences per decoding batch
    # when beam search stops a sentence: "bound" (the paper's early stop, exact under the
    # length penalty) or "beam_finished" (also once beam_size hypotheses have ended: fairseq,
    # OpenNMT, CTranslate2)
    stop_rule: str = "bound"

    def validate(self) -> None:
        p = "decode."
        _positive(p + "beam_size", self.beam_size)
        _positive(p + "batch_size", self.batch_size)
        if self.alpha < 0:
            raise ConfigError(f"{p}alpha={self.alpha} must be >= 0")
        if self.max_extra_length < 0:
            raise ConfigError(f"{p}max_extra_length={self.max_extra_length} must be >= 0")
        if self.stop_rule not in STOP_RULES:
            raise ConfigError(f"{p}stop_rule={self.stop_rule!r} must be one of {', '.join(map(repr, STOP_RULES))}")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    name: Optional[str] = None

    def validate(self, require_vocab: bool = True) -> "Config":
        self.model.validate(require_vocab=require_vocab)
        self.data.validate()
        self.train.validate()
        self.decode.validate()
        if self.model.position_encoding == "learned" and self.model.max_length < self.data.max_length:
            raise ConfigError(
                f"model.max_length={self.model.max_length} (rows of the learned position table) is shorter than "
                f"data.max_length={self.data.max_length}: training sequences would index past the table; set "
                f"model.max_length >= {self.data.max_length} or lower data.max_length")
        return self

    def to_dict(self) -> dict:
        return {
            "model": dataclasses.asdict(self.model),
            "data": dataclasses.asdict(self.data),
            "train": dataclasses.asdict(self.train),
            "decode": dataclasses.asdict(self.decode),
        }


SECTIONS = {"model": ModelConfig, "data": DataConfig, "train": TrainConfig, "decode": DecodeConfig}


def _seed(where: str, value) -> None:
    if not 0 <= value < 2**32:  # what keras.utils.set_random_seed and NumPy's legacy seeding accept
        raise ConfigError(f"{where}={value} must be in [0, 2**32)")


def _positive(where: str, value) -> None:
    if value is None or value <= 0:
        raise ConfigError(f"{where}={value} must be > 0")


def _probability(where: str, value) -> None:
    if not 0.0 <= value < 1.0:
        raise ConfigError(f"{where}={value} must be in [0, 1)")
