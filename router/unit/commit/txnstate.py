"""The transactional session's state machine (`router.unit.commit.session` drives it):
pure logic, no I/O.

    INIT --start--> READY --begin--> OPEN --commit--> COMMITTING --committed--> READY
                      ^                |                  |
                      |              error              error
                      |                v                  v
                      +---abort---- FAILED <--------------+
                      |                | abort fails twice, or fatal
                      |                v
                      +--replace--- BROKEN  (fatal, fenced, or a call that never returned)

* A batch is produced inside one transaction: `begin` (for a batch decided in the current
  `generation`), `produce` its records, `commit` its consumed offsets (on the call thread,
  so that the unit can decide the next batch meanwhile), `wait_committed`. A batch with
  leases (`router.unit.commit.leases`) commits only if its records were all appended before
  `append_by`; the unit gives up (`fail`) an open transaction whose leases lapsed.
* Any failure of an open or committing transaction moves to FAILED or BROKEN and bumps
  `generation`. A batch decided in an older generation is *stale*: `begin` refuses it, and
  the unit rewinds it. This is how "the next batch was polled while the previous one
  failed" is handled: never by producing it.
* FAILED: `abort` returns to READY (the unit rewinds the failed batch). An abort that
  fails twice in a row, or fatally, means BROKEN.
* BROKEN: the outcome of the last transaction is unknown. `replace` starts a new producer
  with the same transactional ID (its init_transactions fences the old one and resolves
  the old transaction) and returns to READY; the unit then resumes every partition from
  the consumer group's committed offsets, which say exactly what was committed.
* A timed-out request (`router.unit.commit.timeouts`) may still land in the next
  transaction: a transaction that failed of one is BROKEN, not FAILED (never aborted
  and continued with the same producer), and a commit that succeeded only on a retry
  after a time-out has the producer swapped before the next `begin`.
"""

from __future__ import annotations

from enum import Enum

from router.errors import RouterError


class TxnState(Enum):
    INIT = "init"
    READY = "ready"
    OPEN = "open"
    COMMITTING = "committing"
    FAILED = "failed"
    BROKEN = "broken"


S = TxnState
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    S.INIT: frozenset({S.READY}),
    S.READY: frozenset({S.OPEN, S.BROKEN}),
    S.OPEN: frozenset({S.COMMITTING, S.FAILED, S.BROKEN}),
    S.COMMITTING: frozenset({S.READY, S.FAILED, S.BROKEN}),
    S.FAILED: frozenset({S.READY, S.BROKEN}),
    S.BROKEN: frozenset({S.READY}),
}


class TxnFailed(RouterError):
    """The batch's transaction failed; nothing of it was committed (or, BROKEN, its
    outcome is unknown and the committed offsets tell)."""
