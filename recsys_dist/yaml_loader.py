"""Load YAML into plain Python values while remembering the line of every key.

The line map lets :class:`~recsys_dist.errors.ConfigError` point at ``file:line`` for
any dotted key path, e.g. ``features[3].combiner`` -> line 41.
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from recsys_dist.errors import ConfigError


class LocatedYaml:
    """A parsed YAML document plus the 1-based line of every key path in it.

    Attributes:
      file: Path the document was read from.
      data: The parsed value (dicts, lists and scalars).
      lines: Maps a key path (``"a.b[2].c"``) to its 1-based line.
    """

    def __init__(
        self, file: str, data: Any, lines: dict[str, int], overrides: dict[str, str] | None = None
    ):
        self.file = file
        self.data = data
        self.lines = lines
        self.overrides = dict(overrides or {})

    def line(self, path: str) -> int | None:
        """Returns the line of ``path`` or of its nearest located ancestor key, if any."""
        for key in _self_and_ancestors(path):
            if key in self.lines:
                return self.lines[key]
        return None

    def override(self, path: str) -> str | None:
        """What gave ``path`` (or an ancestor of it) its value instead of the file, e.g.
        ``--set KEY=VALUE``."""
        for key in _self_and_ancestors(path):
            if key in self.overrides:
                return self.overrides[key]
        return None

    def error(self, path: str, message: str) -> ConfigError:
        """An error at ``path``: named by its ``--set`` when one set it, else by file:line."""
        item = self.override(path)
        if item is not None:
            return ConfigError(item, path, message)
        return ConfigError(self.file, path, message, self.line(path))


def _self_and_ancestors(path: str):
    while path:
        yield path
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""


class TextDatesLoader(yaml.SafeLoader):
    """YAML's safe loader, except that ``2026-01-07`` stays text: config dates are checked
    as text, and an invalid one (``2026-13-45``) must give a config error naming its key,
    not a ``ValueError`` from YAML's date constructor."""


TextDatesLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _join(prefix: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else str(key)


def _construct(node: yaml.Node, path: str, lines: dict[str, int], file: str) -> Any:
    lines.setdefault(path, node.start_mark.line + 1)
    constructor = TextDatesLoader(stream="")
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                raise ConfigError(
                    file,
                    path,
                    f"mapping keys must be scalars, got {key!r}",
                    key_node.start_mark.line + 1,
                )
            child = _join(path, key)
            if key in out:
                raise ConfigError(file, child, "duplicate key", key_node.start_mark.line + 1)
            lines[child] = key_node.start_mark.line + 1
            out[key] = _construct(value_node, child, lines, file)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_construct(item, _join(path, i), lines, file) for i, item in enumerate(node.value)]
    return constructor.construct_object(node, deep=True)


def load_yaml(file: str | os.PathLike[str]) -> LocatedYaml:
    """Reads ``file`` and returns its content with key line numbers.

    Raises:
      ConfigError: the file is missing, unreadable or not valid YAML.
    """
    file = str(file)
    try:
        with open(file, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise ConfigError(file, "", "config file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            file,
            "",
            f"not a text file (byte {exc.object[exc.start]:#04x} at "
            f"offset {exc.start} is not UTF-8); expected a YAML "
            "config",
        ) from None
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read config file: {exc.strerror}") from None
    try:
        node = yaml.compose(text, Loader=TextDatesLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(file, "", f"invalid YAML: {problem}", line) from None
    lines: dict[str, int] = {}
    data = {} if node is None else _construct(node, "", lines, file)
    return LocatedYaml(file, data, lines)
