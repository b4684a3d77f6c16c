"""Attention plots: weights rows sum to 1, the command writes non-empty PNG and SVG files."""

import gzip

import numpy as np
import pytest

from tf_transformer.cli import main
from tf_transformer.data.tokenizer import Tokenizer, train_sentencepiece
from tf_transformer.model import Transformer
from tf_transformer.viz.attention import attention_for_sentence


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("viz")
    with gzip.open("data/multi30k/train.en.gz", "rt", encoding="utf-8") as f:
        lines = [next(f).strip() for _ in range(300)]
    proto = train_sentencepiece(iter(lines), vocab_size=200)
    (root / "spm.model").write_bytes(proto)
    tok = Tokenizer(proto)
    model = Transformer(vocab_size=tok.vocab_size, d_model=16, num_layers=2, num_heads=4, d_ff=32, max_length=64)
    model.build()
    model.save(root / "m.keras")
    return root, model, tok


def test_attention_rows_sum_to_one(tiny):
    _, model, tok = tiny
    weights, src, tgt = attention_for_sentence(model, tok, "Two dogs play in the snow.", target="A dog.")
    # the source as training and translation feed it (no </s>), the decoder input from <s>
    assert src == tok.id_to_piece(list(tok.encode(["Two dogs play in the snow."])[0])) and "</s>" not in src
    assert tgt[0] == "<s>"
    for kind, (q, k) in {"encoder_self": (src, src), "decoder_self": (tgt, tgt), "decoder_cross": (tgt, src)}.items():
        assert len(weights[kind]) == 2
        for w in weights[kind]:
            assert w.shape == (4, len(q), len(k))
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)
    upper = np.triu(np.ones((len(tgt), len(tgt)), bool), 1)
    assert np.all(weights["decoder_self"][0][:, upper] == 0)  # causal


@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_plot_attention_command_writes_images(tiny, suffix, magic, capsys):
    root, _, _ = tiny
    out = root / f"attn{suffix}"
    code = main(["plot-attention", "--model", str(root / "m.keras"), "--vocab", str(root / "spm.model"),
                 "--sentence", "A man rides a bike.", "--attention", "encoder", "--layer", "1",
                 "--style", "both", "--output", str(out)])
    assert code == 0
    for name in ("attn-lines", "attn-heatmap"):
        data = (root / f"{name}{suffix}").read_bytes()
        assert data.startswith(magic) and len(data) > 2000
    assert "wrote" in capsys.readouterr().out


def test_plot_attention_in_a_fresh_process(tiny):
    """The command loads the model itself (no test-side import registers the classes)."""
    import os
    import subprocess
    import sys

    root, _, _ = tiny
    out = root / "fresh.png"
    proc = subprocess.run([sys.executable, "-m", "tf_transformer.cli", "plot-attention",
                           "--model", str(root / "m.keras"), "--vocab", str(root / "spm.model"),
                           "--sentence", "A dog.", "--attention", "cross",
                           "--style", "heatmap", "--output", str(out)],
                          capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_bytes().startswith(b"\x89PNG")


def test_plot_attention_bad_layer_is_a_clear_error(tiny, capsys):
    root, _, _ = tiny
    code = main(["plot-attention", "--model", str(root / "m.keras"), "--vocab", str(root / "spm.model"),
                 "--sentence", "A man.", "--layer", "7", "--output", str(root / "x.png")])
    assert code == 2
    assert "--layer 7: the model has 2 layers" in capsys.readouterr().err
    base = ["plot-attention", "--model", str(root / "m.keras"), "--vocab", str(root / "spm.model"), "--sentence",
            "A man."]
    for extra, said in ((["--heads", "0,0"], "--heads 0,0: head 0 given more than once"),
                        (["--query-token", "1"],
                         "--query-token draws one query position's lines: it applies to --style lines or both")):
        assert main(base + extra + ["--output", str(root / "x.png")]) == 2, extra
        assert said in capsys.readouterr().err, extra
    assert not (root / "x.png").exists()
    # a folder that does not exist yet is made (it failed after the model had run)
    assert main(base + ["--output", str(root / "new" / "dir" / "x.png")]) == 0
    assert (root / "new" / "dir" / "x.png").read_bytes().startswith(b"\x89PNG")


def test_a_sentence_over_the_model_limit_is_plotted_cut_with_a_warning(tiny, capsys):
    root, model, tok = tiny
    sentence = " ".join(["a man rides a bike"] * 30)
    n = len(tok.encode([sentence])[0])
    assert n > model.max_length
    code = main(["plot-attention", "--model", str(root / "m.keras"), "--vocab", str(root / "spm.model"),
                 "--sentence", sentence, "--attention", "encoder", "--style", "heatmap",
                 "--output", str(root / "long.png")])
    out = capsys.readouterr()
    assert code == 0 and f"{model.max_length}x{model.max_length} tokens" in out.out
    assert f"--sentence has {n} tokens, more than the model limit of {model.max_length}" in out.err
    code = main(["plot-attention", "--model", str(root / "m.keras"), "--vocab", str(root / "spm.model"),
                 "--sentence", "a man.", "--target", sentence, "--attention", "cross", "--style", "heatmap",
                 "--output", str(root / "long-target.png")])
    out = capsys.readouterr()
    assert code == 0 and f"{model.max_length}x" in out.out
    assert f"--target has more tokens than the model limit of {model.max_length}" in out.err


def test_demo_writes_both_attention_figures(tiny, tmp_path):
    from tf_transformer.viz.attention import plot_sentence_attention

    _, model, tok = tiny
    paths = plot_sentence_attention(model, tok, "A girl climbs the stairs.", tmp_path)
    assert [p.name for p in paths] == ["attention-encoder-lines.png", "attention-cross-heatmap.png"]
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 2000


@pytest.mark.parametrize("heads,tokens", [(4, 64), (4, 12), (8, 100)])
def test_heatmap_and_line_labels_stay_readable(heads, tokens):
    """Long sentences: the heatmaps take fewer columns (a taller figure) rather than labels under
    5 pt while they can; the figure stays within MAX_INCHES wide; short ones keep 4 columns."""
    import matplotlib.pyplot as plt

    from tf_transformer.viz.attention import HEATMAP_FONT, MAX_INCHES, plot_heatmaps, plot_lines

    weights = np.stack([np.roll(np.eye(tokens), h, axis=1) for h in range(heads)])  # one line per query
    pieces = [f"▁w{i}" for i in range(tokens)]
    fig = plot_heatmaps(weights, pieces, pieces)
    panels = [ax for ax in fig.axes if ax.get_images()]
    sizes = {t.get_fontsize() for ax in panels for t in ax.get_xticklabels() + ax.get_yticklabels()}
    width, height = fig.get_size_inches()
    assert len(panels) == heads and width <= MAX_INCHES + 1e-6
    if tokens <= 64:
        assert min(sizes) >= HEATMAP_FONT
    else:
        assert min(sizes) >= 4.0
    columns = len({round(ax.get_position().x0, 3) for ax in panels})
    assert columns == (4 if tokens <= 30 else 2 if tokens == 64 else 1)
    assert height <= (MAX_INCHES if columns == 4 else 4 * MAX_INCHES) + 1e-6
    plt.close(fig)
    fig = plot_lines(weights, pieces, pieces)
    texts = [t.get_fontsize() for t in fig.axes[0].texts if t.get_text().startswith("w")]
    assert len(texts) == 2 * tokens and min(texts) >= (9.0 if tokens <= 64 else 4.0)
    plt.close(fig)
