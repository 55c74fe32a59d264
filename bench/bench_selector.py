"""Evaluations per second of compiled JMS selectors, against references.

References measured in the same run: a hand-written dict-lookup-and-compare
function (the floor any selector engine pays in Python) and ActiveMQ 5.17's
own selector engine driven through JPype (what a gateway delegating to the
Java engine would pay per message).  Aim: >= 1,000,000 evaluations/s for a
simple equality on one core.

Run: ``.venv/bin/python -m bench.bench_selector [--quick] [--no-java]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from gateway.message.model import Message, TextMessage
from gateway.selector import compile_selector
from gateway.selector.compiler import Selector
from gateway.selector.parser import parse

TARGET = 1_000_000
SIMPLE = "x = 'a'"
COMPOUND = (
    "(color = 'red' OR color = 'blue') AND weight > 2 AND name LIKE 'order-%' "
    "AND region IN ('EU', 'US', 'APAC') AND NOT (flag = 'off')"
)
PROPERTIES: dict[str, Any] = {
    "x": "a",
    "color": "blue",
    "weight": 7,
    "name": "order-17",
    "region": "US",
    "flag": "on",
    "extra1": "1",
    "extra2": "2",
}


def reference_simple(message: Message) -> bool:
    return message.properties.get("x") == "a"


def reference_compound(message: Message) -> bool:
    properties = message.properties
    color = properties.get("color")
    weight = properties.get("weight")
    name = properties.get("name")
    return (
        (color == "red" or color == "blue")
        and isinstance(weight, int)
        and weight > 2
        and isinstance(name, str)
        and name.startswith("order-")
        and properties.get("region") in ("EU", "US", "APAC")
        and properties.get("flag") != "off"
    )


def rate(function: Callable[[Any], Any], argument: Any, seconds: float) -> float:
    """Best calls/s of ``function(argument)`` over a few timed rounds."""
    count = 1000
    while True:  # calibrate a round to about seconds / 5
        start = time.perf_counter()
        for _ in range(count):
            function(argument)
        elapsed = time.perf_counter() - start
        if elapsed > seconds / 5:
            break
        count *= 4
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(count):
            function(argument)
        best = max(best, count / (time.perf_counter() - start))
    return best


class ActiveMQReference:
    """ActiveMQ's SelectorParser + MessageEvaluationContext through JPype."""

    def __init__(self) -> None:
        from tests.support.jvm import ensure_jvm

        ensure_jvm()
        import jpype

        self.parser = jpype.JClass("org.apache.activemq.selector.SelectorParser")
        self.message_class = jpype.JClass("org.apache.activemq.command.ActiveMQTextMessage")
        self.context_class = jpype.JClass("org.apache.activemq.filter.MessageEvaluationContext")

    def matcher(self, text: str, properties: dict[str, Any]) -> Callable[[Any], bool]:
        expression = self.parser.parse(text)
        message = self.message_class()
        for name, value in properties.items():
            if isinstance(value, int):
                message.setIntProperty(name, value)
            else:
                message.setStringProperty(name, value)
        context = self.context_class()
        context.setMessageReference(message)
        return lambda _: expression.matches(context)


def compile_uncached(text: str) -> Selector:
    return Selector(text, parse(text))


def main(argv: list[str] | None = None) -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--quick", action="store_true", help="shorter rounds")
    options.add_argument("--no-java", action="store_true", help="skip the JPype/ActiveMQ reference")
    arguments = options.parse_args(argv)
    seconds = 0.5 if arguments.quick else 2.0
    message = TextMessage(properties=dict(PROPERTIES), text="body")
    java = None if arguments.no_java else ActiveMQReference()

    print(f"selector benchmark (python {sys.version.split()[0]}, one core, best of 3 rounds)")
    print(f"{'case':<44}{'evals/s':>14}{'vs dict ref':>13}{'vs ActiveMQ':>13}")
    simple_rate = 0.0
    for label, text, reference in (
        ("simple equality", SIMPLE, reference_simple),
        ("compound AND/OR/LIKE/IN/NOT", COMPOUND, reference_compound),
    ):
        selector = compile_selector(text)
        assert selector.matches(message) is reference(message) is True
        ours = rate(selector.matches, message, seconds)
        baseline = rate(reference, message, seconds)
        java_rate = None
        if java is not None:
            java_matcher = java.matcher(text, PROPERTIES)
            assert java_matcher(None) is True
            java_rate = rate(java_matcher, None, seconds)
        miss = TextMessage(properties={**PROPERTIES, "x": "b", "color": "green"})
        assert not selector.matches(miss)
        ours_miss = rate(selector.matches, miss, seconds)
        java_cell = f"{ours / java_rate:>12.1f}x" if java_rate else f"{'-':>13}"
        print(f"{label + ' (match)':<44}{ours:>14,.0f}{ours / baseline:>12.2f}x{java_cell}")
        print(f"{label + ' (no match)':<44}{ours_miss:>14,.0f}")
        print(f"{'  reference: hand-written dict lookup':<44}{baseline:>14,.0f}")
        if java_rate:
            print(f"{'  reference: ActiveMQ 5.17 via JPype':<44}{java_rate:>14,.0f}")
        if text == SIMPLE:
            simple_rate = ours
    compile_rate = rate(compile_uncached, COMPOUND, seconds)
    cached_rate = rate(compile_selector, COMPOUND, seconds)
    print(f"{'compile compound selector (uncached)':<44}{compile_rate:>14,.0f}")
    print(f"{'compile_selector (LRU cache hit)':<44}{cached_rate:>14,.0f}")
    verdict = "met" if simple_rate >= TARGET else "NOT met"
    print(f"target >= {TARGET:,} evals/s for a simple equality: {verdict} ({simple_rate / TARGET:.1f}x target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
