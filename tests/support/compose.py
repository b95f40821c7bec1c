"""What ``docker compose`` does with ``docker-compose.yml`` before it talks to an engine, for
the tests to check without one: the Compose Specification's interpolation and profiles.

No maintained Python library implements them (PyPI has ``docker-compose`` 1.x, unmaintained
since 2021 and pinned to old dependencies; shell-style expanders such as ``expandvars`` read
``$$`` as a process id, where Compose reads a literal ``$``), so this is the part of the
specification the project's file relies on, written from it:

- Interpolation (compose-spec ``interpolation.md``), applied to every string value (not to
  mapping keys): ``$VAR`` and ``${VAR}``; ``${VAR:-default}`` (default when unset or empty),
  ``${VAR-default}`` (when unset); ``${VAR:?err}`` and ``${VAR?err}`` (an error when unset or
  empty / unset); ``${VAR:+alt}`` and ``${VAR+alt}``; defaults and messages interpolated in
  turn (``${A:-${B}}``); ``$$`` a literal ``$``; a ``$`` followed by anything else stays as
  it is; ``${`` that does not form a valid expression is an error. Names are letters, digits
  and ``_``, not starting with a digit. Compose substitutes an empty string, with a
  warning, for a variable that is unset and has no default; here that is an error
  (``strict``, the default), since the file must need no variable at all.
- Variables: the environment given, over the project's ``.env`` (``KEY=VALUE`` lines,
  ``#`` comments), which also supplies ``COMPOSE_PROFILES``.
- Profiles (compose-spec ``profiles.md``): the active profiles are the ``--profile`` flags
  or, when none is given, ``COMPOSE_PROFILES`` (comma-separated); a service without
  ``profiles`` is always enabled, one with profiles when any of them is active. An enabled
  service may only depend on enabled services.

``tests/test_containers.py`` also compares this with the real ``docker compose config``
when a Compose binary is on the PATH.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_NAME = re.compile(r"[_A-Za-z][_A-Za-z0-9]*")
_BRACED = re.compile(r"(?P<name>[_A-Za-z][_A-Za-z0-9]*)(?:(?P<op>:?[-+?])(?P<arg>.*))?", re.S)


class InterpolationError(ValueError):
    """What ``docker compose`` refuses (or, for an unset variable in strict mode, what it
    would only warn about)."""


class UnsetVariable(InterpolationError):
    def __init__(self, name: str) -> None:
        super().__init__(f"variable {name} is not set and has no default")
        self.name = name


class RequiredVariable(InterpolationError):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"required variable {name} is missing a value: {message}")
        self.name = name


def interpolate(text: str, env: Mapping[str, str], strict: bool = True) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$":
            out.append(char)
            i += 1
            continue
        following = text[i + 1 : i + 2]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "{":
            end = _closing_brace(text, i + 2)
            out.append(_braced(text[i + 2 : end], env, strict))
            i = end + 1
        elif match := _NAME.match(text, i + 1):
            out.append(_lookup(match.group(), env, strict))
            i = match.end()
        else:
            out.append("$")
            i += 1
    return "".join(out)


def _closing_brace(text: str, start: int) -> int:
    depth = 1
    j = start
    while j < len(text):
        if text.startswith("${", j):
            depth += 1
            j += 2
            continue
        if text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    raise InterpolationError(f"invalid interpolation format: no closing brace in {text!r}")


def _lookup(name: str, env: Mapping[str, str], strict: bool) -> str:
    if name in env:
        return env[name]
    if strict:
        raise UnsetVariable(name)
    return ""


def _braced(body: str, env: Mapping[str, str], strict: bool) -> str:
    match = _BRACED.fullmatch(body)
    if match is None:
        raise InterpolationError(f"invalid interpolation format: ${{{body}}}")
    name, op, arg = match["name"], match["op"], match["arg"]
    value = env.get(name)
    if op is None:
        return _lookup(name, env, strict)
    present = value is not None and (value != "" or not op.startswith(":"))
    if op.endswith("-"):
        return value if present and value is not None else interpolate(arg, env, strict)
    if op.endswith("+"):
        return interpolate(arg, env, strict) if present else ""
    # ? and :?
    if present and value is not None:
        return value
    raise RequiredVariable(name, interpolate(arg, env, strict))


def interpolate_tree(node: Any, env: Mapping[str, str], strict: bool = True) -> Any:
    """Every string value of a loaded YAML document interpolated; keys left as they are."""
    if isinstance(node, str):
        return interpolate(node, env, strict)
    if isinstance(node, dict):
        return {key: interpolate_tree(value, env, strict) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate_tree(value, env, strict) for value in node]
    return node


def read_dotenv(path: Path) -> dict[str, str]:
    """The ``KEY=VALUE`` lines of a ``.env`` file (none when it does not exist)."""
    if not path.exists():
        return {}
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _NAME.fullmatch(key):
            raise ValueError(f"{path}:{number}: not KEY=VALUE: {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key] = value
    return values


@dataclass(frozen=True)
class Project:
    """The compose file as one invocation sees it: interpolated, and its enabled services."""

    document: dict[str, Any]
    profiles: frozenset[str]
    enabled: dict[str, dict[str, Any]]

    def secrets_used(self) -> set[str]:
        used: set[str] = set()
        for service in self.enabled.values():
            for entry in service.get("secrets", []):
                used.add(entry if isinstance(entry, str) else entry["source"])
        return used


def load_project(
    compose_file: Path,
    environ: Mapping[str, str],
    profile_flags: Sequence[str] = (),
    strict: bool = True,
) -> Project:
    """What ``docker compose [--profile P ...] <command>`` would see, with ``environ`` as the
    environment it is run in."""
    env = {**read_dotenv(compose_file.parent / ".env"), **environ}
    document = yaml.safe_load(compose_file.read_text())
    assert isinstance(document, dict), "a compose file is a mapping"
    document = interpolate_tree(document, env, strict)
    if profile_flags:
        profiles = frozenset(profile_flags)
    else:
        profiles = frozenset(p.strip() for p in env.get("COMPOSE_PROFILES", "").split(",")) - {""}
    enabled = {
        name: service
        for name, service in document.get("services", {}).items()
        if not service.get("profiles") or profiles & set(service["profiles"])
    }
    for name, service in enabled.items():
        depends_on = service.get("depends_on", {})
        for dependency in depends_on if isinstance(depends_on, (list, dict)) else ():
            if dependency not in enabled:
                raise InterpolationError(
                    f"service {name} depends on {dependency}, which profiles {sorted(profiles)} "
                    "do not enable"
                )
    return Project(document, profiles, enabled)
