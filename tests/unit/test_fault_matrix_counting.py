"""How the bridge fault matrix counts (tests/integration/bridge_fault_run.py), without brokers:
the id read from a body, which connection a WAN fault strikes, which cells exist, the
Kafka-transactions rule (an extra copy that read_uncommitted shows is an aborted transaction's
only when the bridge's commit log accounts for every record once), the duplicate store read
after a run."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.integration.bridge_fault_run import (
    FAULTS,
    QOS_MODES,
    SIDES,
    WAN_FAULTS,
    Brokers,
    FaultRun,
    Outcome,
    applies,
    check,
    count_transactions,
    message_id_of,
    recorded_ids,
    struck_side,
    unlogged_ends,
    unsettled_at_count,
)


def test_the_id_comes_from_the_body_then_the_seq_header() -> None:
    assert message_id_of(b"body s-17", b"s-99") == "s-17", "the body wins over a header"
    assert message_id_of("body r-3", None) == "r-3"
    assert message_id_of(b"x" * 50, b"s-120") == "s-120", "a poison body: the seq header"
    assert message_id_of(b"\xff\xfe not gzip", "s-5") == "s-5"
    assert message_id_of(b"body s-17 and more", None) == "?"
    assert message_id_of(None, None) == "?"


def test_a_wan_fault_strikes_the_target_unless_it_is_embedded() -> None:
    assert struck_side("amq", "kafka", "stall") == "dst"
    assert struck_side("kafka", "embedded", "slow") == "src"
    assert struck_side("amq", "amq", "cut-source") == "src"
    assert struck_side("amq", "amq", "kill") is None
    assert applies("embedded", "embedded", "stall") is not None
    cells = [(s, t, q, f) for s in SIDES for t in SIDES for q in QOS_MODES for f in WAN_FAULTS
             if applies(s, t, f) is None]
    assert len(cells) == 90, "every source x target x QoS but embedded -> embedded, for stall and slow"
    assert set(WAN_FAULTS) <= set(FAULTS)


def outcome(arrived: dict[str, int], *, left: set[str] | None = None, forwarded: int = 4, log: str = "") -> Outcome:
    return Outcome({"s-0", "s-1", "s-2", "s-3"}, Counter(arrived), left or set(), {"state": "running",
                                                                                   "forwarded": forwarded}, log)


def kafka_run(tmp_path: Path, copies: list[tuple[str, str | None]], fault: str = "stall") -> FaultRun:
    run = FaultRun(tmp_path, "kafka", "kafka", "ONCE_AND_ONLY_ONCE", fault, Brokers())
    run.copies = copies
    return run


ABORTED = "bridge fm: kafka transaction failed: KafkaError{code=_FENCED}; transaction a1-2 (2 copies) aborted"


def test_an_extra_copy_of_an_aborted_transaction_is_not_a_duplicate(tmp_path: Path) -> None:
    copies: list[tuple[str, str | None]] = [("s-0", "a1-1"), ("s-1", "a1-2"), ("s-2", "a1-2"), ("s-1", "b1-1"),
                                            ("s-2", "b1-1"), ("s-3", "b1-1")]
    found = outcome({"s-0": 1, "s-1": 2, "s-2": 2, "s-3": 1}, log=ABORTED)
    kafka_run(tmp_path, copies).count_by_transaction(found)
    assert found.aborted_copies == 2 and found.arrived == Counter({"s-0": 1, "s-1": 1, "s-2": 1, "s-3": 1})
    check(found, "ONCE_AND_ONLY_ONCE", "stall")


@pytest.mark.parametrize(("log", "fault"), [
    ("all fine", "stall"),  # no transaction was aborted: both copies were committed
    ("kafka transaction failed: timed out; transaction a1-2 (2 copies) in doubt", "stall"),  # not aborted
    ("kafka transaction failed; transaction a1-1 (1 copies) aborted", "stall"),  # another transaction
    ("", "kill"),  # a1 was killed, but its last transaction is a1-3: a1-2 committed
])
def test_an_extra_copy_the_log_does_not_explain_is_a_duplicate(tmp_path: Path, log: str, fault: str) -> None:
    copies: list[tuple[str, str | None]] = [("s-0", "a1-1"), ("s-1", "a1-2"), ("s-2", "a1-2"), ("s-3", "a1-3"),
                                            ("s-1", "b1-1"), ("s-2", "b1-1")]
    found = outcome({"s-0": 1, "s-1": 2, "s-2": 2, "s-3": 1}, log=log)
    kafka_run(tmp_path, copies, fault).count_by_transaction(found)
    with pytest.raises(AssertionError, match="duplicated"):
        check(found, "ONCE_AND_ONLY_ONCE", fault)


def test_a_killed_process_s_transaction_in_flight_is_its_producer_s_last(tmp_path: Path) -> None:
    """Two kills: producers a1 and b1 ended without a word in the log, each with a transaction whose records
    the next process copied again; c1 is the last producer (its last transaction is no kill's)."""
    copies: list[tuple[str, str | None]] = [("s-0", "a1-1"), ("s-1", "a1-2"), ("s-1", "b1-1"), ("s-2", "b1-2"),
                                            ("s-2", "c1-1"), ("s-3", "c1-2")]
    assert unlogged_ends(copies, "") == {"a1-2", "b1-2"}
    assert unlogged_ends(copies, "transaction b1-2 (1 copies) in doubt") == {"a1-2"}, "b1 ended in the log"
    found = outcome({"s-0": 1, "s-1": 2, "s-2": 2, "s-3": 1})
    kafka_run(tmp_path, copies, "kill").count_by_transaction(found)
    assert found.aborted_copies == 2 and not found.problems
    check(found, "ONCE_AND_ONLY_ONCE", "kill")


def test_the_promises_per_qos() -> None:
    lost = outcome({"s-0": 1, "s-1": 1, "s-2": 1})
    with pytest.raises(AssertionError, match="lost"):
        check(lost, "ONCE_AND_ONLY_ONCE", "stall")
    with pytest.raises(AssertionError, match="lost"):
        check(lost, "DUPLICATES_OK", "stall")
    check(lost, "AT_MOST_ONCE", "stall")
    check(outcome({"s-0": 1, "s-1": 1, "s-2": 1}, left={"s-3"}), "ONCE_AND_ONLY_ONCE", "stall")
    twice = outcome({"s-0": 2, "s-1": 1, "s-2": 1, "s-3": 1})
    check(twice, "DUPLICATES_OK", "slow")
    with pytest.raises(AssertionError, match="duplicated"):
        check(twice, "AT_MOST_ONCE", "slow")


@pytest.mark.parametrize("qos", QOS_MODES)
def test_a_recreate_cell_fails_when_the_recreated_records_stay_at_the_source(qos: str) -> None:
    """Records left at the source are not lost, but after a recreated source topic they mean the bridge
    stopped copying for good (the Kafka -> Kafka engine until 2026-11-29): a liveness defect."""
    left = outcome({"s-0": 1, "s-1": 1}, left={"s-2", "s-3"})
    check(left, qos, "stall")
    with pytest.raises(AssertionError, match="stopped copying after its source topic was recreated: 2 records left"):
        check(left, qos, "recreate")
    check(outcome({"s-0": 1, "s-1": 1, "s-2": 1, "s-3": 1}), qos, "recreate")


def test_the_duplicate_store_is_read_per_bridge(tmp_path: Path) -> None:
    assert recorded_ids(tmp_path, "fm") is None, "no store"
    with sqlite3.connect(tmp_path / "bridges.sqlite") as db:
        db.execute("CREATE TABLE bridge_delivered (bridge TEXT, message_id TEXT, recorded INTEGER)")
        db.executemany("INSERT INTO bridge_delivered VALUES (?, ?, 0)",
                       [("fm", "ID:1"), ("fm", "ID:2"), ("other", "ID:3")])
    assert recorded_ids(tmp_path, "fm") == 2


# -- the two-gateway Kafka -> Kafka test: copies told apart by the transaction that wrote them

FENCED = ("bridge k2k: kafka transaction failed: KafkaError{code=_FENCED}; transaction a1-7 (2 copies) aborted; "
          "retry 1 in 0.2s")


def test_the_copies_of_a_transaction_logged_aborted_are_not_duplicates() -> None:
    copies = [("s-0", "a1-6"), ("s-1", "a1-7"), ("s-2", "a1-7"), ("s-1", "b1-3"), ("s-2", "b1-3"), ("s-3", "b1-4")]
    count = count_transactions(copies, FENCED)
    assert count.delivered == Counter({"s-0": 1, "s-1": 1, "s-2": 1, "s-3": 1})
    assert count.aborted == {"a1-7": 2} and count.problems == []


@pytest.mark.parametrize(("copies", "log"), [
    # the same records committed by two transactions, neither logged aborted
    ([("s-1", "a1-7"), ("s-2", "a1-7"), ("s-1", "b1-3"), ("s-2", "b1-3")], ""),
    # logged in doubt, not aborted (its commit was asked for, its abort failed)
    ([("s-1", "a1-7"), ("s-2", "a1-7"), ("s-1", "b1-3"), ("s-2", "b1-3")],
     "kafka transaction failed: timed out; transaction a1-7 (2 copies) in doubt (the committed offsets settle it)"),
    # another transaction than the one logged aborted
    ([("s-1", "a1-6"), ("s-2", "a1-6"), ("s-1", "b1-3"), ("s-2", "b1-3")], FENCED),
])
def test_two_copies_from_transactions_not_logged_aborted_are_a_duplicate(copies: list[tuple[str, str | None]],
                                                                          log: str) -> None:
    count = count_transactions(copies, log)
    assert count.delivered == Counter({"s-1": 2, "s-2": 2}) and count.aborted == {}


def test_an_aborted_transaction_with_more_copies_than_it_logged_is_not_explained() -> None:
    copies = [("s-1", "a1-7"), ("s-2", "a1-7"), ("s-3", "a1-7"), ("s-1", "b1-3"), ("s-2", "b1-3"), ("s-3", "b1-3")]
    count = count_transactions(copies, FENCED)
    assert count.problems and count.delivered == Counter({"s-1": 2, "s-2": 2, "s-3": 2})


def test_the_killed_gateways_transaction_in_flight_counts_whole() -> None:
    recopied = [("s-0", "a1-6"), ("s-1", "a1-7"), ("s-2", "a1-7"), ("s-1", "b1-3"), ("s-2", "b1-3")]
    count = count_transactions(recopied, "", in_flight="a1-7")
    assert count.aborted == {"a1-7": 2} and count.delivered == Counter({"s-0": 1, "s-1": 1, "s-2": 1})
    committed = [("s-0", "a1-6"), ("s-1", "a1-7"), ("s-2", "a1-7"), ("s-3", "b1-3")]
    count = count_transactions(committed, "", in_flight="a1-7")
    assert count.aborted == {} and count.delivered == Counter({"s-0": 1, "s-1": 1, "s-2": 1, "s-3": 1})
    half = [("s-1", "a1-7"), ("s-2", "a1-7"), ("s-1", "b1-3")]
    count = count_transactions(half, "", in_flight="a1-7")
    assert count.problems and count.delivered == Counter({"s-1": 2, "s-2": 1})
    only_one = [("s-1", "a1-6"), ("s-1", "a1-7"), ("s-1", "b1-3")]  # one transaction in flight, not two
    assert count_transactions(only_one, "", in_flight="a1-7").delivered == Counter({"s-1": 2})


# -- a Kafka -> Kafka cell counts only once no transaction is open (the bridge's status ``transaction``)

def scripted_run(tmp_path: Path, statuses: list[dict[str, object]], source: str = "kafka") -> FaultRun:
    """A run whose bridge status answers ``statuses`` one poll after the other (the last one for good)."""
    run = FaultRun(tmp_path, source, "kafka", "ONCE_AND_ONLY_ONCE", "slow", Brokers(kafka="k:9092"))
    answers = iter(statuses)
    last: list[dict[str, object]] = [statuses[-1]]

    def status() -> dict[str, object]:
        last[0] = next(answers, last[0])
        return dict(last[0])

    run.status = status  # type: ignore[method-assign]
    return run


def k2k(forwarded: int, transaction: str | None, begun: int, state: str = "running") -> dict[str, object]:
    return {"state": state, "forwarded": forwarded, "transaction": transaction, "transactions": begun}


def test_settle_waits_for_the_open_transaction_to_end(tmp_path: Path) -> None:
    """The commit held behind the fault: nothing changes for longer than ``quiet`` (the cells stall, slow and
    cut-source counted then, before 2026-11-29); settled once it ended and nothing changed for ``quiet``."""
    held = [k2k(100, "p1-2", 2)] * 8
    run = scripted_run(tmp_path, [*held, k2k(100, None, 2), k2k(200, None, 3)])
    started = time.monotonic()
    status = run.settle(quiet=0.5, timeout=20)
    assert status["transaction"] is None and status["forwarded"] == 200
    assert time.monotonic() - started >= 0.2 * len(held) + 0.5


def test_settle_fails_a_cell_whose_transaction_never_ends(tmp_path: Path) -> None:
    run = scripted_run(tmp_path, [k2k(200, "p1-3", 3)])
    with pytest.raises(AssertionError, match="1 s passed with transaction p1-3 still open"):
        run.settle(quiet=0.2, timeout=1)
    failed = scripted_run(tmp_path, [k2k(200, "p1-3", 3, state="failed")])
    with pytest.raises(AssertionError, match="the bridge failed with transaction p1-3 still open"):
        failed.settle(quiet=0.2, timeout=5)
    silent = scripted_run(tmp_path, [{"state": "running", "forwarded": 300}])
    with pytest.raises(AssertionError, match="does not say whether a transaction is open"):
        silent.settle(quiet=0.2, timeout=5)


def test_settle_of_other_bridges_needs_no_transaction_field(tmp_path: Path) -> None:
    run = scripted_run(tmp_path, [{"state": "running", "forwarded": 300, "pending": 0}], source="embedded")
    assert run.settle(quiet=0.2, timeout=5)["forwarded"] == 300


def test_a_count_is_unsettled_when_a_transaction_was_open_or_began_meanwhile() -> None:
    assert unsettled_at_count(k2k(300, None, 4), k2k(300, None, 4)) == []
    assert unsettled_at_count(k2k(200, "p1-2", 2), k2k(200, "p1-2", 2)) == [
        "transaction p1-2 open when the count began", "transaction p1-2 open when the count ended"]
    assert unsettled_at_count(k2k(200, None, 2), k2k(300, None, 3)) == ["1 transaction(s) begun during the count"]
    assert unsettled_at_count(k2k(200, None, 2), {}) == [
        "no bridge status with a transaction field when the count ended (no answer)"]
    outcome = Outcome({"s-1"}, Counter({"s-1": 1}), set(), {"state": "running"},
                      unsettled=["transaction p1-2 open when the count began"])
    with pytest.raises(AssertionError, match="read while a transaction was not settled"):
        check(outcome, "ONCE_AND_ONLY_ONCE", "slow")
