"""Attention plots like the paper's appendix (behind ``tft plot-attention``).

Two styles:

* ``lines``: the appendix figures. Query tokens in a left column, key tokens in a right
  column; a line from a query token to each key token it attends to, its opacity the
  attention weight, one colour per head. ``--query-token`` keeps one query token (the
  appendix's "making" and "its" examples), the default draws every token.
* ``heatmap``: one ``[query, key]`` matrix per head of a layer, side by side.

Which attention: ``--attention encoder`` (encoder self-attention, as in the appendix),
``decoder`` (masked decoder self-attention) or ``cross`` (encoder-decoder attention). For the
decoder kinds the target is the model's greedy translation unless ``--target`` is given.
Output format follows the file suffix (``.png`` or ``.svg``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

KINDS = {"encoder": "encoder_self", "decoder": "decoder_self", "cross": "decoder_cross"}


def attention_for_sentence(model, tokenizer, sentence: str, target: str | None = None):
    """Run the model on one sentence and return ``(weights, source_pieces, target_pieces)``.

    ``weights`` is :meth:`Transformer.attention_weights`' dict with batch dimension removed:
    per kind, a list (one per layer) of ``[heads, query, key]`` arrays. Source pieces end with
    ``</s>``; target pieces start with ``<s>`` (the decoder input).
    """
    import keras

    src = list(tokenizer.encode([sentence])[0])
    limit = int(model.max_length)
    src = src[: limit - 1] + [tokenizer.eos_id]
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
               threshold=0.02):
    """Appendix style: lines from query tokens (left) to key tokens (right), one colour per head.

    Args:
        weights: ``[heads, query, key]``.
        heads: head indices to draw (default all).
        query_index: draw only this query token's attention (default: every token).
        threshold: weights below this are not drawn.
    Returns the matplotlib figure (also saved to ``path`` when given).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    heads = list(range(weights.shape[0])) if heads is None else list(heads)
    colours = _colours(weights.shape[0])
    nq, nk = len(query_tokens), len(key_tokens)
    height = max(nq, nk)
    fig, ax = plt.subplots(figsize=(5.5, 0.32 * height + 1.2))
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
        ax.text(0.0, yq[i], tok, ha="right", va="center", fontsize=9,
                fontweight="bold" if query_index == i else "normal")
    for i, tok in enumerate(key_tokens):
        ax.text(1.0, yk[i], tok, ha="left", va="center", fontsize=9)
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


def plot_heatmaps(weights, query_tokens, key_tokens, title="", path=None):
    """One heatmap per head of ``weights`` ``[heads, query, key]`` (rows: queries)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = weights.shape[0]
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    size = 0.22 * max(len(query_tokens), len(key_tokens)) + 1.5
    fig, axes = plt.subplots(rows, cols, figsize=(cols * size, rows * size), squeeze=False)
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= n:
            ax.axis("off")
            continue
        ax.imshow(weights[h], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=90, fontsize=6)
        ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=6)
        ax.set_title(f"head {h}", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
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
    plot_lines(enc[-1], src, src, title=f"encoder self-attention, layer {len(enc)} of {len(enc)}", path=lines)
    plot_heatmaps(cross[-1], tgt, src, title=f"encoder-decoder attention, layer {len(cross)} of {len(cross)}",
                  path=heat)
    import matplotlib.pyplot as plt

    plt.close("all")
    return [lines, heat]
