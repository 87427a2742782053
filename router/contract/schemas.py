"""Avro schemas from `schemas/` (fastavro): load by name, encode, decode.

Records are written schemaless (no container, no registry) with the writer schema's full
name in the `schema` header of every event, so any consumer can pick the `.avsc` from
`schemas/`. A wheel carries the schemas as `router/_schemas`; a source tree reads them
from the repository's `schemas/` folder.
"""

from __future__ import annotations

import io
import json
from functools import cache
from pathlib import Path
from typing import Any

import fastavro

from router.errors import InvalidRequest

SCHEMA_HEADER = "schema"


def schema_dir() -> Path:
    """Where the schemas are read from: the installed package's copy (`_schemas`, which the
    wheel build copies from `schemas/`, their one source: pyproject.toml's force-include),
    else, in a checkout (an editable install), the repository's `schemas/`."""
    return find_schemas(Path(__file__).resolve().parents[1])


def find_schemas(package: Path) -> Path:
    """The schemas folder for the `router` package folder `package` (see `schema_dir`)."""
    packaged = package / "_schemas"
    if packaged.is_dir():
        return packaged
    # Only beside pyproject.toml: an installed package never takes a `schemas` folder that
    # happens to lie next to it (another distribution's, in site-packages) for its own.
    source = package.parent / "schemas"
    if source.is_dir() and (package.parent / "pyproject.toml").is_file():
        return source
    raise FileNotFoundError(
        f"Avro schemas not found: neither {packaged} (an installed wheel) nor {source} "
        "beside pyproject.toml (a checkout)"
    )


@cache
def _index() -> dict[str, Path]:
    """Full schema name (namespace.name) -> file."""
    index: dict[str, Path] = {}
    for path in sorted(schema_dir().rglob("*.avsc")):
        raw = fastavro.schema.load_schema(str(path), _write_hint=False)
        name = raw["name"] if "." in raw["name"] else f"{raw.get('namespace', '')}.{raw['name']}"
        index[name.lstrip(".")] = path
    return index


@cache
def load(name: str) -> Any:
    """The parsed schema with this full name, e.g. `router.events.DeadLetter`."""
    try:
        path = _index()[name]
    except KeyError:
        raise KeyError(f"no Avro schema named {name!r} in {schema_dir()}") from None
    return fastavro.schema.load_schema(str(path))


def _public(node: Any) -> Any:
    """A parsed schema without fastavro's private bookkeeping keys."""
    if isinstance(node, dict):
        return {k: _public(v) for k, v in node.items() if not k.startswith("__")}
    if isinstance(node, list):
        return [_public(v) for v in node]
    return node


@cache
def json_schema(name: str) -> str:
    """The schema `name` as a self-contained JSON document (for other Avro libraries, e.g.
    Spark's from_avro/to_avro)."""
    return json.dumps(_public(load(name)))


def names() -> list[str]:
    return sorted(_index())


def encode(name: str, record: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, load(name), record)
    return buffer.getvalue()


def decode(name: str, data: bytes) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(data), load(name), None)


def validate(name: str, data: bytes) -> None:
    """Raise InvalidRequest unless `data` is exactly one record of schema `name`."""
    buffer = io.BytesIO(data)
    try:
        fastavro.schemaless_reader(buffer, load(name), None)
    except Exception as exc:
        raise InvalidRequest(f"not a {name}: {exc}") from None
    if buffer.tell() != len(data):
        raise InvalidRequest(f"not a {name}: {len(data) - buffer.tell()} bytes left over")
