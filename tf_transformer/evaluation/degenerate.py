"""Degenerate outputs that a corpus score hides: run-ons and repetition loops.

A beam search that lets unfinished hypotheses win, or a model trained too little, writes
outputs such as "ein Mann sehr sehr sehr sehr ..."; a handful of them move BLEU little but
are what a user notices first. Two counts, each with the (1-based) line numbers:

* **run-ons**: outputs with more than twice as many words as their source (an empty source
  counts as one word). A correct translation of a very short source can count, so this is a
  flag to look at, not proof.
* **loops**: outputs that repeat a word or a two-word group three times in a row, or a group
  of 3-6 words twice in a row, on words without punctuation, case-insensitive ("sehr sehr
  sehr", "zu sein scheint, was sie zu sein scheint, was sie"). None of Multi30k's 31,014
  German sentences (train, val, test2016) has one.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Optional

__all__ = ["Degenerate", "degenerate_outputs", "has_loop", "loop_lines", "run_on_lines"]

_WORD = re.compile(r"\w+")


def run_on_lines(sources: Sequence[str], hypotheses: Sequence[str]) -> list[int]:
    """1-based numbers of the outputs with more than twice their source's words."""
    return [i for i, (s, h) in enumerate(zip(sources, hypotheses), start=1)
            if len(h.split()) > 2 * max(1, len(s.split()))]


def has_loop(text: str) -> bool:
    """Whether ``text`` has a repetition loop (see the module's docstring)."""
    words = _WORD.findall(text.lower())
    for n in range(1, 7):
        copies = 3 if n <= 2 else 2
        for i in range(len(words) - copies * n + 1):
            if all(words[i:i + n] == words[i + k * n:i + (k + 1) * n] for k in range(1, copies)):
                return True
    return False


def loop_lines(hypotheses: Sequence[str]) -> list[int]:
    """1-based numbers of the outputs with a repetition loop, whatever their length."""
    return [i for i, h in enumerate(hypotheses, start=1) if has_loop(h)]


@dataclasses.dataclass
class Degenerate:
    """Line numbers of run-ons (None when the sources are unknown) and of loops."""

    run_ons: Optional[list[int]]
    loops: list[int]
    outputs: int

    def line(self, show: int = 5) -> str:
        def some(lines: list[int]) -> str:
            if not lines:
                return ""
            more = f", ... ({len(lines) - show:,} more)" if len(lines) > show else ""
            return f" (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines[:show]))}{more})"

        parts = []
        if self.run_ons is not None:
            parts.append(f"{len(self.run_ons):,} longer than twice their source{some(self.run_ons)}")
        parts.append(f"{len(self.loops):,} with a repetition loop{some(self.loops)}")
        return f"degenerate outputs of {self.outputs:,}: " + "; ".join(parts)

    def as_dict(self) -> dict:
        return {"run_ons": None if self.run_ons is None else len(self.run_ons), "run_on_lines": self.run_ons,
                "loops": len(self.loops), "loop_lines": self.loops}


def degenerate_outputs(hypotheses: Sequence[str], sources: Optional[Sequence[str]] = None) -> Degenerate:
    """Both counts (run-ons only when ``sources`` are given)."""
    return Degenerate(None if sources is None else run_on_lines(sources, hypotheses), loop_lines(hypotheses),
                      len(hypotheses))
