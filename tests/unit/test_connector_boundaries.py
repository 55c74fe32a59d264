"""Bridges, routing and the admin endpoint know connectors only through gateway/interfaces.py.

Read from the source (DESIGN.md, "Connectors are known only by their interfaces"): in
``gateway/bridges/``, ``gateway/routing/`` and ``gateway/admin/`` no ``isinstance`` of (nor an
import, outside ``if TYPE_CHECKING:``, of) a concrete connector class, no ``getattr`` / ``hasattr`` probing for what a
connector interface declares, no ``confluent_kafka`` import (Kafka client code lives under
``gateway/connectors/``).  A concrete connector class is any class of ``gateway/`` declaring an
interface that extends :class:`~gateway.interfaces.IConnector`.
"""

from __future__ import annotations

import ast
from pathlib import Path

from zope.interface.interface import InterfaceClass

import gateway.interfaces as interfaces
from gateway.interfaces import IConnector

REPO = Path(__file__).resolve().parents[2]
GUARDED = ("bridges", "routing", "admin")
CLIENT_LIBRARIES = ("confluent_kafka", "jpype", "stomp")


def connector_interfaces() -> list[InterfaceClass]:
    return [value for value in vars(interfaces).values()
            if isinstance(value, InterfaceClass) and value.isOrExtends(IConnector)]


def connector_classes(root: Path) -> set[str]:
    """Names of the classes of ``root/gateway`` declaring a connector interface with ``@implementer``."""
    names = {interface.__name__ for interface in connector_interfaces()}
    found: set[str] = set()
    for path in (root / "gateway").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ClassDef):
                continue
            for decorator in node.decorator_list:
                if isinstance(decorator, ast.Call) and _name(decorator.func) == "implementer" \
                        and any(_name(arg) in names for arg in decorator.args):
                    found.add(node.name)
    return found


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _class_names(node: ast.AST) -> list[str]:
    """The class names an ``isinstance`` second argument names (a name, a tuple, ``A | B``)."""
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _class_names(element)]
    if isinstance(node, ast.BinOp):
        return _class_names(node.left) + _class_names(node.right)
    return [_name(node)]


def violations(root: Path) -> list[str]:
    """Every place in the guarded packages of ``root`` that knows a connector other than by interface."""
    concrete = connector_classes(root)
    probed = {name for interface in connector_interfaces() for name in interface.names(all=True)}
    probed -= {"name"}  # every object of the gateway has a name; reading it probes nothing
    found: list[str] = []
    for package in GUARDED:
        for path in sorted((root / "gateway" / package).rglob("*.py")):
            where = path.relative_to(root)
            tree = ast.parse(path.read_text(), str(path))
            typing_only = {id(inner) for node in ast.walk(tree)
                           if isinstance(node, ast.If) and _name(node.test) == "TYPE_CHECKING"
                           for inner in ast.walk(node)}
            for node in ast.walk(tree):
                if id(node) in typing_only:  # names for annotations only
                    continue
                line = f"{where}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.Import):
                    found += [f"{line}: import {a.name}" for a in node.names
                              if a.name.split(".")[0] in CLIENT_LIBRARIES]
                elif isinstance(node, ast.ImportFrom):
                    module = node.module or ""
                    if module.split(".")[0] in CLIENT_LIBRARIES:
                        found.append(f"{line}: from {module} import ...")
                    found += [f"{line}: imports the connector class {a.name}" for a in node.names
                              if a.name in concrete]
                elif isinstance(node, ast.Call) and _name(node.func) in ("isinstance", "issubclass") \
                        and len(node.args) == 2:
                    found += [f"{line}: isinstance of the connector class {name}"
                              for name in _class_names(node.args[1]) if name in concrete]
                elif isinstance(node, ast.Call) and _name(node.func) in ("getattr", "hasattr") \
                        and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                        and node.args[1].value in probed:
                    found.append(f"{line}: probes for {node.args[1].value!r} with {_name(node.func)}")
    return found


def test_the_concrete_connectors_are_found() -> None:
    """The check below can only fail if it knows the connector classes."""
    assert {"EmbeddedBroker", "StompBrokerConnector", "KafkaConnector", "KafkaRouter"} <= connector_classes(REPO)


def test_bridges_routing_and_admin_know_connectors_only_through_interfaces() -> None:
    assert violations(REPO) == []


def test_the_bridges_do_not_import_the_gateway_composition() -> None:
    """``gateway.app`` -> ``gateway.bridges``, never back (a standalone bridge builds no Gateway)."""
    found = []
    for path in sorted((REPO / "gateway" / "bridges").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(REPO)}: {m}" for m in modules if m == "gateway.app"]
    assert found == []


def test_each_connector_provides_what_bridges_ask_of_it() -> None:
    from twisted.internet.task import Clock
    from zope.interface.verify import verifyObject

    from gateway.broker.broker import EmbeddedBroker
    from gateway.connectors.kafka import KafkaConnector
    from gateway.connectors.stomp_broker import StompBrokerConnector
    from gateway.interfaces import (
        ICredentialed,
        IExactlyOnceSource,
        IExactlyOnceTarget,
        IHeldMessages,
        IStatusReporting,
    )

    broker = EmbeddedBroker(Clock())
    stomp = StompBrokerConnector.from_config("amq", {"uri": "stomp://127.0.0.1:61613"}, reactor=Clock())
    kafka = KafkaConnector.from_config("kafka", {"uri": "kafka://127.0.0.1:9092"}, reactor=Clock(), gateway_id="gw")
    for connector, provided in [
        (broker, (IHeldMessages, IStatusReporting)),
        (stomp, (IHeldMessages, IStatusReporting, ICredentialed)),
        (kafka, (IHeldMessages, IStatusReporting, ICredentialed, IExactlyOnceSource, IExactlyOnceTarget)),
    ]:
        for interface in provided:
            assert verifyObject(interface, connector)
    assert not ICredentialed.providedBy(broker), "in-process: no login of its own"
