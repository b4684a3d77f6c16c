"""Metrics: BLEU against the formula, case handling, compound splitting, signatures."""

import math
from collections import Counter

import pytest

from tf_transformer.errors import UserError
from tf_transformer.evaluation.bleu import (
    chrf,
    compound_split,
    compound_split_bleu,
    evaluate_translations,
    format_scores,
    lowercase_bleu,
    moses_lowercase_bleu,
    moses_tokenize,
    sacre_bleu,
    tokenize_13a,
)


def reference_bleu(hyps, refs, max_n=4):
    """Corpus BLEU from its definition (Papineni et al. 2002): clipped n-gram precisions,
    geometric mean, brevity penalty exp(1 - r/c) when c < r."""
    matches, totals = [0] * max_n, [0] * max_n
    c = r = 0
    for h, ref in zip(hyps, refs):
        h, ref = h.split(), ref.split()
        c += len(h)
        r += len(ref)
        for n in range(1, max_n + 1):
            hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            rc = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += sum(min(k, rc[g]) for g, k in hc.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    log_p = sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n
    bp = 1.0 if c >= r else math.exp(1 - r / c)
    return 100 * bp * math.exp(log_p)


HYPS = ["a man in a blue shirt is standing on a ladder cleaning windows",
        "two dogs play in the grass",
        "a girl in a red coat walks down the street"]
REFS = ["a man in a blue shirt is standing on a ladder and cleaning a window",
        "two dogs are playing in the green grass",
        "a girl in a red jacket walks down the busy street"]


def test_bleu_equals_formula():
    expected = reference_bleu(HYPS, REFS)
    assert compound_split_bleu(HYPS, REFS).score == pytest.approx(expected, abs=1e-6)
    assert sacre_bleu(HYPS, REFS).score == pytest.approx(expected, abs=1e-6)  # 13a is a no-op here
    short = [h.rsplit(" ", 3)[0] for h in HYPS]  # brevity penalty active
    assert sacre_bleu(short, REFS).score == pytest.approx(reference_bleu(short, REFS), abs=1e-6)


def test_case_and_lowercase():
    hyps = [h.replace("a ", "A ", 1).upper() for h in HYPS]
    assert sacre_bleu(hyps, REFS).score < 5
    assert lowercase_bleu(hyps, REFS).score == pytest.approx(sacre_bleu(HYPS, REFS).score, abs=1e-6)


def test_compound_split():
    assert compound_split("rich-text format") == "rich ##AT##-##AT## text format"
    assert compound_split("a-b-c") == "a ##AT##-##AT## b ##AT##-##AT## c"
    assert compound_split("well - known") == "well - known"
    assert compound_split("-x y-") == "-x y-"
    assert tokenize_13a('Ein "Hund", 3-4 Katzen.') == 'Ein " Hund " , 3 - 4 Katzen .'
    # A hyphenated compound gets partial credit once split, none as one token.
    hyp, ref = ["der Rot-Kreuz-Wagen fährt"], ["der Rot-Kreuz Wagen fährt"]
    assert compound_split_bleu(hyp, ref).score > sacre_bleu(hyp, ref).score


def test_signatures_and_labels():
    scores = evaluate_translations(HYPS, REFS)
    assert set(scores) == {"sacrebleu", "chrf", "bleu_lc", "bleu_lc_moses", "bleu_paper"}
    assert "tok:moses-de" in scores["bleu_lc_moses"].signature and "case:lc" in scores["bleu_lc_moses"].signature
    assert "case:mixed" in scores["sacrebleu"].signature and "tok:13a" in scores["sacrebleu"].signature
    assert "version:" in scores["sacrebleu"].signature
    assert "nc:6" in scores["chrf"].signature
    assert "case:lc" in scores["bleu_lc"].signature
    assert "compound" in scores["bleu_paper"].signature
    assert 0 < scores["chrf"].score < 100
    lines = format_scores(scores)
    assert len(lines) == 5 and lines[0].startswith("sacreBLEU")
    assert chrf(HYPS, HYPS).score == pytest.approx(100.0)


def test_mismatch_is_a_user_error():
    with pytest.raises(UserError, match="2 hypotheses but 3 references"):
        sacre_bleu(HYPS[:2], REFS)
    with pytest.raises(UserError, match="no sentences"):
        chrf([], [])


def test_moses_lowercase_bleu_is_bleu_of_moses_tokens():
    # Moses splits punctuation off words (German rules), keeps in-word hyphens; then the
    # score is plain BLEU over lowercased whitespace tokens.
    assert moses_tokenize(["Ein Hund, der läuft.", "Ein saftig-grünes Gras"], "de") == [
        "Ein Hund , der läuft .", "Ein saftig-grünes Gras"]
    hyps = ["Ein Hund läuft durch den Schnee.", "Zwei Männer, die auf einer Bank sitzen."]
    refs = ["ein Hund rennt durch den Schnee.", "Zwei Männer sitzen auf einer Bank."]
    tok_h = [t.lower() for t in moses_tokenize(hyps, "de")]
    tok_r = [t.lower() for t in moses_tokenize(refs, "de")]
    assert moses_lowercase_bleu(hyps, refs).score == pytest.approx(reference_bleu(tok_h, tok_r), abs=1e-6)
    # case is ignored, punctuation attached or detached is the same after tokenization
    assert moses_lowercase_bleu(["EIN HUND , DER LÄUFT ."], ["ein Hund, der läuft."]).score == pytest.approx(100.0)
