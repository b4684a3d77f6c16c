"""``tft translate``: translate a file or stdin to stdout with beam search; the decoding
arguments ``tft evaluate`` and ``tft export`` share."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

from tf_transformer.cli._common import (
    add_config_arguments,
    add_decode_settings,
    check_output_file,
    flags,
    read_input_lines,
    resolve_member,
    resolve_run,
    write_output_text,
)
from tf_transformer.errors import UserError

RULES = """\
input rules:
  - one sentence per line, UTF-8; invalid bytes are replaced with U+FFFD and the
    lines that had them are reported on stderr (the translation still runs)
  - an empty or whitespace-only line gives an empty output line
  - a line longer than the model's limit (model max_length subword tokens) is cut to
    its first max_length tokens (reported on stderr)
  - output lines match input lines one to one, in input order (with --n-best N: up to N
    lines per input line, each starting with its input line's 0-based number)
  - at most (source tokens + --max-extra-len) output tokens, never more than max_length
  - --stream (the default when stdin is a terminal): each line is translated and its
    translation written (and flushed) as soon as the line is read, for interactive use and
    pipes that stay open; lines that arrive while one is decoded are decoded together next
    (up to --batch-size per thread). Otherwise the whole input is read first
    and decoded in batches of similar length, which is fastest for files

environment:
  TF_ENABLE_ONEDNN_OPTS  set to 0 (TensorFlow's own CPU kernels, not oneDNN's) unless you set it:
                         decoding meets many small matrix shapes, and oneDNN prepares a kernel for
                         each new one; the outputs are the same, the decoding faster
"""


class _ModelsAction(argparse.Action):
    """``--model`` given more than once: the first stays ``args.model`` (its run directory gives
    the vocabulary and config defaults), the others go to ``args.ensemble``; a command that decodes
    one model only (``ensemble=False``) refuses the repeat instead of keeping the last."""

    def __init__(self, option_strings, dest, ensemble: bool = False, **kwargs):
        self.ensemble = ensemble
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is None:
            setattr(namespace, self.dest, values)
        elif self.ensemble:
            namespace.ensemble = list(getattr(namespace, "ensemble", None) or []) + [values]
        else:
            parser.error(f"--model given twice ({getattr(namespace, self.dest)}, {values}): this command takes "
                         "one model (an ensemble decodes with tft translate or tft evaluate)")


def add_model_arguments(parser: argparse.ArgumentParser, engines: bool = False, config: bool = True,
                        ensemble: bool = False) -> None:
    """``--model`` (a run directory or a ``.keras`` file) and ``--vocab``; ``engines``: the command
    has ``--engine``; ``config``: it has ``--config`` (whose ``data.vocab_model`` is a default);
    ``ensemble``: ``--model`` may be repeated to decode with an ensemble (``args.ensemble``)."""
    ct2 = ("; with --engine ctranslate2, the directory written by tft export --format ctranslate2" if engines else "")
    several = ("; give --model more than once to decode with an ensemble: the mean of the models' next-token "
               "probabilities (the models must share the vocabulary; the first one's run directory gives the "
               "--vocab and --config defaults)" if ensemble else "")
    parser.add_argument("--model", required=True, metavar="RUN_DIR_OR_KERAS", action=_ModelsAction, ensemble=ensemble,
                        help="a run directory of tft train (its model.keras) or a .keras file (model.keras, "
                             "averaged.keras)" + ct2 + several)
    parser.set_defaults(ensemble=[])
    parser.add_argument("--vocab", default=None, metavar="SPM_MODEL",
                        help="the SentencePiece .model used in training (default: vocab.model of the model's run "
                             "directory" + (", else data.vocab_model of --config" if config else "")
                             + ("; with --engine ctranslate2, the copy inside the export" if engines else "") + ")")


def add_decode_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by ``tft translate`` and ``tft evaluate``."""
    add_model_arguments(parser, engines=True, ensemble=True)
    add_config_arguments(parser, what=" whose decode (and data) sections give the defaults below (default: "
                                      "config.yaml of the model's run directory)")
    add_decode_settings(parser)
    parser.add_argument("--batch-size", type=int, default=None,
                        help="sentences per batch (default: decode.batch_size of the config, 64)")
    parser.add_argument("--xla", action="store_true",
                        help="compile the decoding graph with XLA: one compilation per batch shape, and fixed shapes "
                             "(a full-length key/value cache, no shrinking batch): slower than the default graph for "
                             "greedy and beam search alike on the demo model (tools/bench/RESULTS.md)")
    parser.add_argument("--engine", default="tensorflow", choices=("tensorflow", "ctranslate2"),
                        help="tensorflow (default: our beam search) or ctranslate2 (a CTranslate2 export; "
                             "needs the [ct2] extra; --alpha 0 gives our outputs exactly, see docs/serving.md)")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads. With --engine tensorflow: N batches decoded at once, one thread each "
                             "(default: one per CPU core this process may use; 0 = TensorFlow's own default, every op "
                             "split over all cores, 1.5-2x slower on small models: tools/bench/RESULTS.md); with "
                             "ctranslate2: its intra_threads (default 0: its own choice)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def decode_settings(args):
    """``(config or None, DecodeConfig)`` from ``--config``/``--set`` and the flags."""
    from tf_transformer.config import DecodeConfig, load_config

    if getattr(args, "engine", "tensorflow") == "tensorflow" and not getattr(args, "run_resolved", False):
        resolve_run(args, args.command)
        args.ensemble = [resolve_member(path, args.vocab) for path in getattr(args, "ensemble", None) or []]
        args.run_resolved = True
    cfg = None
    if args.config:
        cfg = load_config(args.config, overrides=args.overrides)
        decode = cfg.decode
    else:
        if args.overrides:
            raise UserError("--set needs --config (the overrides apply to a config)")
        decode = DecodeConfig()
        if getattr(args, "engine", "tensorflow") == "ctranslate2":
            _export_decode_defaults(args, decode)
    for flag, field in (("beam", "beam_size"), ("alpha", "alpha"), ("max_extra_len", "max_extra_length"),
                        ("batch_size", "batch_size"), ("stop_rule", "stop_rule")):
        value = getattr(args, flag)
        if value is not None:
            setattr(decode, field, value)
    from tf_transformer.errors import ConfigError

    try:
        decode.validate()
    except ConfigError as e:
        flag = {"decode.beam_size": "--beam", "decode.alpha": "--alpha", "decode.max_extra_length": "--max-extra-len",
                "decode.batch_size": "--batch-size", "decode.stop_rule": "--stop-rule"}
        text = str(e)
        for k, v in flag.items():
            text = text.replace(k, v)
        raise UserError(text) from None
    return cfg, decode


def _export_decode_defaults(args, decode) -> None:
    """A CTranslate2 export's recorded decode settings (``tft_export.json``: the ``decode``
    section it was exported with) as ``decode``'s defaults, as a run directory's config gives
    them for ``--engine tensorflow``; the flags still override them."""
    from tf_transformer.serving.ctranslate2 import read_export_info

    try:
        recorded = read_export_info(args.model).get("decode") or {}
    except UserError:
        return  # not an export: said when the translator is made, after the flags' own checks
    for field in ("beam_size", "alpha", "max_extra_length"):
        if field in recorded:
            setattr(decode, field, type(getattr(decode, field))(recorded[field]))


def build_translator(args):
    """Model, tokenizer and :class:`Translator` from the shared arguments."""
    from tf_transformer.decoding.translator import Translator

    cfg, decode = decode_settings(args)
    n_best = _translations_per_line(args, decode)
    sampling = sampling_settings(args, decode)
    unused = _search_flags_given(args)
    if not sampling and decode.beam_size == 1 and unused:  # a note, not an error: sweeps over --beam include 1
        print(f"tft {args.command}: note: {', '.join(unused)} {'does' if len(unused) == 1 else 'do'} not apply to "
              "greedy search (--beam 1)", file=sys.stderr)
    if getattr(args, "engine", "tensorflow") == "ctranslate2":
        if getattr(args, "ensemble", None):
            raise UserError(f"--model given {1 + len(args.ensemble)} times: an ensemble decodes with --engine "
                            "tensorflow only (a CTranslate2 export holds one model)")
        vocab = args.vocab or (cfg.data.vocab_model if cfg is not None else None)
        translator = build_ct2_translator(args, decode, vocab, n_best=n_best, **sampling)
        mark(args, "model and vocabulary")
        return cfg, decode, _with_mbr(translator, args)
    threads = getattr(args, "threads", None)
    if threads is not None and threads < 0:
        raise UserError(f"--threads {threads}: must be >= 0 (0: TensorFlow's own default)")
    if threads is None:  # the default: one decoding thread per usable core
        from tf_transformer.data.batching import usable_cores

        threads = usable_cores()
        import_tensorflow(threads, required=False)
    else:
        import_tensorflow(threads)
    model, tok = load_model_and_vocabulary(args, cfg)
    mark(args, "model and vocabulary")
    translator = Translator(model, tok, beam_size=decode.beam_size, alpha=decode.alpha,
                            max_extra_length=decode.max_extra_length, batch_size=decode.batch_size,
                            jit_compile=args.xla, workers=max(threads, 1), stop_rule=decode.stop_rule,
                            n_best=n_best, **sampling)
    return cfg, decode, _with_mbr(translator, args)


def _translations_per_line(args, decode) -> int:
    """How many translations of each line the search is to give: ``--n-best``, or ``--mbr``'s
    candidates; checked against ``--sample`` and the beam size."""
    n_best, mbr = getattr(args, "n_best", 1), getattr(args, "mbr", None)
    flag = "--n-best"
    if mbr is None and getattr(args, "mbr_utility", None) is not None:
        raise UserError("--mbr-utility applies to --mbr only")
    if mbr is not None:
        if n_best > 1:
            raise UserError("--mbr N writes one translation per line, chosen among N candidates: leave out --n-best")
        if mbr < 2:
            raise UserError(f"--mbr {mbr}: the number of candidates to choose among; must be >= 2")
        n_best, flag = mbr, "--mbr"
    if getattr(args, "sample", False):
        if n_best < 1:
            raise UserError(f"--n-best {n_best}: with --sample, the number of samples per line; must be >= 1")
    elif not 1 <= n_best <= decode.beam_size:
        raise UserError(f"{flag} {n_best}: must be between {1 if mbr is None else 2} and the beam size "
                        f"({decode.beam_size}; --beam): an n-best list comes from beam search with at least that "
                        "many beams" + ("; or add --sample to choose among N samples"
                                        if mbr is not None and hasattr(args, "sample") else ""))
    return n_best


def _with_mbr(translator, args):
    """``translator``, made to choose one translation per line by MBR (by ``--mbr-utility``)
    with ``--mbr``."""
    if getattr(args, "mbr", None) is None:
        return translator
    from tf_transformer.evaluation.mbr import MBRTranslator

    return MBRTranslator(translator, getattr(args, "mbr_utility", None) or "chrf")


def _search_flags_given(args) -> list[str]:
    """The beam-search-only flags given (``--alpha``, ``--stop-rule``): what greedy search and
    sampling do not use."""
    return [flag for flag, name in (("--alpha", "alpha"), ("--stop-rule", "stop_rule"))
            if getattr(args, name, None) is not None]


def sampling_settings(args, decode) -> dict:
    """``Translator`` keywords of ``--sample`` and its ``--sample-topk``, ``--sample-topp``,
    ``--temperature`` and ``--seed`` (``{}`` without ``--sample``; then those flags are refused,
    not ignored);
    ``--sample`` decodes with one beam, so it sets ``decode.beam_size`` to 1."""
    given = [flag for flag, name in (("--sample-topk", "sample_topk"), ("--sample-topp", "sample_topp"),
                                     ("--sample-epsilon", "sample_epsilon"), ("--temperature", "temperature"),
                                     ("--seed", "seed"))
             if getattr(args, name, None) is not None]
    if not getattr(args, "sample", False):
        if given:
            raise UserError(f"{', '.join(given)}: {'applies' if len(given) == 1 else 'apply'} to --sample only")
        return {}
    if args.beam not in (None, 1):
        raise UserError("--sample draws one token at a time: leave out --beam (or give --beam 1); for several "
                        "samples per line give --n-best N")
    top_k = 0 if args.sample_topk is None else args.sample_topk
    top_p = 1.0 if args.sample_topp is None else args.sample_topp
    epsilon = 0.0 if args.sample_epsilon is None else args.sample_epsilon
    temperature = 1.0 if args.temperature is None else args.temperature
    if top_k < 0:
        raise UserError(f"--sample-topk {top_k}: must be >= 0 (0: the whole vocabulary)")
    if not 0 < top_p <= 1:
        raise UserError(f"--sample-topp {top_p:g}: must be > 0 and <= 1 (1: no nucleus)")
    if not 0 <= epsilon < 1:
        raise UserError(f"--sample-epsilon {epsilon:g}: must be >= 0 and < 1 (0: no cut)")
    if not temperature > 0:
        raise UserError(f"--temperature {temperature:g}: must be > 0")
    from tf_transformer.decoding.batches import MIN_TEMPERATURE

    if temperature < MIN_TEMPERATURE:
        raise UserError(f"--temperature {temperature:g}: must be >= {MIN_TEMPERATURE:g} (below it a draw is the most "
                        "probable token: for that, leave out --sample)")
    search_only = _search_flags_given(args)
    if search_only:
        raise UserError(f"{', '.join(search_only)}: beam search {'settings' if len(search_only) > 1 else 'setting'};"
                        " --sample draws one token at a time and does not use "
                        f"{'them' if len(search_only) > 1 else 'it'}")
    if epsilon and getattr(args, "engine", "tensorflow") == "ctranslate2":
        raise UserError("--sample-epsilon: CTranslate2's sampler has no epsilon cut; leave out --engine ctranslate2")
    decode.beam_size = 1
    return dict(sample=True, top_k=top_k, top_p=top_p, temperature=temperature, epsilon=epsilon,
                seed=0 if args.seed is None else args.seed)


def mark(args, phase: str, note: str = "") -> None:
    """End ``phase`` on ``--timings``' clock (:class:`tf_transformer.cli._common.PhaseClock`)."""
    clock = getattr(args, "_clock", None)
    if clock is not None:
        clock.mark(phase, note)


def import_tensorflow(threads: int = 0, required: bool = True) -> None:
    """Import TensorFlow for decoding (quietly and without matplotlib:
    :func:`tf_transformer.cli._quiet.import_tensorflow`) and set its ``--threads``
    (:func:`tf_transformer.decoding.translator.set_cpu_threads`). With ``required=False``
    (the default thread count, not one asked for) a TensorFlow that already runs in this
    process keeps its threads instead of being an error."""
    from tf_transformer.cli._quiet import import_tensorflow as quiet_import

    quiet_import()
    if threads:
        from tf_transformer.decoding.translator import set_cpu_threads

        try:
            with flags({"threads=": "--threads "}):
                set_cpu_threads(threads)
        except UserError:
            if required:
                raise


#: ``--chunk-lines``' default: lines of a whole input decoded (and, with ``--resume``, recorded) at a time.
CHUNK_LINES = 20_000

#: Library words -> the flags that give them.
MODEL_FLAGS = {"model ": "--model ", "vocabulary ": "--vocab "}
#: The words of :func:`tf_transformer.decoding.batches.check_decode_settings` (and ``threads=``) -> flags.
DECODE_FLAGS = {"beam_size=": "--beam ", "alpha=": "--alpha ", "max_extra_length=": "--max-extra-len ",
                "batch_size=": "--batch-size ", "threads=": "--threads ", "stop_rule=": "--stop-rule "}


def load_model_and_vocabulary(args, cfg):
    """The ``--model`` and its ``--vocab`` (default: ``data.vocab_model`` of ``--config``)."""
    from tf_transformer.decoding.translator import load_tokenizer
    from tf_transformer.io import load_model

    vocab = args.vocab or (cfg.data.vocab_model if cfg is not None else None)
    if not vocab:
        raise UserError("--vocab is required: the model is not in a run directory with a vocab.model, and no "
                        "--config whose data.vocab_model names the SentencePiece model was given")
    if not args.vocab:  # say where it came from, as resolve_run does for a run directory's own
        print(f"tft {args.command}: --vocab {vocab} (data.vocab_model of --config {args.config})", file=sys.stderr)
    with flags(MODEL_FLAGS):
        model = load_model(args.model)
        members = [load_model(path) for path in getattr(args, "ensemble", None) or []]
    if members:
        from tf_transformer.decoding.ensemble import Ensemble

        paths = [args.model, *args.ensemble]
        model = Ensemble([model, *members], names=[f"--model {p}" for p in paths])
    with flags(MODEL_FLAGS):
        return model, load_tokenizer(vocab, model)


def build_ct2_translator(args, decode, vocab, **search):
    """A :class:`tf_transformer.serving.ctranslate2.CT2Translator` (no TensorFlow is imported),
    with the ``search`` keywords (``n_best``, sampling). The vocabulary defaults to the copy
    inside the export directory."""
    from tf_transformer.serving.ctranslate2 import CT2Translator, ct2_length_penalty

    if args.xla:
        raise UserError("--xla: only for --engine tensorflow")
    if args.stop_rule == "bound":
        raise UserError("--stop-rule bound: only for --engine tensorflow. CTranslate2's beam search has one stop "
                        "rule: it stops a sentence once beam-size hypotheses have ended (--stop-rule beam_finished); "
                        "it cannot run our exact early stop")
    tok = None
    if vocab:
        from tf_transformer.decoding.translator import load_tokenizer

        tok = load_tokenizer(vocab)
    with flags(DECODE_FLAGS):
        translator = CT2Translator(args.model, tok, beam_size=decode.beam_size, alpha=decode.alpha,
                                   max_extra_length=decode.max_extra_length, batch_size=decode.batch_size,
                                   threads=args.threads or 0, **search)
    if decode.beam_size > 1 and decode.alpha > 0:
        print(f"tft {args.command}: note: CTranslate2 normalises beam scores by |Y|^beta, not by GNMT's "
              f"((5+|Y|)/6)^alpha; alpha {decode.alpha:g} is mapped to beta = alpha n/(5+n) for sources of n "
              f"tokens (beta {ct2_length_penalty(decode.alpha, 12):.3f} at n = 12). Pass --alpha 0 for outputs "
              "identical to --engine tensorflow.", file=sys.stderr)
    if decode.beam_size > 1 and decode.stop_rule != "beam_finished":
        what = "the config's decode.stop_rule" if args.config else "the default stop rule"
        print(f"tft {args.command}: note: CTranslate2 stops a sentence once beam-size hypotheses have ended "
              f"(--stop-rule beam_finished) and cannot run our exact early stop: {what} ({decode.stop_rule}) "
              "gives way to its rule here (an explicit --stop-rule bound is refused)", file=sys.stderr)
    decode.stop_rule = "beam_finished"  # what CTranslate2 does: summary lines and records say so
    return translator


def describe(decode, engine: str = "tensorflow", sampling=None) -> str:
    """The decoding settings in a few words, for summary lines (``engine``: ``--engine``;
    ``sampling``: a :class:`Translator`'s :class:`tf_transformer.decoding.batches.Sampling`)."""
    if sampling is not None:
        among = f"the top {sampling.top_k}" if sampling.top_k else "all tokens"
        if sampling.epsilon > 0:
            among += f" of probability >= {sampling.epsilon:g}"
        if sampling.top_p < 1:
            among += f" (nucleus {sampling.top_p:g})"
        return (f"sampling from {among}, temperature {sampling.temperature:g}, seed {sampling.seed}, "
                f"max +{decode.max_extra_length} tokens")
    if decode.beam_size == 1:
        return f"greedy, max +{decode.max_extra_length} tokens"
    rule = ""
    if decode.stop_rule == "beam_finished":
        rule = ", stopping at the beam-th ending" + (" (CTranslate2's rule)" if engine == "ctranslate2" else "")
    return f"beam {decode.beam_size}, alpha {decode.alpha:g}, max +{decode.max_extra_length} tokens{rule}"


def settings(decode, args, translator) -> str:
    """:func:`describe` of what ``translator`` does (its sampling, if any, and how many samples)."""
    text = describe(decode, args.engine, getattr(translator, "sampling", None))
    sampled = getattr(translator, "sampling", None) is not None
    if sampled and translator.n_best > 1:
        text += f", {translator.n_best} samples per line"
    utility = {"chrf": "chrF", "bleu": "BLEU"}.get(getattr(translator, "utility", None))
    if utility is not None:  # an MBRTranslator
        text += f", MBR by {utility} among " + ("them" if sampled else f"the {translator.n_best} best")
    if getattr(args, "ensemble", None):
        text += f", an ensemble of {1 + len(args.ensemble)} models"
    return text


def add_mbr_arguments(parser: argparse.ArgumentParser, samples: bool = True) -> None:
    """``--mbr N`` and ``--mbr-utility`` (``samples``: the command has ``--sample`` and ``--scores``,
    as ``tft translate``)."""
    candidates = ("Candidates: with --sample, N samples (e.g. --sample --sample-topp 0.9 --mbr 16); without, "
                  "the beam's N best (N <= --beam). With --scores the score is that mean utility (0-100). "
                  if samples else "Candidates: the beam's N best (N <= --beam). ")
    parser.add_argument("--mbr", type=int, default=None, metavar="N",
                        help="minimum Bayes risk decoding: write, of N candidate translations of each line, the "
                             "one with the highest mean sentence chrF (sacreBLEU's; or --mbr-utility bleu) against "
                             "all N, i.e. the one the candidates agree with most (Eikema & Aziz, 2020; Freitag et "
                             "al., 2022). " + candidates
                             + "Costs N candidates per line plus N^2 utility pairs (about 4 ms per line at N=16)")
    parser.add_argument("--mbr-utility", choices=("chrf", "bleu"), default=None,
                        help="with --mbr: the utility, sentence chrF (default) or sentence BLEU (sacreBLEU's "
                             "sentence_bleu: 13a tokens, exp smoothing)")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (RULES + "\nexamples:\n"
                     "  echo 'A dog runs.' | tft translate --model runs/m30k      # the run directory of tft train\n"
                     "  tft translate --model runs/m30k/averaged.keras --input test.en --output test.de\n"
                     "  tft translate --model runs/m30k    # at a terminal: type a sentence, Enter; Ctrl-D ends\n"
                     "  tft translate --model runs/m30k --beam 5 --n-best 5 --input test.en    # 5 per line\n"
                     "  tft translate --model runs/de-en --sample --sample-topk 10 --input mono.de --output bt.en\n"
                     "  tft translate --model runs/de-en --sample --sample-topp 0.9 --input mono.de --output bt.en\n"
                     "  tft translate --model runs/m30k --sample --sample-topp 0.9 --mbr 16 --input test.en\n"
                     "  tft translate --model runs/m30k --input train.en --score-target train.de > scores.tsv\n"
                     "  tft translate --model runs/seed1 --model runs/seed2 --input test.en   # an ensemble of two\n")
    add_decode_arguments(parser)
    parser.add_argument("--input", default="-", help="input file, one sentence per line (default: - , stdin)")
    parser.add_argument("--output", default="-", help="output file (default: - , stdout)")
    parser.add_argument("--stream", action="store_true",
                        help="translate each line as soon as it is read and write its translation at once "
                             "(flushed), for interactive use and pipes that stay open (the default when stdin is "
                             "a terminal); lines that arrive while others are decoded go together into the next "
                             "batch (up to --batch-size). Without it the whole input is read first and decoded in "
                             "batches of similar length")
    parser.add_argument("--timings", action="store_true",
                        help="print where the process's wall-clock time went on stderr: Python start-up, the "
                             "TensorFlow import, loading the model, tracing the decoding graph, decoding (and "
                             "when its first batch was done), writing")
    parser.add_argument("--scores", action="store_true",
                        help="write 'score<TAB>translation'. The score is the one the search ranks by: beam "
                             "search (--beam > 1): the length-normalised log-probability log P(Y|X) / "
                             "((5+|Y|)/6)^alpha, |Y| counting EOS; greedy (--beam 1): the total log-probability "
                             "log P(Y|X). With --engine ctranslate2 and --alpha > 0 under beam search, CTranslate2's "
                             "own normalisation, log P(Y|X) / |Y|^beta (beta mapped from alpha, docs/serving.md): "
                             "not comparable with the scores of --engine tensorflow")
    parser.add_argument("--sample", action="store_true",
                        help="draw each token from the model's distribution instead of searching (one beam), as "
                             "back-translation does to make varied synthetic sources (Edunov et al., 2018); a "
                             "sentence's draws depend on it and --seed only (not on the batch; the same sentence "
                             "twice gives the same output); with --engine ctranslate2, on --batch-size too")
    parser.add_argument("--sample-topk", type=int, default=None, metavar="K",
                        help="with --sample: draw from the K most probable tokens only (default 0: from all)")
    parser.add_argument("--sample-topp", type=float, default=None, metavar="P",
                        help="with --sample: nucleus sampling (Holtzman et al., 2020): draw from the fewest most "
                             "probable tokens whose probabilities sum to at least P, 0 < P <= 1 (default 1: from "
                             "all); applied after --temperature, --sample-topk and --sample-epsilon")
    parser.add_argument("--sample-epsilon", type=float, default=None, metavar="E",
                        help="with --sample: epsilon sampling (Hewitt et al., 2022): draw only from tokens of "
                             "probability at least E (the most probable always), 0 <= E < 1 (default 0: from all); "
                             "applied after --temperature and --sample-topk, before --sample-topp. E = 0.02 with "
                             "--mbr is Freitag et al. (2023)'s choice for MBR candidates. Not with --engine "
                             "ctranslate2")
    parser.add_argument("--temperature", type=float, default=None, metavar="T",
                        help="with --sample: divide the log-probabilities by T before drawing (default 1: the "
                             "model's own distribution; below 1 sharper, above 1 flatter)")
    parser.add_argument("--seed", type=int, default=None, help="with --sample: the random seed (default 0)")
    parser.add_argument("--score-target", metavar="FILE",
                        help="score instead of translating: FILE's line i (.gz read too) is taken as the "
                             "translation of input line i, and each output line is 'log P<TAB>per token<TAB>"
                             "tokens': the model's log-probability of that translation summed over its subword "
                             "tokens and EOS, divided by their number, and the number (nan, nan, 0 for an empty "
                             "input line); for filtering parallel data or reranking")
    parser.add_argument("--resume", action="store_true",
                        help="for long translations (a corpus to back-translate): write --output chunk by chunk "
                             "(--chunk-lines) with a progress record beside it (OUTPUT.progress.json); rerun the "
                             "same command after an interruption and it goes on from the last finished chunk. A "
                             "rerun with another input, model or decoding setting is refused, not mixed in. Needs "
                             "--input FILE and --output FILE. Without it a file --output is written at once at the "
                             "end (atomically) and stdout chunk by chunk")
    parser.add_argument("--chunk-lines", type=int, default=None, metavar="N",
                        help=f"translate the input N lines at a time, each chunk sorted by length into batches and "
                             f"written when done (default {CHUNK_LINES}); the translations do not depend on it (but "
                             "for --engine ctranslate2's --sample, whose draws depend on the batch), and printed "
                             "scores (--scores, --n-best) only in their last digit (padding changes float rounding), "
                             "as with --batch-size; --resume refuses to go on with another value of either where it "
                             "matters")
    add_mbr_arguments(parser)
    parser.add_argument("--n-best", type=int, default=1, metavar="N",
                        help="write the N best translations of each line (N <= the beam size), best first, "
                             "one per output line as 'LINE ||| translation ||| score' (LINE: the input line's "
                             "0-based number; score as --scores; a line can have fewer than N when the search "
                             "finishes fewer within the length limit); with --sample: N samples of each line (any "
                             "N; in the order drawn, the first what --n-best 1 samples, but with --engine "
                             "ctranslate2, which sorts them by score; a batch then decodes "
                             "--batch-size x N rows), e.g. for minimum Bayes risk decoding or several synthetic "
                             "sources per line; default 1: one translation per line")


def run(args: argparse.Namespace) -> int:
    from tf_transformer.decoding.translator import ProgressBar, read_lines

    if args.input != "-" and not os.path.exists(args.input):
        raise UserError(f"--input {args.input}: no such file")
    if args.input != "-" and os.path.isdir(args.input):
        raise UserError(f"--input {args.input}: a directory, not a text file")
    if args.stream and args.timings:
        raise UserError("--timings times the phases of a whole input (reading, decoding, writing); under --stream "
                        "they interleave line by line: give one or the other")
    if args.score_target is not None:
        given = [flag for flag, on in (("--stream", args.stream), ("--n-best", args.n_best > 1),
                                       ("--sample", args.sample), ("--scores", args.scores),
                                       ("--mbr", args.mbr is not None), ("--beam", args.beam is not None),
                                       ("--alpha", args.alpha is not None), ("--stop-rule", args.stop_rule is not None),
                                       ("--max-extra-len", args.max_extra_len is not None),
                                       ("--chunk-lines", args.chunk_lines is not None)) if on]
        if given:
            raise UserError(f"--score-target scores given translations; {', '.join(given)} "
                            f"{'does' if len(given) == 1 else 'do'} not apply to it")
        if not os.path.isfile(args.score_target):
            raise UserError(f"--score-target {args.score_target}: no such file")
    if args.chunk_lines is not None and args.stream:
        raise UserError("--chunk-lines sets how much of a whole input is decoded at a time; --stream decodes lines "
                        "as they come: give one or the other")
    if args.chunk_lines is not None and args.chunk_lines < 1:
        raise UserError(f"--chunk-lines {args.chunk_lines}: must be >= 1")
    if args.chunk_lines is None:
        args.chunk_lines = CHUNK_LINES
    if args.resume:
        given = [flag for flag, on in (("--stream", args.stream), ("--score-target", args.score_target is not None))
                 if on]
        if given or args.input == "-" or args.output == "-":
            raise UserError("--resume goes on with an interrupted translation of one file into another: it needs "
                            "--input FILE and --output FILE" + (f", and not {', '.join(given)}" if given else ""))
    if args.input == "-" and sys.stdin is None:
        raise UserError("no input: stdin is closed; give --input FILE or pipe the lines in")
    check_output_file(args.output, "--output")
    stream = args.score_target is None and (
        args.stream or (args.input == "-" and not args.timings and _is_terminal(sys.stdin)))
    _, decode, translator = build_translator(args)  # fails on bad flags before reading stdin
    if stream:
        return _translate_stream(args, decode, translator)
    if getattr(args, "_clock", None) is not None and hasattr(translator, "trace"):
        translator.trace()  # otherwise the first batch traces: the same work, timed apart here
        mark(args, "tracing the decoding graph")
    if args.input == "-":
        lines, bad = read_lines(sys.stdin.buffer.read(), "<stdin>")
        where = "<stdin>"
    else:
        lines, bad = read_input_lines(args.input, "--input")  # gzip when it ends in .gz, as everywhere
        where = args.input
    _warn_invalid_utf8(where, bad)
    mark(args, "reading the input")
    if args.score_target is not None:
        return _score_targets(args, translator, lines, where)
    resumable = _resumable_output(args, decode, translator, len(lines)) if args.resume else None
    begin = resumable.done if resumable is not None else 0
    if resumable is not None and resumable.finished:
        print(f"tft translate: --resume: {args.output} is complete ({len(lines):,} lines of {where} translated); "
              "nothing to do", file=sys.stderr)
        return 0
    if begin:
        print(f"tft translate: --resume: lines 1-{begin:,} of {len(lines):,} were translated by an earlier run; going "
              f"on from line {begin + 1:,}", file=sys.stderr)
    bar = ProgressBar(len(lines) - begin, "translate", enabled=not args.quiet)
    start = time.time()
    first = []  # when the first decoded batch came back
    # empty lines are counted first, at once, never decoded
    empty = sum(1 for line in lines[begin: begin + args.chunk_lines] if not line.strip())

    def progress(n):
        if not first and bar.done >= empty:
            first.append(time.time() - start)
        bar.update(n)

    pieces, decoded, output_tokens, truncated = [], 0, 0, 0
    for lo in range(begin, len(lines), args.chunk_lines):  # sorted by length within each chunk
        hi = min(lo + args.chunk_lines, len(lines))
        outputs, scores, stats = translator.translate(lines[lo:hi], progress=progress)
        text = _output_text(args, lo, outputs, scores)
        if resumable is not None:
            resumable.append(text, hi)
        elif args.output == "-":
            _write_output(args, text)  # as each chunk is done
        else:
            pieces.append(text)  # written at once at the end (atomically)
        decoded, output_tokens, truncated = (decoded + stats.decoded, output_tokens + stats.output_tokens,
                                             truncated + stats.truncated)
    bar.close()
    mark(args, "decoding", f"first batch done after {first[0]:.2f} s" if first else "")
    if truncated:
        print(f"tft translate: warning: {truncated} line(s) longer than the model limit of "
              f"{translator.limit} tokens were cut to it", file=sys.stderr)
    if resumable is not None and not resumable.finished:  # an empty input: nothing was appended
        resumable.append("", len(lines))
    dest = "stdout" if args.output == "-" else args.output
    if resumable is None and args.output != "-":
        _write_output(args, "".join(pieces))
    seconds = time.time() - start
    rate = decoded / seconds if seconds > 0 else 0.0
    print(f"tft translate: wrote {len(lines) - begin:,} translations to {dest} ({settings(decode, args, translator)}; "
          f"{output_tokens:,} output tokens, {seconds:.1f} s, {rate:.1f} sentences/s)", file=sys.stderr)
    if getattr(args, "_clock", None) is not None:
        mark(args, "writing")
        print(f"tft translate: timings: {args._clock.summary()}", file=sys.stderr)
    return 0


def _resumable_output(args: argparse.Namespace, decode, translator, total: int):
    """``--resume``'s :class:`tf_transformer.cli._resumable.ResumableOutput` for ``--output``,
    keyed by what makes the translations what they are: the input, model and vocabulary files,
    the engine and the decoding settings (and, for CTranslate2's sampler, whose draws depend on
    the batch, and for written scores, whose last digit does, the batch size and ``--chunk-lines``)."""
    from tf_transformer.cli._resumable import ResumableOutput, identity

    run = {"input": identity(args.input), "model": identity(args.model),
           "vocab": identity(args.vocab) if args.vocab else None, "engine": args.engine,
           "decoding": settings(decode, args, translator), "n_best": args.n_best, "scores": args.scores}
    if args.ensemble:
        run["ensemble"] = [identity(path) for path in args.ensemble]
    if _draws_per_batch(translator) or args.scores or args.n_best > 1:  # draws, or scores' last digits
        run["batches"] = [decode.batch_size, args.chunk_lines]
    return ResumableOutput(args.output, run, total)


def _score_targets(args: argparse.Namespace, translator, sources: list[str], where: str) -> int:
    """``--score-target``: each target's log-probability given its source, to ``--output``."""
    from tf_transformer.decoding.translator import ProgressBar

    targets, bad = read_input_lines(args.score_target, "--score-target")
    _warn_invalid_utf8(args.score_target, bad)
    if len(targets) != len(sources):
        raise UserError(f"--score-target {args.score_target} has {len(targets):,} lines but {where} has "
                        f"{len(sources):,}; line i of one must translate line i of the other")
    bar = ProgressBar(len(sources), "score", enabled=not args.quiet)
    log_probs, tokens, stats = translator.score(sources, targets, progress=bar.update)
    bar.close()
    if stats.truncated:
        print(f"tft translate: warning: {stats.truncated} pair(s) longer than the model limit of {translator.limit} "
              "tokens were cut to it", file=sys.stderr)
    dest = _write_output(args, "".join(f"{lp:.4f}\t{lp / n if n else float('nan'):.4f}\t{n}\n"
                                       for lp, n in zip(log_probs, tokens)))
    print(f"tft translate: scored {stats.decoded:,} of {len(sources):,} pairs ({stats.output_tokens:,} target tokens "
          f"with EOS, {stats.seconds:.1f} s) to {dest}", file=sys.stderr)
    return 0


def _warn_invalid_utf8(where: str, bad: list[int]) -> None:
    """The warning for the lines of ``where`` that had invalid UTF-8 (``bad``: their numbers)."""
    if bad:
        shown = ", ".join(str(n) for n in bad[:5]) + (" ..." if len(bad) > 5 else "")
        print(f"tft translate: warning: {len(bad)} line(s) of {where} had invalid UTF-8 (line {shown}); "
              "bad bytes were replaced with U+FFFD", file=sys.stderr)


def _write_output(args: argparse.Namespace, text: str) -> str:
    """``text`` to ``--output`` (gzip when it ends in .gz) or stdout; returns where, for the summary."""
    if args.output == "-":
        sys.stdout.buffer.write(text.encode("utf-8"))
        sys.stdout.flush()
        return "stdout"
    write_output_text(args.output, text, "--output")
    return args.output


def _draws_per_batch(translator) -> bool:
    """Whether ``translator`` samples with draws that depend on the whole batch (CTranslate2's
    sampler; ours draw per sentence)."""
    return getattr(translator, "sampling", None) is not None and getattr(translator, "draws_per_batch", False)


def _output_text(args: argparse.Namespace, first: int, outputs, scores) -> str:
    """The output text of consecutive input lines from ``first`` (0-based): :func:`_output_lines`."""
    return "".join(_output_lines(args, first + i, o, s) for i, (o, s) in enumerate(zip(outputs, scores)))


def _output_lines(args: argparse.Namespace, index: int, output, score) -> str:
    """The output text of input line ``index`` (0-based): its translation, ``score<TAB>``
    before it with ``--scores``, or its n-best list in lines ``index ||| translation ||| score``."""
    if args.n_best > 1:
        return "".join(f"{index} ||| {o} ||| {s:.4f}\n" for o, s in zip(output, score))
    return f"{score:.4f}\t{output}\n" if args.scores else output + "\n"


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed stdin
        return False


def _translate_stream(args: argparse.Namespace, decode, translator) -> int:
    """``--stream``: translate lines as they come and write (and flush) each batch's
    translations at once, until the input ends (Ctrl-D at a terminal). A batch is the next line
    and those already waiting behind it (:func:`_arrived`), up to ``--batch-size`` per decoding
    thread: one line at a time when they come one by one, batches when a pipe runs ahead of the
    decoder. Same rules and outputs as the batch path (sampled ones too: a sentence draws the
    same in any batch), but for CTranslate2's sampler, whose draws depend on the batch: with
    it, one line per batch, so that a line's draws depend on it and ``--seed`` only."""
    import gzip

    from tf_transformer.data.sources import open_binary
    from tf_transformer.decoding.translator import decode_line

    if hasattr(translator, "trace"):
        translator.trace()  # before the prompt, not in the first sentence's wait
    where = "<stdin>" if args.input == "-" else args.input
    dest = "stdout" if args.output == "-" else args.output
    count = tokens = batches = 0
    with contextlib.ExitStack() as files:
        try:
            source = sys.stdin.buffer if args.input == "-" else files.enter_context(open_binary(args.input))
        except OSError as e:
            raise UserError(f"--input {args.input}: cannot read it ({e.strerror})") from None
        try:
            if args.output == "-":
                sink = sys.stdout.buffer
            else:
                os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
                sink = files.enter_context(gzip.open(args.output, "wb") if args.output.endswith(".gz")
                                           else open(args.output, "wb"))
        except OSError as e:
            raise UserError(f"--output {args.output}: cannot write it ({e.strerror})") from None
        if args.input == "-" and _is_terminal(sys.stdin) and not args.quiet:
            print(f"tft translate: ready ({settings(decode, args, translator)}); type a sentence and press "
                  "Enter; Ctrl-D ends", file=sys.stderr)
        start = time.time()
        # enough waiting lines for a batch per decoding thread (Translator's workers)
        most = 1 if _draws_per_batch(translator) else decode.batch_size * getattr(translator, "workers", 1)
        try:
            for raws in _arrived(source, most):
                lines = []
                for number, raw in enumerate(raws, start=count + 1):
                    line, valid = decode_line(raw)
                    if not valid:
                        print(f"tft translate: warning: line {number} of {where} had invalid UTF-8; bad bytes were "
                              "replaced with U+FFFD", file=sys.stderr)
                    lines.append(line)
                outputs, scores, stats = translator.translate(lines)
                if stats.truncated:
                    which = (f"line {count + 1} of {where} is" if len(lines) == 1 else
                             f"{stats.truncated} of lines {count + 1}-{count + len(lines)} of {where} are")
                    print(f"tft translate: warning: {which} longer than the model limit of {translator.limit} "
                          "tokens; cut to it", file=sys.stderr)
                sink.write(_output_text(args, count, outputs, scores).encode("utf-8"))
                sink.flush()
                count += len(lines)
                tokens += stats.output_tokens
                batches += 1
        except (gzip.BadGzipFile, EOFError) as e:
            raise UserError(f"--input {args.input}: not a readable gzip file ({e})") from None
    print(f"tft translate: wrote {count:,} translations to {dest} ({settings(decode, args, translator)}; {tokens:,} "
          f"output tokens, {time.time() - start:.1f} s, as they came: {batches:,} batches)", file=sys.stderr)
    return 0


def _arrived(source, most: int):
    """Batches of ``source``'s lines (bytes) as they arrive: each the next line (waited for)
    and up to ``most - 1`` more that are already read, in order. A thread reads ahead, so a
    line that arrives while a batch is decoded waits for the next batch (at most ``2 * most``
    lines wait: a fast pipe is read no faster than it is translated); an error of the reading
    (a broken gzip file) is raised here, after the lines before it."""
    import queue
    import threading

    waiting: queue.Queue = queue.Queue(maxsize=2 * most)
    end = object()

    def read():
        try:
            for raw in iter(source.readline, b""):
                waiting.put(raw)
            waiting.put(end)
        except BaseException as e:  # handed to the consumer, which raises it
            waiting.put(e)

    threading.Thread(target=read, daemon=True, name="tft-stream-reader").start()
    item = None
    while item is not end:
        batch = []
        item = waiting.get()
        while item is not end and not isinstance(item, BaseException):
            batch.append(item)
            if len(batch) >= most:
                item = None
                break
            try:
                item = waiting.get_nowait()
            except queue.Empty:
                item = None
                break
        if batch:
            yield batch  # the lines before an error first
        if isinstance(item, BaseException):
            raise item
