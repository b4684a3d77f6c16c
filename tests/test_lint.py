"""The tree passes ruff with the configured rules, line length included (pyproject.toml)."""

import configparser
import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]


def test_ruff_passes_on_the_whole_tree():
    ruff = Path(sys.executable).with_name("ruff")
    out = subprocess.run([str(ruff), "check", "tf_transformer", "tests", "tools"], cwd=REPO, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_one_line_limit_and_it_is_enforced():
    ruff = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]
    flake8 = configparser.ConfigParser()
    flake8.read(REPO / "setup.cfg")
    assert int(flake8["flake8"]["max-line-length"]) == ruff["line-length"]
    assert "E" in ruff["lint"]["select"] and "E501" not in ruff["lint"].get("ignore", [])
