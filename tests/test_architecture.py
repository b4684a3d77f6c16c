"""Packaging: the package list and the shipped data directories (configs/, data/multi30k/)."""

from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]


def test_packaging_lists_every_package_and_maps_the_shipped_directories():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "tf_transformer").rglob("__init__.py")}
    listed = set(setuptools["packages"])
    assert {p for p in listed if "._shipped." not in p} == on_disk
    from tf_transformer.resources import SHIPPED

    mapped = setuptools["package-dir"]
    assert {k.rsplit(".", 1)[1]: v for k, v in mapped.items()} == SHIPPED
    for directory in mapped.values():
        assert (REPO / directory).is_dir() and not (REPO / directory).is_symlink()


def test_shipped_directories_are_found_in_a_wheel_layout_first(tmp_path, monkeypatch):
    from tf_transformer import resources

    monkeypatch.setattr(resources, "_PACKAGE", tmp_path / "site" / "tf_transformer")
    assert resources.shipped_dir("configs") is None
    (tmp_path / "site" / "tf_transformer" / "_shipped" / "configs").mkdir(parents=True)
    assert resources.shipped_dir("configs") == tmp_path / "site" / "tf_transformer" / "_shipped" / "configs"
    message = resources.missing_message("multi30k", "the bundled Multi30k files")
    assert str(tmp_path / "site" / "tf_transformer" / "_shipped" / "multi30k") in message
    with pytest.raises(KeyError):
        resources.candidates("nope")
