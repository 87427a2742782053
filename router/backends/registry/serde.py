"""Registry-framed Avro for the router's clients and Spark jobs: `encode` writes a record
with a subject's latest schema (or one given, registered first) and frames it with its ID;
`decode` reads any framed payload with the schema its ID names. Use with `Sender.send`'s
value and `Received.value`:

    serde = Serde(RegistryClient(settings.registry))
    sender.send(queue, serde.encode("orders-value", {"id": "o-1"}), guarantee_id="g")
    record = serde.decode(received.value)
"""

from __future__ import annotations

from typing import Any

from router.backends.registry import framing
from router.backends.registry.client import RegistryClient, SchemaNotFound


class Serde:
    def __init__(self, client: RegistryClient) -> None:
        self.client = client

    def encode(
        self, subject: str, record: Any, schema: str | dict[str, Any] | None = None
    ) -> bytes:
        """`record` framed for `subject`: with `schema` (registered under the subject if it is
        not yet, subject to the registry's compatibility rules), else the subject's latest."""
        if schema is None:
            schema_id, _ = self.client.latest(subject)
        else:
            schema_id = self.client.register(subject, schema)
        return framing.encode(self.client.parsed(schema_id), schema_id, record)

    def decode(self, data: bytes, subject: str | None = None) -> Any:
        """The record of a framed payload; with `subject`, SchemaNotFound unless its ID's
        schema is a version of that subject."""
        schema_id, body = framing.unframe(data)
        if subject is not None and not self.client.in_subject(schema_id, subject):
            raise SchemaNotFound(f"schema ID {schema_id} is not a version of subject {subject!r}")
        return framing.decode_body(self.client.parsed(schema_id), body)
