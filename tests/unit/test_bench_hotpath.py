"""``bench.hotpath_inprocess`` keeps working: every workload runs small and every message arrives
(its ``run`` asserts the count); no figure is asserted."""

from __future__ import annotations

import pytest

from bench.hotpath_inprocess import WORKLOADS, run


@pytest.mark.parametrize("workload", WORKLOADS)
def test_each_in_process_workload_delivers_every_message(workload: str) -> None:
    assert run(workload, 400) > 0
