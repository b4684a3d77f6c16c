"""Loading configs: YAML files and presets, ``extends`` chains, ``section.field=value`` overrides.

A config file is YAML with up to four sections and an optional parent::

    extends: base            # a preset name or a path relative to this file
    model:  {d_model: 256, num_heads: 4, ...}
    data:   {source: multi30k, ...}
    train:  {warmup_steps: 4000, ...}
    decode: {beam_size: 4, alpha: 0.6, ...}

The presets are the YAML files of the repository's ``configs/`` directory, shipped inside the
package (see :mod:`tf_transformer.resources`): ``base``, ``big``, ``multi30k_small``,
``multi30k_tiny`` and the 18 rows of the paper's Table 3 as ``table3/A1`` ... ``table3/E``.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping, Optional, Union, get_args, get_origin, get_type_hints

from tf_transformer.config.schema import SECTIONS, Config
from tf_transformer.errors import ConfigError
from tf_transformer.resources import shipped_dir

#: The presets' directory (``None`` when neither the package nor the checkout has them).
PRESET_DIR = shipped_dir("configs")


def _preset_dir() -> Path:
    if PRESET_DIR is None:
        from tf_transformer.resources import missing_message

        raise ConfigError(missing_message("configs", "the config presets"))
    return PRESET_DIR


def list_presets() -> list[str]:
    """Names accepted by :func:`load_config` besides file paths."""
    presets = _preset_dir()
    names = [p.stem for p in sorted(presets.glob("*.yaml"))]
    names += ["table3/" + p.stem for p in sorted((presets / "table3").glob("*.yaml"))]
    return names


def _resolve_path(name_or_path: Union[str, os.PathLike], relative_to: Optional[Path] = None) -> Path:
    text = str(name_or_path)
    candidates = []
    path = Path(text)
    if relative_to is not None and not path.is_absolute():
        candidates.append(relative_to / path)
    candidates.append(path)
    if PRESET_DIR is not None:
        if not text.endswith((".yaml", ".yml")):
            candidates.append(PRESET_DIR / (text + ".yaml"))
        candidates.append(PRESET_DIR / text)
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise ConfigError(
        f"config {text!r} is neither a file nor a preset; presets: {', '.join(list_presets())}"
    )


_LOADER = None


class DuplicateKeyError(ValueError):
    """A key given twice in one YAML mapping (PyYAML keeps the last silently)."""

    def __init__(self, key: str, line: int, first_line: int):
        super().__init__(f"line {line}: '{key}' is given twice in one mapping (first on line {first_line}); "
                         "YAML would keep only the later one: merge the two")
        self.key, self.line, self.first_line = key, line, first_line


def yaml_load(text):
    """YAML text (or an open file) read with YAML 1.2's rules for scalars, where PyYAML follows
    YAML 1.1: ``no``/``yes``/``on``/``off`` stay strings (``target_lang: no`` is Norwegian, not
    false; only ``true``/``false`` are booleans), and ``1e-5`` is a number (1.1 wants ``1.0e-5``
    and reads ``1e-5`` as a string). A key given twice in one mapping raises
    :class:`DuplicateKeyError` instead of the later one replacing the earlier."""
    global _LOADER
    import yaml

    if _LOADER is None:
        bool_tag, float_tag = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:float"

        class Loader(yaml.SafeLoader):
            def construct_mapping(self, node, deep=False):
                first = {}
                for key_node, _ in node.value:
                    if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
                        line = key_node.start_mark.line + 1
                        if key_node.value in first:
                            raise DuplicateKeyError(key_node.value, line, first[key_node.value])
                        first[key_node.value] = line
                return super().construct_mapping(node, deep)

        Loader.yaml_implicit_resolvers = {
            first: [(tag, regexp) for tag, regexp in resolvers if tag not in (bool_tag, float_tag)]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
        Loader.add_implicit_resolver(bool_tag, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
        Loader.add_implicit_resolver(float_tag, re.compile(
            r"^(?:[-+]?(?:[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"), list("-+0123456789."))
        _LOADER = Loader
    return yaml.load(text, Loader=_LOADER)  # noqa: S506 (a SafeLoader subclass)


def _read_yaml(path: Path) -> dict:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    except DuplicateKeyError as e:
        raise ConfigError(f"{path} {e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with sections model/data/train/decode, "
                          f"got {type(data).__name__}")
    return data


def _merge(base: dict, over: Mapping) -> dict:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _load_raw(path: Path, seen: tuple = ()) -> dict:
    if path in seen:
        raise ConfigError(f"{path}: 'extends' forms a cycle: {' -> '.join(map(str, seen + (path,)))}")
    raw = _read_yaml(path)
    parent = raw.pop("extends", None)
    if parent is not None:
        base = _load_raw(_resolve_path(parent, path.parent), seen + (path,))
        raw = _merge(base, raw)
    return raw


def _coerce(where: str, value: Any, annotation: Any) -> Any:
    origin = get_origin(annotation)
    if origin is Union:
        args = [a for a in get_args(annotation) if a is not type(None)]
        if value is None:
            return None
        if len(args) == 1:
            return _coerce(where, value, args[0])
        for arg in args:  # e.g. Union[str, list[str]]: the first that accepts the value
            try:
                return _coerce(where, value, arg)
            except ConfigError:
                continue
        names = " or ".join(getattr(a, "__name__", str(a)) for a in args)
        raise ConfigError(f"{where}={value!r} must be {names}")
    if origin is list:
        item = (get_args(annotation) or (Any,))[0]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}={value!r} must be a list")
        return [v if item is Any else _coerce(f"{where}[{i}]", v, item) for i, v in enumerate(value)]
    if value is None:
        raise ConfigError(f"{where}=null is not allowed (expected {annotation.__name__})")
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}={value!r} must be true or false")
    if annotation is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise ConfigError(f"{where}={value!r} must be an integer")
        return int(value)
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}={value!r} must be a number")
        if math.isnan(value):
            raise ConfigError(f"{where}=nan is not a number")
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}={value!r} must be a string")
        return value
    return value


def _build_section(name: str, cls, values: Any, source: str):
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"{source}: section '{name}' must be a mapping, got {type(values).__name__}")
    hints = get_type_hints(cls)
    kwargs = {}
    for key, value in values.items():
        _check_field(source, name, key)
        try:
            kwargs[key] = _coerce(f"{name}.{key}", value, hints[key])
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
    return cls(**kwargs)


def _check_field(where: str, section: str, key: Any) -> None:
    """A :class:`ConfigError` naming ``where`` (a file, an override) unless ``section.key``
    is a field, with the fields it may have meant (same first word or spelled alike)."""
    known = sorted(f.name for f in fields(SECTIONS[section]))
    if key in known:
        return
    key = str(key)
    close = {k for k in known if k.split("_")[0] == key.split("_")[0]}
    close.update(difflib.get_close_matches(key, known, n=3, cutoff=0.75))
    hint = f" (did you mean {', '.join(sorted(close))}?)" if close else ""
    raise ConfigError(f"{where}: unknown field {section}.{key}{hint}; known fields: {', '.join(known)}")


def config_from_dict(raw: Mapping, source: str = "<dict>", validate: bool = True,
                     require_vocab: bool = False) -> Config:
    raw = dict(raw)
    raw.pop("extends", None)
    name = raw.pop("name", None)
    unknown = set(raw) - set(SECTIONS)
    if unknown:
        raise ConfigError(
            f"{source}: unknown section(s) {', '.join(sorted(map(str, unknown)))}; "
            f"expected {', '.join(SECTIONS)} (and optional 'extends', 'name')"
        )
    sections = {k: _build_section(k, cls, raw.get(k), source) for k, cls in SECTIONS.items()}
    cfg = Config(name=name, **sections)
    if validate:
        try:
            cfg.validate(require_vocab=require_vocab)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None
    return cfg


def parse_override(text: str) -> tuple[str, Any]:
    """``"train.warmup_steps=100"`` -> ``("train.warmup_steps", 100)`` (value parsed as YAML)."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.field=value, e.g. train.warmup_steps=100")
    key, value = text.split("=", 1)
    key = key.strip()
    if key.count(".") != 1:
        raise ConfigError(f"override {text!r}: the key must be section.field, e.g. model.d_model")
    try:
        parsed = yaml_load(value) if value.strip() else None
    except yaml.YAMLError:
        parsed = value
    except DuplicateKeyError as e:
        raise ConfigError(f"override {text!r}: {e}") from None
    return key, parsed


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    out = _merge(raw, {})
    for item in overrides or []:
        key, value = parse_override(item)
        section, name = key.split(".")
        if section not in SECTIONS:
            raise ConfigError(f"override {item!r}: unknown section {section!r}; expected {', '.join(SECTIONS)}")
        where = f"override {item!r}"
        _check_field(where, section, name)
        try:  # a wrong type is the override's fault, not the file's: say so now
            _coerce(key, value, get_type_hints(SECTIONS[section])[name])
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        out.setdefault(section, {})
        if out[section] is None:
            out[section] = {}
        out[section][name] = value
    return out


def load_config(
    name_or_path: Union[str, os.PathLike],
    overrides: Optional[list[str]] = None,
    validate: bool = True,
    require_vocab: bool = False,
) -> Config:
    """Load a preset (``"base"``, ``"table3/C3"``) or a YAML file, apply ``section.field=value``
    overrides and validate. ``require_vocab`` makes a missing ``model.vocab_size`` an error
    (training fills it from the vocabulary when it is not set)."""
    path = _resolve_path(name_or_path)
    raw = apply_overrides(_load_raw(path), overrides or [])
    # a value an override set is blamed on the override, not only on the file that did not hold it
    source = f"{path} with overrides {' '.join(overrides)}" if overrides else str(path)
    cfg = config_from_dict(raw, source=source, validate=validate, require_vocab=require_vocab)
    if cfg.name is None:
        cfg.name = path.stem if path.parent.name != "table3" else "table3/" + path.stem
    return cfg


