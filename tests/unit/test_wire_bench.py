"""bench.ab_trees' system-call counts: ``strace -c``'s summary read into calls a message."""

from __future__ import annotations

from bench.ab_trees import calls_per_message

SUMMARY = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 41.20    0.012000           3      4128           epoll_ctl
 30.10    0.008800           8      1035           sendto
 20.00    0.005800           5      1033        12 recvfrom
  8.70    0.002500           2      1042           epoll_wait
------ ----------- ----------- --------- --------- ----------------
100.00    0.029100                  7238        12 total
"""


def test_each_call_is_counted_per_message_and_the_total_left_out() -> None:
    calls = calls_per_message(SUMMARY, 60_000)
    assert set(calls) == {"epoll_ctl", "sendto", "recvfrom", "epoll_wait"}
    assert calls["epoll_ctl"] == 4128 / 60_000
    assert calls["recvfrom"] == 1033 / 60_000  # (a call with errors: its calls column is the fourth still)


def test_an_empty_summary_counts_nothing() -> None:
    assert calls_per_message("", 10) == {}
