"""Chained drains, the drain step's half (`router.table.chain` is the table's): which
waiting groups a drain batch may write back to back behind the admitted groups it forwards
whole, decided from what the unit holds (pure: no I/O).

A head is an admitted group in lane order whose every parked record the batch forwards,
its final (the one the table closes it with) last, with no park in flight. A candidate is a
waiting group of the same room partition that the unit holds whole the same way, or a lane's
parked ordinary messages there, so that whichever unit owns the partition drains all of a
destination's groups in one transaction, even after an abort. Candidates go lanes first,
then oldest first (by their first parked record), shared
round robin between the destinations whose heads are on that partition, at most
`CHAIN_GROUPS` groups and `CHAIN_RECORDS` records behind each destination's heads."""

from __future__ import annotations

from collections.abc import Mapping

from router.table import room
from router.table.routing import NO_DEST, STOPPED, RoomState
from router.unit.steps.batch import TP
from router.unit.steps.drain.index import Parked

CHAIN_GROUPS = 64  # groups chained behind one destination's heads in one batch, at most
CHAIN_RECORDS = 2_000  # and their records, at most (a transaction's size stays bounded)


def whole(gid: str, parked: list[Parked], state: RoomState) -> bool:
    """Whether the unit holds the group whole: in lane order, its final (the table's
    closing mark) read last, no park of it in flight."""
    last = parked[-1]
    return (
        not room.is_pseudo(gid)
        and state.next < 0
        and not state.leased
        and state.closing not in ("", STOPPED)
        and last.final
        and last.token == state.closing
    )


def replay_order(
    groups: Mapping[str, list[Parked]], states: Mapping[str, RoomState]
) -> tuple[list[str], set[str], list[str]]:
    """The order to forward one room partition's groups in, those held back this batch, and
    the destinations whose order cannot be told (all held back there).

    Several groups admitted to one destination are a chain whose batch aborted: they stay
    admitted, and the partition's next drain writes them again. The chain's head may have
    been drained in part before it (a streamed group: its first records are on the
    destination already), and after an index rebuilt from the room's low mark it may come
    last in the index's order (its drain marker takes it out, its rest puts it back). So on
    such a destination the group drained in part goes first, whole, and nothing else goes
    there in a batch that cannot write it whole. Drained in part: the table counted more of
    its parks than the unit holds (the others were forwarded). A chained group was whole
    when chained, every park of it committed, so it holds all it counted: two groups drained
    in part on one destination cannot both be told apart from a chained one, and nothing
    goes there."""
    by_dest: dict[str, list[str]] = {}
    for gid in groups:
        state = states.get(gid)
        if (
            state is not None
            and state.state == room.ADMITTED
            and state.dest != NO_DEST
            and state.closing != STOPPED
            and state.next < 0
        ):
            by_dest.setdefault(state.dest, []).append(gid)
    heads: list[str] = []
    held: set[str] = set()
    unsure: list[str] = []
    for dest, gids in sorted(by_dest.items()):
        if len(gids) < 2:
            continue
        started = [g for g in gids if not room.is_pseudo(g) and states[g].parks > len(groups[g])]
        if len(started) > 1:
            held.update(gids)
            unsure.append(dest)
        elif started:
            head = started[0]
            heads.append(head)
            if not whole(head, groups[head], states[head]):
                held.update(g for g in gids if g != head)  # the head first, or nothing
    order = heads + [g for g in groups if g not in heads]
    return order, held, unsure


def lane(gid: str, state: RoomState) -> bool:
    """Whether it is a lane's parked ordinary messages (not a queue's multicast copies),
    with no park in flight: chained whatever it holds (they need no final)."""
    return room.is_pseudo(gid) and room.copy_target(gid) is None and not state.leased


def candidates(
    groups: Mapping[str, list[Parked]], states: Mapping[str, RoomState]
) -> list[tuple[str, list[Parked]]]:
    """The waiting lanes and groups of one room partition that may be chained: lanes first
    (ordinary messages should not wait behind groups), then groups held whole, each oldest
    first (the index's order: by first parked record)."""
    lanes, whole_groups = [], []
    for gid, parked in groups.items():
        state = states.get(gid)
        if state is None or state.state != room.WAITING:
            continue
        if lane(gid, state):
            lanes.append((gid, parked))
        elif whole(gid, parked, state):
            whole_groups.append((gid, parked))
    return lanes + whole_groups


def plan(
    heads: Mapping[str, list[tuple[TP, str]]],
    groups: Mapping[TP, Mapping[str, list[Parked]]],
    states: Mapping[str, RoomState],
) -> list[tuple[str, list[str], list[tuple[str, int, str]]]]:
    """The chain request for `router.table.chain`: per destination whose heads (forwarded
    whole by this batch, with their room partition) all share one partition, the waiting
    groups of that partition the unit holds whole, as (gid, parks held, final's token)."""
    by_tp: dict[TP, list[str]] = {}
    for dest, hs in sorted(heads.items()):
        tps = {tp for tp, _ in hs}
        if len(tps) == 1:
            by_tp.setdefault(tps.pop(), []).append(dest)
    out = []
    for tp, dests in by_tp.items():
        lists: dict[str, list[tuple[str, int, str]]] = {d: [] for d in dests}
        sizes = dict.fromkeys(dests, 0)
        turn = 0
        for gid, parked in candidates(groups.get(tp, {}), states):
            for k in range(len(dests)):  # the next destination with room for it
                d = dests[(turn + k) % len(dests)]
                if len(lists[d]) < CHAIN_GROUPS and sizes[d] + len(parked) <= CHAIN_RECORDS:
                    token = "" if room.is_pseudo(gid) else parked[-1].token
                    lists[d].append((gid, len(parked), token))
                    sizes[d] += len(parked)
                    turn = (turn + k + 1) % len(dests)
                    break
        for d in dests:
            if lists[d]:
                out.append((d, [g for _, g in heads[d]], lists[d]))
    return out
