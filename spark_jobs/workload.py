"""Business records for the Spark demo and tests: seeded, realistic, dropped in as files.

Purchase orders of 1..max_lines lines (mostly small, some large), documents of up to
`max_document_bytes` (mostly small; the large ones, and always one of exactly that size,
split into many segments), and stock updates, shuffled together. `drop` writes a file
atomically (written under a hidden name, then renamed), as the sender's file source
requires.
"""

from __future__ import annotations

import base64
import json
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spark_jobs import domain


def group_size(rng: random.Random, max_lines: int) -> int:
    """Mostly small orders, some medium, a few large (as `ops.harness.traffic.workload`)."""
    roll = rng.random()
    if roll < 0.5:
        return rng.randint(1, min(5, max_lines))
    if roll < 0.85:
        return rng.randint(min(6, max_lines), min(20, max_lines))
    return rng.randint(min(21, max_lines), max_lines)


@dataclass(frozen=True)
class BusinessWorkload:
    run_id: str
    orders: int = 200
    documents: int = 40
    updates: int = 600
    max_lines: int = 40
    max_document_bytes: int = 200_000
    seed: int = 1


def records(spec: BusinessWorkload) -> list[dict[str, Any]]:
    rng = random.Random(f"{spec.seed}-{spec.run_id}")
    out: list[dict[str, Any]] = []
    for i in range(spec.orders):
        out.append(
            {
                "type": domain.PURCHASE_ORDER,
                "order_id": f"{spec.run_id}-PO{i:05d}",
                "customer_id": f"C{rng.randint(1, 500):04d}",
                "currency": "EUR",
                "lines": [
                    {
                        "sku": f"SKU-{rng.randint(1, 9999):04d}",
                        "quantity": rng.randint(1, 20),
                        "unit_price_cents": rng.randint(99, 99_999),
                    }
                    for _ in range(group_size(rng, spec.max_lines))
                ],
            }
        )
    for i in range(spec.documents):
        large = rng.random() < 0.3
        size = rng.randint(
            spec.max_document_bytes // 4 if large else 0,
            spec.max_document_bytes if large else spec.max_document_bytes // 20,
        )
        if i == 0:
            size = spec.max_document_bytes  # always one document as large as allowed
        content = rng.randbytes(size)
        out.append(
            {
                "type": domain.DOCUMENT,
                "document_id": f"{spec.run_id}-DOC{i:04d}",
                "name": f"contract-{i:04d}.pdf",
                "content_base64": base64.b64encode(content).decode("ascii"),
            }
        )
    for i in range(spec.updates):
        out.append(
            {
                "type": domain.STOCK_UPDATE,
                "update_id": f"{spec.run_id}-SU{i:05d}",
                "sku": f"SKU-{rng.randint(1, 9999):04d}",
                "warehouse": f"WH-{rng.randint(1, 5)}",
                "delta": rng.randint(-20, 20),
            }
        )
    rng.shuffle(out)
    return out


def split(items: Sequence[dict[str, Any]], parts: int) -> list[list[dict[str, Any]]]:
    """`items` in `parts` consecutive chunks of (nearly) equal size."""
    size, extra = divmod(len(items), parts)
    chunks, at = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        chunks.append(list(items[at : at + n]))
        at += n
    return chunks


def drop(directory: Path, name: str, batch: Sequence[dict[str, Any]]) -> Path:
    """Write one JSON-lines file into `directory` atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in batch))
    final = directory / name
    os.replace(tmp, final)
    return final
