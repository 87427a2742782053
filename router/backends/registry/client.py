"""A Schema Registry client over the Confluent-compatible REST API (standard library HTTP),
for the send units' payload checks, the router's events and the clients' serde.

Answers are cached for the life of the client: a schema ID names one schema forever, and
an ID found under a subject stays found. A lookup that does not find an ID or a subject
raises `SchemaNotFound` (the payload's fault); a registry that cannot be reached, times out
or answers 5xx raises `RegistryUnavailable` (nobody's fault: retry later).
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from router.backends.registry import framing
from router.config.registry import RegistrySettings
from router.errors import InvalidRequest, RouterError

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
NOT_FOUND_CODES = {40401, 40402, 40403}  # subject, version, schema not found


class RegistryUnavailable(RouterError, ConnectionError):
    """The registry could not be reached, timed out or failed (5xx): nothing is known about
    the schema asked for. Retry later."""


class SchemaNotFound(InvalidRequest):
    """The registry does not know this schema ID (or subject)."""


class RegistryError(RouterError, RuntimeError):
    """The registry refused a request (4xx other than not found: an incompatible schema,
    an invalid one, no permission); `status` and the registry's `error_code` say which."""

    def __init__(self, message: str, status: int = 0, error_code: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.status, self.error_code))


class RegistryClient:
    def __init__(self, settings: RegistrySettings) -> None:
        if settings.url is None:
            raise InvalidRequest("no registry.url: a registry client needs one")
        self.url = settings.url
        self.timeout = settings.timeout_s
        self._headers = {"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        password = settings.secret()
        if settings.username:
            token = f"{settings.username}:{password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        self._ssl: ssl.SSLContext | None = None
        if self.url.startswith("https://"):
            ctx = ssl.create_default_context(
                cafile=str(settings.tls_ca_file) if settings.tls_ca_file else None
            )
            if settings.tls_cert_file and settings.tls_key_file:
                ctx.load_cert_chain(str(settings.tls_cert_file), str(settings.tls_key_file))
            if not settings.tls_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self._ssl = ctx
        self._schemas: dict[int, str] = {}
        self._parsed: dict[int, Any] = {}
        self._subjects: dict[int, set[str]] = {}
        self._registered: dict[tuple[str, str], int] = {}
        self._latest: dict[str, tuple[int, str]] = {}

    # ------------------------------------------------------------------ HTTP

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers=self._headers
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as exc:
            status = exc.code
            try:
                answer = json.loads(exc.read() or b"{}")
            except ValueError:
                answer = {}
            code = int(answer.get("error_code") or 0) if isinstance(answer, dict) else 0
            message = answer.get("message") if isinstance(answer, dict) else None
            what = f"{method} {path}: HTTP {status}: {message or exc.reason}"
            if status >= 500 or status in (408, 429):
                raise RegistryUnavailable(f"registry at {self.url}: {what}") from None
            if status == 404 or code in NOT_FOUND_CODES:
                raise SchemaNotFound(what) from None
            raise RegistryError(what, status, code) from None
        except (OSError, ValueError) as exc:  # URLError, refused, reset, time-out, bad JSON
            raise RegistryUnavailable(f"registry at {self.url}: {method} {path}: {exc}") from None

    # ------------------------------------------------------------------ lookups

    def schema(self, schema_id: int) -> str:
        """The schema text (Avro JSON) with this ID; SchemaNotFound if there is none."""
        text = self._schemas.get(schema_id)
        if text is None:
            text = str(self._call("GET", f"/schemas/ids/{schema_id}")["schema"])
            self._schemas[schema_id] = text
        return text

    def parsed(self, schema_id: int) -> Any:
        """The schema with this ID, parsed for fastavro (cached)."""
        schema = self._parsed.get(schema_id)
        if schema is None:
            schema = self._parsed[schema_id] = framing.parse(self.schema(schema_id))
        return schema

    def subjects_of(self, schema_id: int) -> set[str]:
        """The subjects this schema ID is a version of (asked again on every call)."""
        answer = self._call("GET", f"/schemas/ids/{schema_id}/versions")
        found = {str(v["subject"]) for v in answer}
        self._subjects.setdefault(schema_id, set()).update(found)
        return found

    def in_subject(self, schema_id: int, subject: str) -> bool:
        """Whether the schema with this ID is a version of `subject` (a yes is cached)."""
        if subject in self._subjects.get(schema_id, ()):
            return True
        return subject in self.subjects_of(schema_id)

    def subjects(self) -> list[str]:
        return [str(s) for s in self._call("GET", "/subjects")]

    def latest(self, subject: str) -> tuple[int, str]:
        """(ID, schema text) of the subject's latest version (cached: `refresh` forgets)."""
        hit = self._latest.get(subject)
        if hit is None:
            quoted = urllib.parse.quote(subject, safe="")
            answer = self._call("GET", f"/subjects/{quoted}/versions/latest")
            hit = self._latest[subject] = (int(answer["id"]), str(answer["schema"]))
            self._schemas.setdefault(hit[0], hit[1])
            self._subjects.setdefault(hit[0], set()).add(subject)
        return hit

    def lookup(self, subject: str, schema: str | dict[str, Any]) -> int | None:
        """The ID of `schema` if it is a version of `subject`, else None (read only)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        quoted = urllib.parse.quote(subject, safe="")
        try:
            answer = self._call("POST", f"/subjects/{quoted}", {"schema": text})
        except SchemaNotFound:
            return None
        schema_id = self._registered[(subject, text)] = int(answer["id"])
        self._subjects.setdefault(schema_id, set()).add(subject)
        return schema_id

    def register(self, subject: str, schema: str | dict[str, Any]) -> int:
        """Register `schema` (Avro, JSON text or parsed) under `subject`, subject to the
        registry's compatibility rules; its ID (the existing one if already registered)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        key = (subject, text)
        schema_id = self._registered.get(key)
        if schema_id is None:
            quoted = urllib.parse.quote(subject, safe="")
            path, body = f"/subjects/{quoted}/versions", {"schema": text}
            try:
                answer = self._call("POST", path, body)
            except RegistryError as exc:
                if exc.status != 409:
                    raise
                # Two processes creating one subject at once: the registry may refuse the
                # later (Apicurio: "already exists"); asked again, it finds the version. An
                # incompatible schema is refused again.
                answer = self._call("POST", path, body)
            schema_id = self._registered[key] = int(answer["id"])
            self._subjects.setdefault(schema_id, set()).add(subject)
        return schema_id

    def set_compatibility(self, subject: str, level: str) -> None:
        quoted = urllib.parse.quote(subject, safe="")
        self._call("PUT", f"/config/{quoted}", {"compatibility": level})

    def refresh(self) -> None:
        """Forget the subjects' latest versions (IDs and their schemas never change)."""
        self._latest.clear()
