"""``tft plot-attention``: draw attention weights like the paper's appendix
(:mod:`tf_transformer.viz.attention`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tf_transformer.cli._common import check_output_file, flags, resolve_run
from tf_transformer.errors import UserError

#: ``--attention`` values (the model's names: tf_transformer.viz.attention.KINDS).
KINDS = ("cross", "decoder", "encoder")

EPILOG = """\
rows and columns:
  encoder   rows and columns: the source tokens
  cross     rows: the token each decoder position predicts; columns: the source tokens
  decoder   rows: the token each decoder position predicts; columns: the decoder input
            (<s> and the target before it), causal
  SentencePiece's word marker (U+2581) is not shown.
examples:
  tft plot-attention --model runs/m30k --sentence "A dog runs." --attention cross --output cross.png
  tft plot-attention --model runs/m30k --sentence "A dog runs." --style both --output attn.svg
      (writes attn-lines.svg and attn-heatmap.svg)
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from tf_transformer.cli.decode import add_model_arguments

    parser.epilog = EPILOG
    add_model_arguments(parser, config=False)
    parser.add_argument("--sentence", required=True, help="source sentence")
    parser.add_argument("--target",
                        help="target sentence for decoder/cross attention (default: the model's greedy translation)")
    parser.add_argument("--attention", choices=KINDS, default="encoder", help="which attention")
    parser.add_argument("--layer", type=int, default=-1, help="layer index, negative from the top")
    parser.add_argument("--heads", default="all", help="comma-separated head indices or 'all'")
    parser.add_argument("--style", choices=["lines", "heatmap", "both"], default="heatmap",
                        help="lines: the appendix style; heatmap: one matrix per head; both: two files, "
                             "OUTPUT with -lines and -heatmap added to its name")
    parser.add_argument("--query-token", type=int,
                        help="lines style: draw only this query position (default: every position)")
    parser.add_argument("--output", required=True,
                        help="output file (.png or .svg), written as given unless --style both")


def run(args: argparse.Namespace) -> int:
    from tf_transformer.cli.decode import MODEL_FLAGS
    from tf_transformer.data import Tokenizer
    from tf_transformer.io import load_model
    from tf_transformer.viz.attention import KINDS as NAMES
    from tf_transformer.viz.attention import attention_for_sentence, plot_heatmaps, plot_lines, predicted_pieces

    out = Path(args.output)
    if out.suffix.lower() not in (".png", ".svg"):
        raise UserError(f"--output {out}: expected a .png or .svg file name")
    check_output_file(args.output, "--output")  # before the model runs
    if args.query_token is not None and args.style == "heatmap":
        raise UserError("--query-token draws one query position's lines: it applies to --style lines or both (a "
                        "heatmap shows every position)")
    resolve_run(args, "plot-attention", config=False)
    if args.vocab is None:
        raise UserError("--vocab is required: the model is not in a run directory with a vocab.model")
    if not Path(args.vocab).is_file():
        raise UserError(f"--vocab {args.vocab}: no such file")
    with flags(MODEL_FLAGS):
        model = load_model(args.model)
    tokenizer = Tokenizer(args.vocab)
    if not args.sentence.strip():
        raise UserError("--sentence is empty")
    pieces = len(tokenizer.encode([args.sentence])[0])
    if pieces > int(model.max_length):
        print(f"tft plot-attention: warning: --sentence has {pieces} tokens, more than the model limit of "
              f"{model.max_length}: only its first {model.max_length} are plotted", file=sys.stderr)
    if args.target is not None and len(tokenizer.encode([args.target])[0]) > int(model.max_length) - 1:
        print(f"tft plot-attention: warning: --target has more tokens than the model limit of {model.max_length} "
              f"(with <s>): only its first {int(model.max_length) - 1} are plotted", file=sys.stderr)
    weights, src, tgt = attention_for_sentence(model, tokenizer, args.sentence, args.target)
    layers = weights[NAMES[args.attention]]
    if not -len(layers) <= args.layer < len(layers):
        raise UserError(f"--layer {args.layer}: the model has {len(layers)} layers (0..{len(layers) - 1})")
    layer = args.layer % len(layers)
    w = layers[layer]
    if args.heads == "all":
        heads = list(range(w.shape[0]))
    else:
        try:
            heads = [int(h) for h in args.heads.split(",")]
        except ValueError:
            raise UserError(f"--heads {args.heads!r}: expected comma-separated integers or 'all'") from None
        bad = [h for h in heads if not 0 <= h < w.shape[0]]
        if bad:
            raise UserError(f"--heads: {bad} out of range; the layer has {w.shape[0]} heads")
        twice = sorted({h for h in heads if heads.count(h) > 1})
        if twice:
            raise UserError(f"--heads {args.heads}: head {', '.join(map(str, twice))} given more than once")
    if args.attention == "encoder":
        queries, keys, labels = src, src, ("source", "source")
    else:
        queries = predicted_pieces(tgt, tokenizer.id_to_piece([tokenizer.eos_id])[0])
        keys, labels = (tgt, ("predicting", "decoder input")) if args.attention == "decoder" else \
            (src, ("predicting", "source"))
    if args.query_token is not None and not 0 <= args.query_token < len(queries):
        raise UserError(f"--query-token {args.query_token}: the query side has {len(queries)} tokens")
    title = f"{args.attention} attention, layer {layer + 1} of {len(layers)}"
    written = []
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.style in ("lines", "both"):
        path = out if args.style == "lines" else out.with_name(out.stem + "-lines" + out.suffix)
        plot_lines(w, queries, keys, heads=heads, query_index=args.query_token, title=title, path=path,
                   query_label=labels[0], key_label=labels[1])
        written.append(path)
    if args.style in ("heatmap", "both"):
        path = out if args.style == "heatmap" else out.with_name(out.stem + "-heatmap" + out.suffix)
        plot_heatmaps(w[heads], queries, keys, title=title, path=path, query_label=labels[0], key_label=labels[1],
                      head_labels=heads)
        written.append(path)
    import matplotlib.pyplot as plt

    plt.close("all")
    print(f"wrote {', '.join(map(str, written))} ({args.attention} attention, layer {layer + 1}/{len(layers)}, "
          f"{len(heads)} heads, {len(queries)}x{len(keys)} tokens)")
    return 0
