"""Translation metrics, each labelled with exactly what it measures.

* **sacreBLEU**: detokenized, cased, sacreBLEU's 13a tokenization, with its signature
  (``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...``). The number to report.
* **chrF2**: sacreBLEU's character n-gram F-score (``nc:6|nw:0``), with its signature.
* **BLEU lowercased (13a)**: the same text lowercased, sacreBLEU's 13a tokenization.
* **BLEU lowercased, Moses-tokenized**: both sides tokenized with the Moses tokenizer
  (sacremoses, the target language's rules, no HTML escaping), lowercased, then BLEU over
  the whitespace tokens (what ``multi-bleu.perl -lc`` computes on Moses-tokenized
  files). This is how Multi30k results are usually reported (e.g. Wu et al., ACL 2021,
  Transformer-Tiny: 41.02 on test2016 En->De), so it is the figure to compare with them.
* **BLEU tokenized + compound split**: the paper's style (tensor2tensor's
  ``get_ende_bleu.sh``): tokenize both sides, then split hyphenated compounds
  (``rich-text`` -> ``rich ##AT##-##AT## text``), then plain cased BLEU over the
  whitespace tokens (what ``multi-bleu.perl`` computes). Tokenization here is
  mteval-v13a (sacreBLEU's ``13a``) rather than the Moses tokenizer script, which is not
  available offline; both keep intra-word hyphens, so the compound split sees the same
  words. Our split rule is applied to every hyphen between two non-space characters,
  including chains (``a-b-c`` -> ``a ##AT##-##AT## b ##AT##-##AT## c``).

All scores are corpus-level, one reference per sentence.

A model whose vocabulary lowercases (``data.lowercase``) writes lowercase; its vocabulary's
recaser (:mod:`tf_transformer.data.recase`) gives the decoded text its case back, and the
cased metrics score that against the references as they are. A lowercasing vocabulary
without a recaser (built before vocabularies carried one) leaves the outputs lowercase:
then every scorer (``tft evaluate``, the validation-BLEU callback, the tuning scores)
lowercases the references first (:func:`references_for`) and says so, so that the cased
metrics measure translation and not the case the model cannot write.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Optional

from tf_transformer.errors import UserError

__all__ = [
    "METRICS",
    "MetricSpec",
    "Score",
    "chrf",
    "compound_split",
    "compound_split_bleu",
    "evaluate_translations",
    "format_scores",
    "lowercase_bleu",
    "moses_lowercase_bleu",
    "moses_tokenize",
    "references_for",
    "sacre_bleu",
    "text_notes",
    "tokenize_13a",
    "tokenized_outputs",
    "uncased_outputs",
]

_HYPHEN_IN_WORD = re.compile(r"(?<=\S)-(?=\S)")


@dataclasses.dataclass
class Score:
    """One metric: ``name``, ``score`` (0-100), a detail string (n-gram precisions, brevity
    penalty) and a ``signature`` saying how it was computed."""

    name: str
    score: float
    detail: str
    signature: str

    def line(self, width: int = 28) -> str:
        return f"{self.name:<{width}} {self.score:6.2f}  {self.detail}  [{self.signature}]"


def compound_split(text: str) -> str:
    """Split hyphenated compounds the way t2t's BLEU script does: ``(\\S)-(\\S)`` becomes
    ``\\1 ##AT##-##AT## \\2``. Every in-word hyphen is split (chains included)."""
    return _HYPHEN_IN_WORD.sub(" ##AT##-##AT## ", text)


def tokenize_13a(text: str) -> str:
    """mteval-v13a tokenization (sacreBLEU's default)."""
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    return Tokenizer13a()(text)


def references_for(tokenizer, references: Sequence[str]) -> list[str]:
    """``references`` as the outputs of ``tokenizer``'s model should be scored against them:
    lowercased when the vocabulary lowercases (``tokenizer.lowercase``) and carries no
    recaser (its outputs stay lowercase), else unchanged."""
    if getattr(tokenizer, "lowercase", False) and getattr(tokenizer, "recaser", None) is None:
        return [r.lower() for r in references]
    return list(references)


def _check(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise UserError(
            f"{len(hypotheses)} hypotheses but {len(references)} references: the files must have one line per sentence"
        )
    if not hypotheses:
        raise UserError("no sentences to score (the hypothesis and reference lists are empty)")


def _bleu_detail(result) -> str:
    precisions = "/".join(f"{p:.1f}" for p in result.precisions)
    return f"{precisions} (BP={result.bp:.3f} ratio={result.sys_len / max(result.ref_len, 1):.3f} " \
           f"hyp_len={result.sys_len} ref_len={result.ref_len})"


def _moses_lowercased(texts: Sequence[str], lang: str) -> list[str]:
    return [t.lower() for t in moses_tokenize(texts, lang)]


def _paper_tokenized(texts: Sequence[str], lang: str) -> list[str]:
    return [compound_split(tokenize_13a(t)) for t in texts]


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """How one metric is computed: its label, the sacreBLEU metric that scores it, what is
    done to both sides first (``prepare(texts, lang)``; None: nothing) and the signature
    fields that say so (``tok``/``case`` in place of sacreBLEU's own, for text we tokenized)."""

    key: str
    name: str
    kind: str  # "bleu" or "chrf"
    options: tuple[tuple[str, object], ...] = ()
    prepare: Optional[Callable[[Sequence[str], str], list[str]]] = None
    signature_fields: Optional[Callable[[str], dict]] = None

    def metric(self):
        """A fresh sacreBLEU metric object."""
        from sacrebleu.metrics import BLEU, CHRF

        return (BLEU if self.kind == "bleu" else CHRF)(**dict(self.options))

    def prepared(self, texts: Sequence[str], lang: str) -> list[str]:
        """One side (hypotheses or references) as the metric reads it."""
        return list(texts) if self.prepare is None else self.prepare(texts, lang)

    def inputs(self, hypotheses: Sequence[str], references: Sequence[str], lang: str
               ) -> tuple[list[str], list[str]]:
        """Both sides as the metric reads them."""
        return self.prepared(hypotheses, lang), self.prepared(references, lang)

    def score_of(self, metric, result, lang: str) -> Score:
        """The labelled :class:`Score` of a sacreBLEU result of :meth:`metric`."""
        detail = _bleu_detail(result) if self.kind == "bleu" else ""
        fields = self.signature_fields(lang) if self.signature_fields else {}
        signature = _signature(metric, **fields) if fields else str(metric.get_signature())
        return Score(self.name, result.score, detail, signature)

    def __call__(self, hypotheses: Sequence[str], references: Sequence[str], lang: str = "de") -> Score:
        _check(hypotheses, references)
        hyp, ref = self.inputs(hypotheses, references, lang)
        metric = self.metric()
        return self.score_of(metric, metric.corpus_score(hyp, [ref]), lang)


#: Every metric :func:`evaluate_translations` reports, in its order. All BLEU variants use
#: ``force=True``: the tokenized ones tokenize on purpose, and for the others
#: :func:`tokenized_outputs` says once what sacreBLEU's "forgot to detokenize" log lines say
#: per metric and per bootstrap pass (``force`` is not part of the signature).
METRICS: dict[str, MetricSpec] = {spec.key: spec for spec in (
    MetricSpec("sacrebleu", "sacreBLEU (detok, cased)", "bleu", (("force", True),)),
    MetricSpec("chrf", "chrF2", "chrf"),
    MetricSpec("bleu_lc", "BLEU lowercased (13a)", "bleu", (("lowercase", True), ("tokenize", "13a"), ("force", True))),
    MetricSpec("bleu_lc_moses", "BLEU lowercased (Moses tok)", "bleu", (("tokenize", "none"), ("force", True)),
               _moses_lowercased, lambda lang: {"tok": f"moses-{lang}", "case": "lc"}),
    MetricSpec("bleu_paper", "BLEU tok+compound (paper)", "bleu", (("tokenize", "none"), ("force", True)),
               _paper_tokenized, lambda lang: {"tok": "13a+compound-split(##AT##-##AT##)", "case": "mixed"}),
)}


def sacre_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """Detokenized, cased sacreBLEU with its signature."""
    return METRICS["sacrebleu"](hypotheses, references)


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """sacreBLEU's chrF2 with its signature."""
    return METRICS["chrf"](hypotheses, references)


def lowercase_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """BLEU on lowercased text with 13a tokenization."""
    return METRICS["bleu_lc"](hypotheses, references)


def moses_tokenize(texts: Sequence[str], lang: str) -> list[str]:
    """Moses tokenization (sacremoses) with ``lang``'s rules, no HTML escaping."""
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        raise UserError("Moses-tokenized BLEU needs the sacremoses package (pip install sacremoses)") from None
    tok = MosesTokenizer(lang=lang)
    return [tok.tokenize(t, escape=False, return_str=True) for t in texts]


def moses_lowercase_bleu(hypotheses: Sequence[str], references: Sequence[str], lang: str = "de") -> Score:
    """BLEU over Moses-tokenized, lowercased text (``multi-bleu.perl -lc`` on tokenized files)."""
    return METRICS["bleu_lc_moses"](hypotheses, references, lang)


def compound_split_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """The paper's tokenized BLEU: 13a tokenization, compound splitting, cased BLEU over
    whitespace tokens."""
    return METRICS["bleu_paper"](hypotheses, references)


def _signature(metric, **ours) -> str:
    """sacreBLEU's signature of ``metric`` (run on text we tokenized ourselves) with its
    ``key:value`` fields replaced by ``ours`` (e.g. its ``tok:none`` by how we tokenized),
    each key once, in sacreBLEU's order."""
    fields = dict(part.split(":", 1) for part in str(metric.get_signature()).split("|"))
    fields.update(ours)
    return "|".join(f"{k}:{v}" for k, v in fields.items())


def evaluate_translations(hypotheses: Sequence[str], references: Sequence[str], lang: str = "de"
                          ) -> dict[str, Score]:
    """All five metrics, keyed ``sacrebleu``, ``chrf``, ``bleu_lc``, ``bleu_lc_moses`` and
    ``bleu_paper``; ``lang`` is the target language (Moses tokenizer rules)."""
    return {key: spec(hypotheses, references, lang) for key, spec in METRICS.items()}


def empty_outputs(hypotheses: Sequence[str], sources: Sequence[str], most: float = 0.5) -> Optional[str]:
    """A warning when more than ``most`` of the non-empty sources got an empty translation
    (an untrained model, or a vocabulary that is not the model's), else None: the scores of
    such a set say little about the model's quality."""
    asked = [h for h, s in zip(hypotheses, sources) if s.strip()]
    empty = sum(1 for h in asked if not h.strip())
    if not asked or empty <= most * len(asked):
        return None
    return (f"{empty:,} of {len(asked):,} translations ({100 * empty / len(asked):.0f}%) are empty: the model "
            "stops at once (undertrained, or not the vocabulary it was trained with); the scores below mean little")


def tokenized_outputs(hypotheses: Sequence[str], least: int = 100) -> Optional[str]:
    """A note when the outputs look tokenized, else None: at least ``least`` lines (or, in a
    shorter file, half its lines and at least 5) end in a period split off by a space (" ."),
    sacreBLEU's own test for text that was not detokenized. The metrics meant for detokenized
    text (sacreBLEU, chrF2) then see what a tokenizer added (Moses escapes such as ``&apos;``,
    split hyphens), so their figures are not comparable with others'; the lowercased
    Moses-tokenized BLEU tokenizes both sides and is (tokenized text tokenizes to itself). One
    note in place of sacreBLEU's three log lines per metric and scoring pass, which the metrics
    here switch off (``force=True``; the signatures do not change)."""
    count = sum(1 for h in hypotheses if h.rstrip().endswith(" ."))
    if count < min(least, max(5, (len(hypotheses) + 1) // 2)):
        return None
    return (f"{count:,} of {len(hypotheses):,} outputs end in a tokenized period (' .'): they look tokenized; "
            "sacreBLEU and chrF2 are defined on detokenized text, so detokenize before comparing them with "
            "published figures; BLEU lowercased (Moses tok) tokenizes both sides and compares as it is")


def uncased_outputs(hypotheses: Sequence[str], references: Sequence[str]) -> Optional[str]:
    """A note when the outputs have no capital letter at all while most references have one
    (a lowercasing system scored against cased references), else None: the cased metrics
    (sacreBLEU, chrF2, the paper-style tokenized BLEU) then count every capital as an error;
    the lowercased BLEUs do not."""
    if any(ch.isupper() for h in hypotheses for ch in h):
        return None
    cased = sum(1 for r in references if any(ch.isupper() for ch in r))
    if not hypotheses or cased * 2 <= len(references):
        return None
    return (f"the outputs have no capital letter, {cased:,} of {len(references):,} references have: the cased "
            "metrics (sacreBLEU, chrF2, BLEU tok+compound) count every capital as an error; the lowercased BLEUs do "
            "not")


def text_notes(hypotheses: Sequence[str], references: Sequence[str]) -> list[str]:
    """The notes of :func:`tokenized_outputs` and :func:`uncased_outputs` that apply, in that order."""
    return [n for n in (tokenized_outputs(hypotheses), uncased_outputs(hypotheses, references)) if n]


def format_scores(scores: dict[str, Score]) -> list[str]:
    """One labelled line per metric."""
    width = max(len(s.name) for s in scores.values())
    return [s.line(width) for s in scores.values()]
