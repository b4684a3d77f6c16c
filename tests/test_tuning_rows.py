"""Table 3 rows scaled to the small config: the mapping, and the models it builds (no training)."""

import dataclasses

import keras
import pytest

from tf_transformer.config import ConfigError, load_config
from tf_transformer.errors import UserError
from tf_transformer.model import Transformer, count_parameters
from tf_transformer.tuning import rows as rows_mod
from tf_transformer.tuning.ablation import listing
from tf_transformer.tuning.rows import ROWS, TABLE3_ROWS, parse_rows, row_config, scaled_change

# multi30k_small: N=3, d_model=256, h=4 (d_k=d_v=64), d_ff=1024, P_drop=0.1, eps_ls=0.1, sinusoids.
# row: (h, d_k, d_v, N, d_model, d_ff, P_drop, eps_ls, positions)
EXPECTED = {
    "base": (4, 64, 64, 3, 256, 1024, 0.1, 0.1, "sinusoidal"),
    "A1": (1, 256, 256, 3, 256, 1024, 0.1, 0.1, "sinusoidal"),   # paper h=1 (1/8 of 8): single head
    "A2": (2, 128, 128, 3, 256, 1024, 0.1, 0.1, "sinusoidal"),   # paper h=4 = base/2
    "A3": (8, 32, 32, 3, 256, 1024, 0.1, 0.1, "sinusoidal"),     # paper h=16 = 2 x base
    "A4": (16, 16, 16, 3, 256, 1024, 0.1, 0.1, "sinusoidal"),    # paper h=32 = 4 x base
    "B1": (4, 16, 64, 3, 256, 1024, 0.1, 0.1, "sinusoidal"),     # paper d_k=16 of 64
    "B2": (4, 32, 64, 3, 256, 1024, 0.1, 0.1, "sinusoidal"),     # paper d_k=32 of 64
    "C1": (4, 64, 64, 1, 256, 1024, 0.1, 0.1, "sinusoidal"),     # paper N=2 of 6 -> 3*2/6
    "C2": (4, 64, 64, 2, 256, 1024, 0.1, 0.1, "sinusoidal"),     # paper N=4 of 6
    "C3": (4, 64, 64, 4, 256, 1024, 0.1, 0.1, "sinusoidal"),     # paper N=8 of 6
    "C4": (4, 32, 32, 3, 128, 1024, 0.1, 0.1, "sinusoidal"),     # paper d_model=256, d_k=d_v=32
    "C5": (4, 128, 128, 3, 512, 1024, 0.1, 0.1, "sinusoidal"),   # paper d_model=1024, d_k=d_v=128
    "C6": (4, 64, 64, 3, 256, 512, 0.1, 0.1, "sinusoidal"),      # paper d_ff=1024 of 2048
    "C7": (4, 64, 64, 3, 256, 2048, 0.1, 0.1, "sinusoidal"),     # paper d_ff=4096 of 2048
    "D1": (4, 64, 64, 3, 256, 1024, 0.0, 0.1, "sinusoidal"),
    "D2": (4, 64, 64, 3, 256, 1024, 0.2, 0.1, "sinusoidal"),
    "D3": (4, 64, 64, 3, 256, 1024, 0.1, 0.0, "sinusoidal"),
    "D4": (4, 64, 64, 3, 256, 1024, 0.1, 0.2, "sinusoidal"),
    "E": (4, 64, 64, 3, 256, 1024, 0.1, 0.1, "learned"),
}

VOCAB = 64


@pytest.fixture(scope="module")
def small():
    return load_config("multi30k_small")


@pytest.fixture(scope="module")
def built(small):
    """Every row's small model, built (weights created), with a 64-piece vocabulary."""
    out = {}
    for row in ROWS:
        cfg = row_config(row, small)
        keras.backend.clear_session()
        model = Transformer.from_config_section(dataclasses.replace(cfg.model, vocab_size=VOCAB))
        model.build()
        out[row] = (cfg, model, {w.path: tuple(w.shape) for w in model.weights}, count_parameters(model))
    return out


def test_all_table3_rows_are_mapped():
    assert set(EXPECTED) == set(ROWS) and len(TABLE3_ROWS) == 18


@pytest.mark.parametrize("row", ROWS)
def test_row_config_values(small, row):
    cfg = row_config(row, small)
    m = cfg.model.resolved()
    got = (m.num_heads, m.key_dim, m.value_dim, m.num_layers, m.d_model, m.d_ff, m.dropout,
           cfg.train.label_smoothing, m.position_encoding)
    assert got == EXPECTED[row]
    # nothing else changes: data, schedule, budget, decoding stay the base config's
    assert cfg.data == small.data and cfg.decode == small.decode
    assert dataclasses.replace(cfg.train, label_smoothing=small.train.label_smoothing) == small.train


@pytest.mark.parametrize("row", ROWS)
def test_row_model_shapes(built, row):
    h, dk, dv, n, d, dff, drop, _, positions = EXPECTED[row]
    cfg, model, shapes, _ = built[row]
    assert (model.num_heads, model.key_dim, model.value_dim, model.num_layers, model.d_model, model.d_ff) == \
        (h, dk, dv, n, d, dff)
    assert model.dropout_rate == pytest.approx(drop) and model.position_encoding == positions
    for stack, kinds in (("encoder", ("self_attention",)), ("decoder", ("self_attention", "cross_attention"))):
        layers = {p.split("/")[2] for p in shapes if p.startswith(f"transformer/{stack}/layer_")}
        assert layers == {f"layer_{i}" for i in range(n)}
        for i in range(n):
            for kind in kinds:
                prefix = f"transformer/{stack}/layer_{i}/{kind}/"
                assert shapes[prefix + "query_kernel"] == (d, h * dk)
                assert shapes[prefix + "key_kernel"] == (d, h * dk)
                assert shapes[prefix + "value_kernel"] == (d, h * dv)
                assert shapes[prefix + "output_kernel"] == (h * dv, d)
            ffn = f"transformer/{stack}/layer_{i}/ffn/"
            assert shapes[ffn + "inner_kernel"] == (d, dff) and shapes[ffn + "outer_kernel"] == (dff, d)
    assert shapes["transformer/shared_embedding/embeddings"] == (VOCAB, d)
    learned = [p for p in shapes if p.startswith("transformer/positions/")]
    if positions == "learned":
        assert [shapes[p] for p in learned] == [(cfg.model.max_length, d)]
    else:
        assert learned == []


def test_row_parameter_counts_move_like_the_papers(built):
    params = {row: built[row][3] for row in ROWS}
    base = params["base"]
    # A: constant computation (h * d_k = d_model) keeps every weight matrix's size
    for row in ("A1", "A2", "A3", "A4", "D1", "D2", "D3", "D4"):
        assert params[row] == base, row
    # the paper's params column orders these rows the same way (B1 58 < B2 60 < base 65, ...)
    assert params["B1"] < params["B2"] < base
    assert params["C1"] < params["C2"] < base < params["C3"]
    assert params["C4"] < base < params["C5"]
    assert params["C6"] < base < params["C7"]
    assert params["E"] == base + 256 * load_config("multi30k_small").model.max_length
    # exact: B1 shrinks each attention block's Q and K by d_model * h * (64 - 16); 3 + 2*3 blocks
    assert base - params["B1"] == 9 * 2 * 256 * 4 * (64 - 16)


def test_a_rows_keep_constant_computation(small):
    for row in ("A1", "A2", "A3", "A4"):
        change = scaled_change(row, small)["model"]
        h = change["num_heads"]
        assert h * change["key_dim"] == small.model.d_model == h * change["value_dim"]


def test_scaling_follows_another_base():
    cfg = load_config("multi30k_small", ["model.d_model=64", "model.num_heads=8", "model.num_layers=6",
                                         "model.d_ff=128"])
    assert scaled_change("A1", cfg)["model"] == {"num_heads": 1, "key_dim": 64, "value_dim": 64}
    assert scaled_change("A3", cfg)["model"] == {"num_heads": 16, "key_dim": 4, "value_dim": 4}
    assert scaled_change("B1", cfg)["model"] == {"key_dim": 2}     # 8 * 16/64
    assert scaled_change("C1", cfg)["model"] == {"num_layers": 2}  # the paper's values at the paper's N
    assert scaled_change("C7", cfg)["model"] == {"d_ff": 256}
    assert scaled_change("E", cfg)["model"] == {"position_encoding": "learned"}
    assert scaled_change("D4", cfg) == {"model": {}, "train": {"label_smoothing": 0.2}}


def test_paper_base_maps_to_the_papers_presets():
    """Applied to the paper's own base, every row is exactly its table3 preset."""
    base = load_config("base")
    for row in TABLE3_ROWS:
        ours = row_config(row, base)
        preset = load_config(rows_mod.preset_name(row))
        assert ours.model.resolved() == preset.model.resolved(), row
        assert ours.train.label_smoothing == preset.train.label_smoothing, row


def test_rows_that_round_to_the_same_model_are_found(small):
    """multi30k_small (N=3): every row distinct; at N=2 the paper's N=2 and N=4 of 6 both round
    to N=1 (C1 = C2), and the report says so."""
    from tf_transformer.tuning.ablation import format_report
    from tf_transformer.tuning.rows import same_as_earlier

    assert rows_mod.same_as_earlier(ROWS, small) == {}
    two = load_config("multi30k_small", ["model.num_layers=2"])
    assert same_as_earlier(ROWS, two) == {"C2": "C1"}
    assert same_as_earlier(["C2", "C1", "E"], two) == {"C1": "C2"}
    record = {"change": "x", "params": 1e6, "ppl": 9.0, "bleu": 1.0, "steps": 2}
    results = {"settings": {"base_config": "b", "overrides": [], "steps": 2, "minutes": None, "beam_size": 1,
                            "alpha": 0.6, "bleu_sentences": None},
               "rows": {r: {**record, "row": r, "paper": rows_mod.paper_figures(r)} for r in ("base", "C1", "C2")},
               "same_as": {"C2": "C1", "C3": "C1"}}
    assert "some rows are the same model as an earlier one (their differences are noise, not the row's " \
           "change): C2 = C1." in format_report(results)


def test_heads_that_do_not_divide_d_model_are_refused():
    cfg = load_config("multi30k_small", ["model.d_model=100", "model.key_dim=25", "model.value_dim=25"])
    with pytest.raises(ConfigError, match="A3: 8 heads do not divide model.d_model=100"):
        row_config("A3", cfg)


def test_parse_rows():
    assert parse_rows("A1,e") == ["A1", "E"]
    assert parse_rows("C") == ["C1", "C2", "C3", "C4", "C5", "C6", "C7"]
    assert parse_rows("E,A1,A1, base") == ["base", "A1", "E"]
    assert parse_rows("all") == list(ROWS)
    with pytest.raises(UserError, match="'F2' is not a Table 3 row"):
        parse_rows("A1,F2")
    with pytest.raises(UserError, match="empty"):
        parse_rows(" , ")


def test_listing_has_every_row(small):
    text = listing(small)
    for row, (h, dk, dv, n, d, dff, *_rest) in EXPECTED.items():
        assert f"| {row} | " in text
    assert "| A1 | h=1, d_k=d_v=512 | h=1, d_k=d_v=256 | 1 | 256 | 256 | 3 | 256 | 1024 |" in text
