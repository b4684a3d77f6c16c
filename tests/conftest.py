import os

import pytest

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
