import os

import pytest
from helpers.tiny_model import load_tiny, session_tiny_assets

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


@pytest.fixture(autouse=True, scope="session")
def _statistics_cache_in_a_temporary_folder(tmp_path_factory):
    """The input side caches statistics on disk (data.stats_cache_dir, default
    $TFT_CACHE_DIR): tests use a folder of their own, not the user's cache."""
    old = os.environ.get("TFT_CACHE_DIR")
    os.environ["TFT_CACHE_DIR"] = str(tmp_path_factory.mktemp("tft-cache"))
    yield
    if old is None:
        os.environ.pop("TFT_CACHE_DIR", None)
    else:
        os.environ["TFT_CACHE_DIR"] = old


# The tiny copy model of tests/helpers/tiny_model.py, for any test module that asks (one that
# defines fixtures of these names uses its own): ``assets`` is its ``(model_path, vocab_path)``,
# trained once per session; ``tiny`` its ``(model, tokenizer)``, loaded once per module.
assets = pytest.fixture(scope="module", name="assets")(session_tiny_assets)
tiny = pytest.fixture(scope="module", name="tiny")(load_tiny)
