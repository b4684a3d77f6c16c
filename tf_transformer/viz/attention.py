"""Attention plots like the paper's appendix (behind ``tft plot-attention``).

Two styles:

* ``lines``: the appendix figures. Query tokens in a left column, key tokens in a right
  column; a line from a query token to each key token it attends to, its opacity the
  attention weight, one colour per head. ``--query-token`` keeps one query token (the
  appendix's "making" and "its" examples), the default draws every token.
* ``heatmap``: one ``[query, key]`` matrix per head of a layer, side by side.

Which attention: ``--attention encoder`` (encoder self-attention, as in the appendix),
``decoder`` (masked decoder self-attention) or ``cross`` (encoder-decoder attention). For the
decoder kinds the target is the model's greedy translation unless ``--target`` is given, and
each query row is labelled with the token that position predicts (the decoder's input there
is the token before it). Tokens are shown without SentencePiece's word marker "▁"; figures
are capped in size (:data:`MAX_INCHES`) with smaller labels for long sentences. Output format
follows the file suffix (``.png`` or ``.svg``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

KINDS = {"encoder": "encoder_self", "decoder": "decoder_self", "cross": "decoder_cross"}

#: The largest figure side in inches (long sentences get smaller labels instead).
MAX_INCHES = 16.0

#: SentencePiece's word-start marker.
WORD_MARK = "\u2581"


def display_pieces(pieces) -> list:
    """Pieces as shown in a figure: "▁" removed; a piece that is only "▁" shown as "␣"."""
    return [p.replace(WORD_MARK, "") or "\u2423" for p in pieces]


def predicted_pieces(decoder_input, eos_piece: str = "</s>") -> list:
    """What each decoder position predicts: the decoder input shifted left, then EOS
    (``["<s>", "Ein", "Hund"]`` -> ``["Ein", "Hund", "</s>"]``)."""
    return list(decoder_input[1:]) + [eos_piece]


def _font(inches: float, n: int, largest: float) -> float:
    """Label size in points for ``n`` tokens along ``inches`` of axis: ``largest`` while they fit
    (a label takes 1/0.7 of its size in points), then smaller, never under 4."""
    return min(largest, max(4.0, 0.7 * inches * 72.0 / max(1, n)))


#: Smallest label size (points) the heatmaps keep by laying their panels out in fewer columns.
HEATMAP_FONT = 5.0


def attention_for_sentence(model, tokenizer, sentence: str, target: str | None = None):
    """Run the model on one sentence and return ``(weights, source_pieces, target_pieces)``.

    ``weights`` is :meth:`Transformer.attention_weights`' dict with batch dimension removed:
    per kind, a list (one per layer) of ``[heads, query, key]`` arrays. Source pieces are the
    sentence's as the model reads them when it trains and translates (no ``</s>``), cut to the
    model's ``max_length``; target pieces start with ``<s>`` (the decoder input).
    """
    import keras

    src = list(tokenizer.encode([sentence])[0])
    limit = int(model.max_length)
    src = src[:limit]
    if target is None:
        from tf_transformer.decoding.model_fns import translate_batch

        ids, _ = translate_batch(model, np.array([src], "int32"), beam_size=1, bos_id=tokenizer.bos_id,
                                 eos_id=tokenizer.eos_id)
        tgt = [int(t) for t in keras.ops.convert_to_numpy(ids)[0] if t != 0]
    else:
        tgt = list(tokenizer.encode([target])[0])[: limit - 1]
    tgt_in = [tokenizer.bos_id] + tgt
    weights = model.attention_weights(np.array([src], "int32"), np.array([tgt_in], "int32"))
    arrays = {k: [keras.ops.convert_to_numpy(w)[0] for w in v] for k, v in weights.items()}
    return arrays, tokenizer.id_to_piece(src), tokenizer.id_to_piece(tgt_in)


def _colours(n):
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def plot_lines(weights, query_tokens, key_tokens, heads=None, query_index=None, title="", path=None,
               threshold=0.02, query_label="", key_label=""):
    """Appendix style: lines from query tokens (left) to key tokens (right), one colour per head.

    Args:
        weights: ``[heads, query, key]``.
        heads: head indices to draw (default all).
        query_index: draw only this query token's attention (default: every token).
        threshold: weights below this are not drawn.
        query_label, key_label: what the two columns are (e.g. "predicting", "source").
    Returns the matplotlib figure (also saved to ``path`` when given).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = list(range(weights.shape[0])) if heads is None else list(heads)
    colours = _colours(weights.shape[0])
    query_tokens, key_tokens = display_pieces(query_tokens), display_pieces(key_tokens)
    nq, nk = len(query_tokens), len(key_tokens)
    height = max(nq, nk)
    inches = min(MAX_INCHES, 0.32 * height + 1.2)
    font = _font(inches - 1.2, height, 9.0)  # 1.2: title and legend
    fig, ax = plt.subplots(figsize=(5.5, inches))
    yq = np.linspace(height - 1, 0, nq) if nq > 1 else np.array([height / 2])
    yk = np.linspace(height - 1, 0, nk) if nk > 1 else np.array([height / 2])
    queries = range(nq) if query_index is None else [query_index]
    # each head's lines leave its query token at a small vertical offset, so heads that
    # agree stay visible side by side; weakest lines are drawn first, strongest on top
    offsets = {h: (i - (len(heads) - 1) / 2) * min(0.12, 0.5 / max(1, len(heads))) for i, h in enumerate(heads)}
    segments = [(float(weights[h, q, k]), h, q, k) for h in heads for q in queries for k in range(nk)
                if float(weights[h, q, k]) >= threshold]
    for w, h, q, k in sorted(segments):
        dy = offsets[h]
        ax.plot([0.05, 0.95], [yq[q] + dy, yk[k] + dy], color=colours[h], alpha=min(1.0, w), linewidth=0.6 + 1.8 * w)
    for i, tok in enumerate(query_tokens):
        ax.text(0.0, yq[i], tok, ha="right", va="center", fontsize=font,
                fontweight="bold" if query_index == i else "normal")
    for i, tok in enumerate(key_tokens):
        ax.text(1.0, yk[i], tok, ha="left", va="center", fontsize=font)
    if query_label or key_label:
        ax.text(0.0, height - 0.2, query_label, ha="right", va="bottom", fontsize=8, style="italic")
        ax.text(1.0, height - 0.2, key_label, ha="left", va="bottom", fontsize=8, style="italic")
    handles = [plt.Line2D([], [], color=colours[h], label=f"head {h}") for h in heads]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.01), ncol=min(len(heads), 8),
              fontsize=7, frameon=False)
    ax.set_xlim(-0.45, 1.45)
    ax.set_ylim(-1, height)
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=150, bbox_inches="tight")
    return fig


def plot_heatmaps(weights, query_tokens, key_tokens, title="", path=None, query_label="query",
                  key_label="key", head_labels=None):
    """One heatmap per head of ``weights`` ``[heads, query, key]`` (rows: queries), one
    colourbar for all (weights 0..1); ``head_labels`` name the panels (default 0, 1, ...)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = weights.shape[0]
    head_labels = list(range(n)) if head_labels is None else list(head_labels)
    query_tokens, key_tokens = display_pieces(query_tokens), display_pieces(key_tokens)
    longest = max(len(query_tokens), len(key_tokens))
    natural = 0.22 * longest + 1.5  # a panel's side in inches, labels included (1 inch)
    readable = longest * HEATMAP_FONT / (0.7 * 72.0) + 1.0  # the side that keeps labels at HEATMAP_FONT
    cols, tallest = min(n, 4), MAX_INCHES  # 0.8 below: the colourbar
    if readable <= MAX_INCHES - 0.8:  # fewer columns (a taller figure) keep the labels readable
        while cols > 1 and (MAX_INCHES - 0.8) / cols < min(natural, readable):
            cols -= 1
        tallest = 4 * MAX_INCHES
    rows = (n + cols - 1) // cols
    size = min(natural, (MAX_INCHES - 0.8) / cols, tallest / rows)
    font = _font(size - 1.0, longest, HEATMAP_FONT)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * size + 0.8, rows * size), squeeze=False)
    image = None
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= n:
            ax.axis("off")
            continue
        image = ax.imshow(weights[h], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=font)
        ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=font)
        ax.set_title(f"head {head_labels[h]}", fontsize=8)
        if h % cols == 0:
            ax.set_ylabel(query_label, fontsize=7)
        if h // cols == rows - 1 or h + cols >= n:
            ax.set_xlabel(key_label, fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    if path is not None:
        fig.savefig(path, dpi=150, bbox_inches="tight")
    return fig


def plot_sentence_attention(model, tokenizer, sentence: str, out_dir) -> list:
    """The demo's attention figures (``make demo``) for ``sentence`` (greedy translation as the target):
    appendix-style lines of the last encoder layer and heatmaps of the last decoder layer's
    encoder-decoder attention, every head. Returns the written paths."""
    weights, src, tgt = attention_for_sentence(model, tokenizer, sentence)
    out_dir = Path(out_dir)
    enc, cross = weights["encoder_self"], weights["decoder_cross"]
    lines = out_dir / "attention-encoder-lines.png"
    heat = out_dir / "attention-cross-heatmap.png"
    plot_lines(enc[-1], src, src, title=f"encoder self-attention, layer {len(enc)} of {len(enc)}", path=lines,
               query_label="source", key_label="source")
    plot_heatmaps(cross[-1], predicted_pieces(tgt), src, path=heat, query_label="predicting", key_label="source",
                  title=f"encoder-decoder attention, layer {len(cross)} of {len(cross)}")
    import matplotlib.pyplot as plt

    plt.close("all")
    return [lines, heat]
