"""Decoding: beam search with the GNMT length penalty and greedy search, both in TF ops
over a ``symbols_to_logits_fn(ids, step, cache)``; adapters from the Transformer; the
batch translator behind ``tft translate``.

::

    from tf_transformer.decoding import beam_search, greedy_search, translate_batch, Translator
    ids, scores = translate_batch(model, source_ids, beam_size=4, alpha=0.6, max_extra_length=50)
    translate(model, ["A dog runs."], tokenizer, beam_size=4)     # -> ["Ein Hund rennt."]
    Translator(Ensemble([model_a, model_b]), tokenizer)   # the mean of two models' probabilities
    decoding_environment()   # first thing in a process that only decodes (oneDNN off; no TensorFlow import)

Names are imported on first use (TensorFlow loads only then).
"""

from __future__ import annotations

from tf_transformer._lazy import lazy_exports

_EXPORTS = {
    "beam_search": "beam_search",
    "length_penalty": "beam_search",
    "greedy_search": "greedy",
    "cached_decoder": "model_fns",
    "uncached_decoder": "model_fns",
    "translate_batch": "model_fns",
    "Translator": "translator",
    "Ensemble": "ensemble",
    "translate": "translator",
    "decoding_environment": "environment",
    "DECODING_ENVIRONMENT": "environment",
}

__all__ = ["DECODING_ENVIRONMENT", "Ensemble", "Translator", "beam_search", "cached_decoder", "decoding_environment",
           "greedy_search", "length_penalty", "translate",
           "translate_batch", "uncached_decoder"]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
