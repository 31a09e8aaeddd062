"""A config file's text read into data (YAML or JSON: `parse_config_text`), and each schema error named by
its file and line, with the key's close match or the keys allowed there (`_format_errors`); the original's list form
of a provider's models is accepted (`_list_forms`). load.py builds the config from what this reads.
"""

from __future__ import annotations

import difflib
import json
import typing
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from hermit.errors import ConfigError


class _Located:
    """Maps a key path to a line in a YAML document (best effort; JSON gets no line)."""

    def __init__(self, text: str, is_yaml: bool) -> None:
        self.root: yaml.Node | None = None
        if is_yaml:
            try:
                self.root = yaml.compose(text, Loader=yaml.SafeLoader)
            except yaml.YAMLError:
                self.root = None

    def line(self, loc: tuple[Any, ...]) -> int | None:
        node = self.root
        best: int | None = None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                nxt = None
                for k, v in node.value:
                    if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                        best = k.start_mark.line + 1
                        nxt = v
                        break
                node = nxt
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                best = node.start_mark.line + 1
            else:
                break
        return best


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    cur: Any = model
    for part in loc:
        if typing.get_origin(cur) is dict:  # a mapping's key (channels.telegram.accounts.<id>): its value type
            cur = typing.get_args(cur)[1]
            continue
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)):
            return None
        field = cur.model_fields.get(str(part))
        if field is None:
            # alias lookup (e.g. mmr.lambda)
            field = next((f for f in cur.model_fields.values() if f.alias == part), None)
        if field is None:
            return None
        ann = field.annotation
        cur = ann
    return cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _format_errors(
    exc: ValidationError, model: type[BaseModel], prefix: tuple[Any, ...], where: _Located, source: str
) -> ConfigError:
    lines: list[str] = []
    hints: list[str] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        full = prefix + loc
        key = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in full).replace(".[", "[")
        line = where.line(full)
        at = f"{source}:{line}" if line else source
        if err["type"] == "extra_forbidden":
            parent = _model_at(model, loc[:-1])
            names = _field_names(parent) if parent else []
            close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.5)
            msg = f"{at}: unknown key '{key}'"
            if close:
                msg += f" — did you mean '{close[0]}'?"
                hints.append(f"rename '{loc[-1]}' to '{close[0]}'")
            elif names:
                hints.append(f"allowed keys here: {', '.join(sorted(names))}")
            lines.append(msg)
        else:
            got = err.get("input")
            shown = repr(got) if not isinstance(got, dict | list) else type(got).__name__
            if str(loc[-1]).endswith("_env") and isinstance(got, str):
                # The NAME of a variable goes here; what is not one may be the secret itself (a DSN, a key).
                shown = f"a value of {len(got)} characters, not shown: the variable's name goes here, not its value"
            lines.append(f"{at}: {key}: {err['msg']} (got {shown})")
            # A validator that knows the fix says so in its error's context (allowlist entries, owners).
            own_hint = (err.get("ctx") or {}).get("hint")
            if isinstance(own_hint, str) and own_hint not in hints:
                hints.append(own_hint)
    hint = "; ".join(hints) or "fix the value(s) above; `hermit doctor` re-checks the config"
    return ConfigError("invalid config:\n  " + "\n  ".join(lines), hint)


def parse_config_text(text: str, source: str = "<config>", is_yaml: bool = True) -> tuple[Any, _Located]:
    try:
        data = yaml.safe_load(text) if is_yaml else json.loads(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise ConfigError(f"{where}: not valid YAML: {e.problem}", "fix the syntax at that line") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{source}: not valid YAML: {e}", "fix the YAML syntax") from e
    except json.JSONDecodeError as e:
        raise ConfigError(
            f"{source}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}", "fix the syntax at that line"
        ) from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys", "start with `agents:`")
    return data, _Located(text, is_yaml)


_MODELS_FORM = ("models:\n  providers:\n    ollama:\n      type: openai-compatible\n"
                "      base_url: http://127.0.0.1:11434/v1\n      models:\n        llama3.1: { context_window: 131072 }")


def _list_forms(data: dict[str, Any], where: _Located, src: str) -> dict[str, Any]:
    """Accept the original's `models: [{id: …}, …]` under a provider (ids become keys); a list anywhere
    else under `models` is refused with the file, the line and the right form."""
    def at(*loc: Any) -> str:
        line = where.line(loc)
        return f"{src}:{line}" if line else src

    models = data.get("models")
    if isinstance(models, list):
        raise ConfigError(f"{at('models')}: models must be a mapping, not a list: models are listed "
                          "per provider, under models.providers.<name>.models",
                          f"write it like this:\n{_MODELS_FORM}")
    if not isinstance(models, dict) or not isinstance(models.get("providers"), list | dict):
        return data
    providers = models["providers"]
    if isinstance(providers, list):
        raise ConfigError(f"{at('models', 'providers')}: models.providers must map a provider name to its "
                          "settings, not be a list", f"write it like this:\n{_MODELS_FORM}")
    fixed: dict[str, Any] = {}
    for name, pc in providers.items():
        listed = pc.get("models") if isinstance(pc, dict) else None
        if not isinstance(listed, list):
            fixed[name] = pc
            continue
        where_ = at("models", "providers", name, "models")
        by_id: dict[str, Any] = {}
        for item in listed:
            mid = item.get("id") if isinstance(item, dict) else None
            if not isinstance(mid, str) or not mid:
                raise ConfigError(f"{where_}: each entry of models.providers.{name}.models needs an id",
                                  "write `- id: llama3.1` (optionally with context_window: …), or use the "
                                  f"mapping form:\n{_MODELS_FORM}")
            if mid in by_id:
                raise ConfigError(f"{where_}: model {mid!r} is listed twice under models.providers.{name}.models",
                                  "keep one entry per model id")
            by_id[mid] = {k: v for k, v in item.items() if k != "id"}
        fixed[name] = {**pc, "models": by_id}
    return {**data, "models": {**models, "providers": fixed}}
