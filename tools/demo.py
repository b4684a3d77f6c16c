"""``make demo``: the whole recipe on the bundled Multi30k En->De, on a CPU, in bounded time.

1. build the shared SentencePiece vocabulary (train.en + train.de);
2. train ``multi30k_small``, changed as below, by the paper's recipe for at most
   ``--minutes`` of wall-clock training (default 12) or its ``train.train_steps``, whichever
   comes first, with a checkpoint every ``--checkpoint-minutes``. The demo halves the
   preset's batch to 2,048 tokens per side (``DEMO_OVERRIDES``; ``--set
   data.tokens_per_batch=4096`` restores it):
   in a 12-minute budget on a 2-core CPU, 1.8x the updates at half the size gave a better
   model than the preset's 4,096-token batches (test2016 sacreBLEU 20.3 vs 18.6 with the
   averaged weights, 19.1 vs 13.8 with the final ones, same host and seed). It also lifts the
   preset's 2,000-update limit, so that a fast CPU uses the whole budget (the learning rate
   schedule does not depend on the limit). And it trains 2+2 layers with 8 heads of 32
   (``model.num_layers=2``, ``model.num_heads=8``) instead of the preset's 3+3 with 4 of 64:
   the two rows of our Table 3 ablation that helped most at 1,500 updates (N=2 +2.6 BLEU,
   h=8 +1.6; docs/ablation-1500-updates.md). In the 12 minutes on a 2-vCPU AMX host the
   3+3/4-head model gave test2016 sacreBLEU 29.33; the 2+2/8-head one 33.14 and 34.38 (two
   seeds), its val perplexity 8.2-8.3 against 12.1, in about the same number of updates
   (about 2,100); with validation no longer stalling training, about 3,050 updates and 34.6-35.0;
3. average the last checkpoints (the paper averages the last 5);
4. choose the weights (final or averaged) and the length penalty alpha (``--alphas``, default
   0.6, 1.0, 1.4) by sacreBLEU on the **validation** set (beam 4, input length + 50): at the
   paper's 0.6 a model this small writes translations several percent shorter than the
   references, and BLEU's brevity penalty takes that off its score; then translate test2016
   with both weight sets at the chosen alpha, print a few translations and the BLEU of both
   (test2016 plays no part in any choice);
5. draw the better model's attention for the first test sentence, as in the paper's
   appendix (``attention-encoder-lines.png``: last encoder layer, one colour per head) and as
   heatmaps (``attention-cross-heatmap.png``: last decoder layer's encoder-decoder attention).

Run it again and it reuses what is there (a finished run is not retrained); ``--fresh``
starts over. ``python tools/demo.py --help`` lists the options. A script beside the package:
it uses nothing but the package's public API.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# what the demo changes in its config before the command line's --set (which wins)
DEMO_OVERRIDES = ("data.tokens_per_batch=2048", "train.train_steps=100000", "model.num_layers=2",
                  "model.num_heads=8")
# and, on a CPU that multiplies bfloat16 natively, mixed precision (see cpu_has_bf16)
BF16_OVERRIDES = ("train.mixed_precision=mixed_bfloat16",)


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU has native bfloat16 matmuls (the ``avx512_bf16`` or ``amx_bf16`` flag of
    Linux's ``/proc/cpuinfo``; False where it cannot be read): the package's
    ``tf_transformer.training.precision.cpu_has_native_bf16``, which ``train.mixed_precision:
    auto`` also uses. There the demo trains with ``mixed_bfloat16``: on a 2-core AVX512_BF16
    host it made 1.6x the updates of float32 in the 12 minutes, with a better test2016 BLEU
    (tools/bench/RESULTS.md, "Demo")."""
    from tf_transformer.training.precision import cpu_has_native_bf16

    return cpu_has_native_bf16(cpuinfo)


from tf_transformer.io import say as _say  # noqa: E402


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python tools/demo.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="multi30k_small", help="preset or YAML file (default multi30k_small)")
    ap.add_argument("--model-dir", default="runs/demo", help="run directory (default runs/demo)")
    ap.add_argument("--minutes", type=float, default=12.0, help="wall-clock training budget (default 12)")
    ap.add_argument("--checkpoint-minutes", type=float, default=1.0, help="checkpoint interval (default 1)")
    ap.add_argument("--average", type=int, default=5, help="checkpoints to average (default 5)")
    ap.add_argument("--beam", type=int, default=None, help="beam size (default: the config's, 4)")
    ap.add_argument("--alphas", default="0.6,1.0,1.4",
                    help="length penalties to choose from on the validation set (default 0.6,1.0,1.4)")
    ap.add_argument("--show", type=int, default=5, help="test sentences to print (default 5)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                    help="config override, repeatable (applied after the demo's own: "
                         + ", ".join(DEMO_OVERRIDES) + ", and " + ", ".join(BF16_OVERRIDES)
                         + " on a CPU with avx512_bf16 or amx_bf16)")
    ap.add_argument("--fresh", action="store_true", help="delete --model-dir first")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tf_transformer.config import load_config
    from tf_transformer.errors import UserError

    try:
        return _run(args, load_config)
    except UserError as e:
        _say(f"demo: error: {e}")
        return 2


def parse_alphas(text: str) -> list[float]:
    """``"0.6,1.0"`` -> ``[0.6, 1.0]``; a clear error for anything that is not a list of numbers >= 0."""
    from tf_transformer.errors import UserError

    try:
        alphas = [float(a) for a in text.split(",") if a.strip()]
    except ValueError:
        raise UserError(f"--alphas {text!r}: expected comma-separated numbers, e.g. 0.6,1.0,1.4") from None
    if not alphas or any(a < 0 for a in alphas):
        raise UserError(f"--alphas {text!r}: expected one or more numbers >= 0, e.g. 0.6,1.0,1.4")
    return list(dict.fromkeys(alphas))


def choose_on_val(val_scores: dict) -> tuple[str, float]:
    """The ``(weights, alpha)`` of ``val_scores`` (``{(weights, alpha): val sacreBLEU}``) with the
    highest score; a tie goes to the first in the mapping's order."""
    return max(val_scores, key=lambda key: val_scores[key])


def _translate(model, tokenizer, sources, decode_cfg, beam, alpha):
    from tf_transformer.decoding.translator import Translator

    translator = Translator(model, tokenizer, beam_size=beam, alpha=alpha,
                            max_extra_length=decode_cfg.max_extra_length, batch_size=decode_cfg.batch_size)
    start = time.time()
    hypotheses, _, _ = translator.translate(sources)
    return hypotheses, time.time() - start


def _run(args, load_config) -> int:
    started = time.time()
    alphas = parse_alphas(args.alphas)  # before any work: a typo must not cost a training run
    model_dir = Path(args.model_dir)
    if args.fresh and model_dir.exists():
        shutil.rmtree(model_dir)
    bf16 = cpu_has_bf16()
    overrides = [
        f"train.model_dir={model_dir}",
        f"train.max_minutes={args.minutes}",
        f"train.checkpoint_every_minutes={args.checkpoint_minutes}",
        f"train.average_last={args.average}",
        f"data.vocab_model={model_dir / 'spm.model'}",
        *DEMO_OVERRIDES,
        *(BF16_OVERRIDES if bf16 else ()),
    ] + list(args.set)
    cfg = load_config(args.config, overrides)
    if bf16:
        _say(f"demo: this CPU multiplies bfloat16 natively: training with train.mixed_precision="
             f"{cfg.train.mixed_precision} (--set train.mixed_precision=float32 to train in float32)")

    from tf_transformer.data import Tokenizer, build_vocab, read_parallel_text
    from tf_transformer.io import load_model
    from tf_transformer.training import train
    from tf_transformer.training.averaging import average_run
    from tf_transformer.viz.attention import plot_sentence_attention

    # 1. vocabulary
    model_dir.mkdir(parents=True, exist_ok=True)
    vocab = Path(cfg.data.vocab_model)
    if not vocab.exists():
        info = build_vocab(cfg.data, vocab, progress=_say)
        _say(f"demo: {info['summary']}")
    # 2. training (resumes or skips a finished run)
    result = train(cfg, log=_say)
    _say(f"demo: {result.summary()}")
    history = result.history
    if history.get("loss"):
        _say("demo: loss curve (per epoch of {} updates):".format(cfg.train.steps_per_epoch))
        for i, loss in enumerate(history["loss"]):
            val = history.get("val_loss", [None] * len(history["loss"]))
            ppl = history.get("val_perplexity", [None] * len(history["loss"]))
            extra = "" if i >= len(val) or val[i] is None else f"  val_loss {val[i]:.3f}  val_ppl {ppl[i]:.2f}"
            _say(f"  epoch {i + 1:3d}  loss {loss:.3f}{extra}")
    # 3. averaging
    averaged = average_run(model_dir, last=args.average, progress=_say)
    _say(f"demo: {averaged['summary']}")
    # 4. weights and alpha chosen on val; beam search + BLEU on test2016
    from tf_transformer.evaluation.bleu import evaluate_translations

    tokenizer = Tokenizer(result.vocab_path or vocab)
    beam = args.beam or cfg.decode.beam_size
    models = {"averaged": load_model(str(averaged["output"])), "final": load_model(str(result.model_path))}
    val_sources, val_references = read_parallel_text(cfg.data, "valid")
    val_scores = {}
    for name, model in models.items():
        for alpha in alphas:
            hyps, seconds = _translate(model, tokenizer, val_sources, cfg.decode, beam, alpha)
            val_scores[(name, alpha)] = evaluate_translations(hyps, val_references)["sacrebleu"].score
            _say(f"demo: val, {name} weights, beam {beam}, alpha {alpha:g}: sacreBLEU "
                 f"{val_scores[(name, alpha)]:.2f} ({seconds:.0f} s)")
    best_name, alpha = choose_on_val(val_scores)
    _say(f"demo: chosen on val: {best_name} weights, alpha {alpha:g}")
    sources, references = read_parallel_text(cfg.data, "test")
    outputs = {}
    for name, model in models.items():
        hyps, seconds = _translate(model, tokenizer, sources, cfg.decode, beam, alpha)
        outputs[name] = hyps, evaluate_translations(hyps, references)
        _say(f"demo: {name} weights: test2016 translated in {seconds:.0f} s "
             f"({len(sources) / seconds:.1f} sentences/s, beam {beam}, alpha {alpha:g})")
    best_hyps, best_scores = outputs[best_name]
    scores_final, scores_avg = outputs["final"][1], outputs["averaged"][1]
    (model_dir / "test2016.hyp.de").write_text("\n".join(best_hyps) + "\n", encoding="utf-8")
    print()
    print(f"Multi30k test2016 En->De, {cfg.name}, {result.final_step} updates, beam {beam}, alpha {alpha:g} "
          f"(alpha and weights chosen on val: {best_name})")
    for i in range(min(args.show, len(sources))):
        print(f"  EN   {sources[i]}\n  REF  {references[i]}\n  OURS {best_hyps[i]}\n")
    print(f"{'':34s}{'final weights':>16s}{'averaged':>12s}")
    for key in ("sacrebleu", "chrf", "bleu_lc", "bleu_lc_moses", "bleu_paper"):
        label = scores_final[key].name
        print(f"  {label:32s}{scores_final[key].score:16.2f}{scores_avg[key].score:12.2f}")
    print(f"  sacreBLEU signature: {best_scores['sacrebleu'].signature}")
    # 5. attention plots
    plots = plot_sentence_attention(models[best_name], tokenizer, sources[0], model_dir)
    print(f"  attention plots ({best_name} weights, test sentence 1): {', '.join(map(str, plots))}")
    print(f"demo: done in {(time.time() - started) / 60:.1f} min; "
          f"test2016 sacreBLEU {best_scores['sacrebleu'].score:.2f} "
          f"({best_name} weights); wrote {model_dir}/ (model.keras, averaged.keras, spm.model, "
          f"test2016.hyp.de, attention-*.png, logs/)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
