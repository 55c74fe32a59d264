"""Fixtures shared by every test: the real gateway process and stomp.py clients."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.activemq import ActiveMQBroker
from tests.support.gateway import GatewayProcess
from tests.support.jms_client import JmsClient
from tests.support.stomp_clients import StompClients


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Destroy leftover client objects (Kafka producers) now, so their shutdown
    chatter comes before pytest's summary rather than after it."""
    gc.collect()


REACTOR_TEST_DEADLINE = 240.0
"""Seconds a test may wait on the reactor (pytest-twisted): then the Deferred it awaits is cancelled,
so the test fails at its ``await`` with a traceback.  (pytest-timeout's signal cannot end such a
wait: the reactor's main loop logs and swallows it; its thread method, at 300 s, ends the worker.)"""


def _install_reactor_deadline() -> None:
    """Every test pytest-twisted runs gets :data:`REACTOR_TEST_DEADLINE` (``Deferred.addTimeout``)."""
    import pytest_twisted

    run_test = pytest_twisted._async_pytest_pyfunc_call

    def with_deadline(pyfuncitem: pytest.Function, function: Callable[..., object],
                      kwargs: dict[str, object]) -> object:
        from twisted.internet import reactor

        result = run_test(pyfuncitem, function, kwargs)
        return result.addTimeout(REACTOR_TEST_DEADLINE, reactor)

    pytest_twisted._async_pytest_pyfunc_call = with_deadline


_install_reactor_deadline()

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
"""Every property test of the suite, unless told otherwise: the same examples on every run and
every machine (each test's examples derive from its own code), so a failure in CI is a change in
the code, never a new random draw; nothing is read from or saved to an example database."""
settings.register_profile("random", derandomize=False, print_blob=True)
"""``--hypothesis-profile=random`` (``make test-random``): new random examples each run, for long
runs that look for what the fixed examples miss; a failure prints the blob that reproduces it
(``@reproduce_failure``), to be added to the test as an ``@example``."""
settings.load_profile("ci")  # (hypothesis' own --hypothesis-profile, read later, overrides it)

SHARED_GROUPS = {"tests/pipeline/": "spark"}
"""Test folders whose files share an expensive session fixture: under pytest-xdist they run
in one worker (one SparkSession for all of them, not one per worker)."""

LONG_FIRST = ("tests/integration/test_bridge_faults.py", "spark", "tests/integration/test_bridge_kafka.py",
              "tests/adversarial/test_grouped_writes_attacks.py", "tests/integration/test_durable_fanout_attacks.py",
              "tests/integration/test_bridge_kafka_owner.py", "tests/integration/test_compiled_modules.py",
              "tests/integration/test_bridge_activemq.py", "tests/integration/test_paging.py",
              "tests/integration/test_jms_api_bridge.py", "tests/unit/test_broker_model.py",
              "tests/integration/test_operations_examples.py", "tests/integration/test_scheduled_delivery.py",
              "tests/integration/test_operations_install.py")
"""Work units handed out first under pytest-xdist, longest first (by a whole run's times per unit, 6 workers:
135 to 290 s each; most other units take under 60 s), so that no worker starts a long unit when the others
are about to finish."""


def work_unit(nodeid: str) -> str:
    """The unit pytest-xdist hands to one worker: a test file, or its folder's shared group."""
    path = nodeid.split("::", 1)[0]
    return next((group for folder, group in SHARED_GROUPS.items() if path.startswith(folder)), path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long runs (marker ``fault_matrix``) are deselected unless ``-m`` names them; in a
    pytest-xdist worker the :data:`LONG_FIRST` units come first."""
    if hasattr(config, "workerinput"):
        rank = {unit: index for index, unit in enumerate(LONG_FIRST)}
        items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(rank)))  # stable: files stay in order
    if "fault_matrix" in (config.option.markexpr or ""):
        return
    long_runs = [item for item in items if item.get_closest_marker("fault_matrix") is not None]
    if long_runs:
        config.hook.pytest_deselected(items=long_runs)
        items[:] = [item for item in items if item.get_closest_marker("fault_matrix") is None]


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pragma: no cover - pytest-xdist is in the test extra
    pass
else:

    class WorkUnitScheduling(LoadScopeScheduling):
        """``--dist loadfile`` as ``make test`` runs it: a test file (or a :data:`SHARED_GROUPS`
        folder) goes to one worker with its module-scoped gateways and brokers, and units are
        handed out in collection order (long ones first) rather than by test count."""

        def __init__(self, config: pytest.Config, log: object = None) -> None:
            super().__init__(config, log)
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LoadScopeScheduling | None:
        """Our scheduler for ``--dist loadfile``; other modes keep pytest-xdist's."""
        if config.getvalue("dist") != "loadfile":
            return None
        return WorkUnitScheduling(config, log)

    from tests.support.worker_deaths import pytest_testnodedown  # noqa: F401 - a hook: how a dead worker ended


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """One gateway on the default config, shared by a test module."""
    process = GatewayProcess(tmp_path_factory.mktemp("gateway")).start()
    yield process
    process.stop()


@pytest.fixture
def make_gateway(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    """Start gateways with extra config for one test; all are stopped afterwards."""
    started: list[GatewayProcess] = []

    def make(extra_config: str = "", **kwargs: object) -> GatewayProcess:
        process = GatewayProcess(tmp_path / f"gw{len(started)}", extra_config, **kwargs)  # type: ignore[arg-type]
        started.append(process)
        return process.start()

    yield make
    for process in started:
        process.kill()


@pytest.fixture
def stomp(gateway: GatewayProcess) -> Iterator[StompClients]:
    """Connected stomp.py clients for the module's gateway, disconnected afterwards."""
    clients = StompClients(gateway.address)
    yield clients
    clients.close()


@pytest.fixture
def jms(activemq: ActiveMQBroker) -> Iterator[JmsClient]:
    """A JMS client (the real ActiveMQ client, over OpenWire) of the session's ActiveMQ, closed afterwards;
    a module that uses it imports the ``activemq`` fixture."""
    client = JmsClient(activemq.openwire_url)
    yield client
    client.close()
