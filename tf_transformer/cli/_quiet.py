"""TensorFlow without its start-up banner: the entry point sets the log level before TensorFlow
is imported, and imports it with the C++ start-up lines that no log level reaches (absl's
"before InitializeLog" notice, the CUDA stub's "no GPU" line, oneDNN's notice) filtered out.
Everything else written while importing is passed through, so real errors still show."""

from __future__ import annotations

import os
import re
import sys

from tf_transformer.decoding.environment import decoding_environment

#: Lines TensorFlow writes at import on a machine without a GPU that carry no information for a
#: ``tft`` user (each matched as a whole line).
NOISE = tuple(re.compile(p) for p in (
    r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r"[IW]\d{4} [\d:. ]+\d+ cudart_stub\.cc:\d+\] Could not find cuda drivers on your machine, GPU will not be used\.",
    r".*oneDNN custom operations are on\..*",
    r".*This TensorFlow binary is optimized to use available CPU instructions.*",
    r"To enable the following instructions: .* in other operations, rebuild TensorFlow with the appropriate "
    r"compiler flags\.",
    r".*Unable to register cu(DNN|FFT|BLAS) factory.*",
    r".*TF-TRT Warning: Could not find TensorRT",
))


#: Commands that do nothing with TensorFlow but decode (and score) sentences.
DECODING_COMMANDS = ("translate", "evaluate")

def quiet_environment(command: str | None = None) -> None:
    """The log level TensorFlow reads when it is imported (a user's own setting wins), and
    the decoding environment (:data:`tf_transformer.decoding.DECODING_ENVIRONMENT`, oneDNN off) for the
    :data:`DECODING_COMMANDS`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    if command in DECODING_COMMANDS:
        decoding_environment()


def is_noise(line: str) -> bool:
    return any(p.fullmatch(line.strip()) for p in NOISE)


def import_tensorflow(heartbeat=None) -> None:
    """Import TensorFlow and Keras with the :data:`NOISE` lines of file descriptor 2 dropped;
    a :class:`~tf_transformer.io.Heartbeat`'s lines still reach the real stderr meanwhile.

    Keras imports ``matplotlib.pyplot`` at import time when it can (for its image-gallery
    plot, under ``try``/``except ImportError``): 0.5-1.8 s of every ``tft`` process on a
    2-core machine, for nothing that ``tft`` uses from Keras. matplotlib is hidden while
    TensorFlow and Keras are imported, so Keras skips it; afterwards it imports as usual
    (``tft plot-attention`` and the ablation plots import it themselves; only Keras' own
    image-gallery helper stays without it in this process).
    """
    if "tensorflow" in sys.modules:
        return
    import contextlib
    import tempfile

    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 (embedded interpreters): nothing to filter
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)

        def real_stderr(line: str) -> None:
            os.write(saved, (line + "\n").encode("utf-8", errors="replace"))

        beating = heartbeat.writing_to(real_stderr) if heartbeat is not None else contextlib.nullcontext()
        hide = "matplotlib" not in sys.modules
        if hide:
            sys.modules["matplotlib"] = None  # `import matplotlib...` raises ImportError
        try:
            with beating:
                import keras  # noqa: F401
                import tensorflow  # noqa: F401
        finally:
            if hide:
                del sys.modules["matplotlib"]
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace")
            kept = [line for line in text.splitlines() if line.strip() and not is_noise(line)]
            if kept:
                sys.stderr.write("\n".join(kept) + "\n")
                sys.stderr.flush()
