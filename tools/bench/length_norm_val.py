"""Does fairseq's length normalisation choose better translations than GNMT's penalty?

Our beam search ranks a finished hypothesis by ``log P / ((5 + |Y|) / 6) ** alpha`` (GNMT, the
paper's choice); fairseq, whose decoder Wu et al. used, ranks by ``log P / |Y| ** a``
(``--lenpen a``, default 1). This script swaps the penalty function of
``tf_transformer.decoding.beam_search`` for fairseq's in this process only (the package
keeps GNMT's) and decodes the validation set with one run's weights at several ``a``, so the
two forms can be compared at their best on val (test2016 is not decoded):

    python tools/bench/length_norm_val.py --run RUN --weights averaged-10.keras \\
        --beams 4,5 --exponents 0.8,1.0,1.2,1.4

Compare with the report's val rows of the same weights (``RUN/report/report.md``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def fairseq_length_penalty(length, alpha):
    """``|Y| ** a`` (at least 1), float32, in place of GNMT's ``((5 + |Y|) / 6) ** alpha``."""
    import tensorflow as tf

    return tf.pow(tf.maximum(tf.cast(length, tf.float32), 1.0), tf.cast(alpha, tf.float32))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="run directory (vocab.model, weights)")
    parser.add_argument("--weights", default="averaged-10.keras", help="comma-separated .keras files in RUN")
    parser.add_argument("--beams", default="4,5")
    parser.add_argument("--exponents", default="0.8,1.0,1.2,1.4")
    parser.add_argument("--max-extra-length", type=int, default=None,
                        help="default: the run's decode.max_extra_length, as the report uses")
    args = parser.parse_args(argv)

    import keras

    import tf_transformer.decoding.beam_search as beam_search
    from tf_transformer.config import load_config
    from tf_transformer.data.sources import read_parallel_text
    from tf_transformer.data.tokenizer import Tokenizer
    from tf_transformer.decoding.translator import Translator
    from tf_transformer.evaluation.bleu import evaluate_translations, references_for

    beam_search.length_penalty = fairseq_length_penalty  # read by the search when it is traced
    cfg = load_config(str(args.run / "config.yaml"))
    tokenizer = Tokenizer(args.run / "vocab.model")
    sources, references = read_parallel_text(cfg.data, "valid")
    max_extra = cfg.decode.max_extra_length if args.max_extra_length is None else args.max_extra_length
    references = references_for(tokenizer, references)
    print("weights | beam | a | val BLEU lc Moses | details | seconds")
    for weights in args.weights.split(","):
        model = keras.saving.load_model(str(args.run / weights), compile=False)
        for beam in (int(b) for b in args.beams.split(",")):
            for a in (float(x) for x in args.exponents.split(",")):
                start = time.time()
                translator = Translator(model, tokenizer, beam_size=beam, alpha=a,
                                        max_extra_length=max_extra, batch_size=cfg.decode.batch_size,
                                        stop_rule=cfg.decode.stop_rule)
                hypotheses, _, _ = translator.translate(sources)
                score = evaluate_translations(hypotheses, references, lang=cfg.data.target_lang)["bleu_lc_moses"]
                print(f"{weights} | {beam} | {a:g} | {score.score:.2f} | {score.detail} | "
                      f"{time.time() - start:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
