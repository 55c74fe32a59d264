"""The transform chains at run time: which transformers run on a message, in
which order, and what happens when one fails.

Owns :class:`TransformChains` and the outcomes of a run (:class:`Deliver`,
:class:`Dropped`, :class:`DeadLettered`, :class:`Rejected`).  The caller
(STOMP session, bridge) owns what an outcome means on the wire; this module
never sends frames or talks to connectors.

How a message goes through::

    chains = TransformChains(plugin_manager, config)        # at startup; ConfigError if wrong
    context = TransformContext("inbound", source="/queue/a", target="/queue/a", login="bob",
                               transformation=frame.headers.get("transformation"))
    d = chains.run(message, context)                         # Deferred[Outcome]

- The steps for ``(direction, STOMP-side destination, transformation)`` are
  every matching ``[[transform.chain]]`` entry in config order, computed once
  and cached; a ``transformation`` header adds the named transformer first
  (inbound: it decodes what the client sent) or last (outbound: it encodes
  what the subscriber gets).  An unknown ``transformation`` is
  :class:`Rejected` (check it early with :meth:`TransformChains.check_transformation`).
- No steps: ``succeed(Deliver(message, context.target))`` at once, no copy.
  :meth:`TransformChains.has_work` lets a caller skip even that.
- Otherwise the message is copied once (it may be shared with other
  subscribers) and each transformer gets the current message and a context
  carrying its own options.  While transformers return plain values the
  chain runs as a loop; a Deferred (or coroutine) result continues the chain
  when it fires, or is cancelled after the entry's ``timeout`` (a failure).
- A transformer that raises, fails its Deferred or returns something that is
  not a Message, :class:`~gateway.transform.decisions.Drop` or
  :class:`~gateway.transform.decisions.Branch` is handled by its entry's
  ``on_error``: ``reject`` → :class:`Rejected`; ``dead-letter`` →
  :class:`DeadLettered` (the message as it arrived, destination set to the
  dead-letter one, ``dlqDeliveryFailureCause`` property added); ``skip`` →
  the chain goes on with the message as it was before that transformer;
  ``drop`` → :class:`Dropped`.  Each failure is logged with transformer,
  plugin and message id and counted
  (``jmsgateway_transform_failures_total``).
- The returned Deferred never fails for a transformer's fault.

Outbound, after the chain: :func:`is_stomp_deliverable` is the GlassFish rule
(only Text and Bytes messages reach a STOMP subscriber; otherwise the caller
sends an ERROR frame, closes the connection and does not acknowledge).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

from pluggy import PluginManager
from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, succeed
from twisted.internet.defer import TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from gateway.errors import ConfigError, TransformError
from gateway.interfaces import IConfigurableTransformer, IMessageTransformer
from gateway.message.model import BytesMessage, Message, TextMessage
from gateway.transform.catalog import TransformerCatalog, TransformerEntry, collect_transformers
from gateway.transform.config import ChainEntry, ErrorPolicy, TransformConfig
from gateway.transform.context import DIRECTIONS, TransformContext
from gateway.transform.decisions import Branch, Drop
from gateway.transform.manager import plugin_records
from gateway.transform.metrics import transform_metrics

__all__ = [
    "DeadLettered",
    "Deliver",
    "Dropped",
    "Outcome",
    "Rejected",
    "TransformChains",
    "TransformContext",
    "is_stomp_deliverable",
]

DEAD_LETTER_CAUSE = "dlqDeliveryFailureCause"
"""Property set on dead-lettered messages (the name ActiveMQ uses)."""
DEAD_LETTER_TRANSFORMER = "JMSGW_TRANSFORMER"
"""Property naming the transformer that failed, on dead-lettered messages."""
ORIGINAL_DESTINATION = "JMSGW_ORIGINAL_DESTINATION"
"""Property with the destination a dead-lettered message was sent to."""

FAILURES_LOGGED = 10
"""Failures logged in full (a traceback for an unexpected exception) per transformer, plugin and
direction in each :data:`FAILURE_WINDOW`; then one line says the rest are only counted."""
FAILURE_WINDOW = 10.0
"""Seconds of that window."""
_FAILURE_FORMAT = (
    "transformer {transformer} (plugin {plugin}) failed on message {message_id} "
    "({direction} {destination}), policy {policy}: {error}"
)


@dataclass(slots=True, frozen=True)
class Deliver:
    """Pass the message on.

    :ivar destination: the branch destination if a transformer branched,
        else ``context.target``.
    :ivar branched: whether a transformer chose :attr:`destination`.
    """

    message: Message
    destination: str
    branched: bool = False


@dataclass(slots=True, frozen=True)
class Dropped:
    """A transformer decided (or the ``drop`` policy made) not to transfer the message."""

    reason: str
    transformer: str = ""


@dataclass(slots=True, frozen=True)
class DeadLettered:
    """A transformer failed; the caller sends :attr:`message` to :attr:`destination`
    (``message.destination`` is already set to it)."""

    message: Message
    destination: str
    error: TransformError


@dataclass(slots=True, frozen=True)
class Rejected:
    """A transformer failed; inbound, the caller answers the SEND with an ERROR
    frame (``error`` says which transformer and why) and no RECEIPT."""

    error: TransformError


Outcome: TypeAlias = Deliver | Dropped | DeadLettered | Rejected


def _needs_original(steps: tuple[_Step, ...]) -> bool:
    """Whether a failure policy in ``steps`` sends on the message as it arrived."""
    return any(step.on_error == "dead-letter" for step in steps)


def is_stomp_deliverable(message: Message) -> bool:
    """Whether a STOMP subscriber may receive ``message`` (Text or Bytes only)."""
    return isinstance(message, TextMessage | BytesMessage)


@dataclass(slots=True, frozen=True)
class _Step:
    """One transformer in a chain, with everything resolved at build time."""

    name: str
    plugin: str
    transformer: IMessageTransformer
    options: Mapping[str, Any]
    on_error: ErrorPolicy
    dead_letter: str | None
    direction: str
    timeout: float


class TransformChains:
    """Runs the configured transformers on messages (see the module docstring).

    :param plugin_manager: the loaded plugins (:func:`~gateway.transform.manager.build_plugin_manager`).
    :param config: the ``[transform]`` section; the defaults if None.
    :param registry: where the counters live (default: prometheus_client's global registry).
    :param cache_size: how many ``(direction, destination, transformation)``
        chains to remember before starting over.
    :param clock: times out asynchronous transformers (default: the global
        reactor, looked up on first use).
    :raises ConfigError: a chain entry or ``[transform.options]`` names no
        known transformer, or a transformer refuses its options.
    """

    log = Logger()

    def __init__(
        self,
        plugin_manager: PluginManager,
        config: TransformConfig | None = None,
        *,
        registry: CollectorRegistry | None = None,
        cache_size: int = 4096,
        clock: IReactorTime | None = None,
    ) -> None:
        self.config = config if config is not None else TransformConfig()
        self.catalog: TransformerCatalog = collect_transformers(plugin_manager, self.config)
        self._plugin_manager = plugin_manager
        self._metrics = transform_metrics(registry)
        self._cache_size = cache_size
        self._clock = clock
        self._failures_logged: dict[tuple[str, str, str], int] = {}  # (transformer, plugin, direction)
        self._failure_window: float | None = None
        self._cache: dict[tuple[str, str, str | None], tuple[_Step, ...]] = {}
        self._check_config()
        self._entry_steps: dict[str, list[tuple[ChainEntry, _Step]]] = {
            direction: [
                (entry, self._step(self._known(entry), entry, direction))
                for entry in self.config.chain
                if entry.direction in ("both", direction)
            ]
            for direction in DIRECTIONS
        }

    # -- startup --------------------------------------------------------------------------

    def _check_config(self) -> None:
        config = self.config
        for name, defaults in config.options.items():
            key = f"transform.options.{name}"
            found = self.catalog.get(name)
            if found is None:
                raise ConfigError(self._unknown(name), path=config.path, key=key)
            self._check_options(found, dict(defaults), key)
        for entry in config.chain:
            found = self.catalog.get(entry.transformer)
            if found is None:
                raise ConfigError(self._unknown(entry.transformer), path=config.path, key=f"{entry.key}.transformer")
            self._check_options(found, dict(config.options_for(entry.transformer, entry)), f"{entry.key}.options")

    def _check_options(self, found: TransformerEntry, options: dict[str, Any], key: str) -> None:
        if not IConfigurableTransformer.providedBy(found.transformer):
            return
        try:
            found.transformer.check_options(options)
        except ConfigError as exc:
            raise ConfigError(exc.problem, path=self.config.path, key=exc.key or key) from None
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"transformer {found.name!r}: {exc}", path=self.config.path, key=key) from None

    def _unknown(self, name: str) -> str:
        known = self.catalog.names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        failed = [r.name for r in plugin_records(self._plugin_manager) if r.status in ("failed", "blocked")]
        why = f" (not loaded: {', '.join(failed)}; see `jmsgateway plugins`)" if failed else ""
        listing = ", ".join(known) if known else "none"
        return f"unknown transformer {name!r}{hint}; known: {listing}{why}"

    def _known(self, entry: ChainEntry) -> TransformerEntry:
        found = self.catalog.get(entry.transformer)
        assert found is not None  # checked in _check_config
        return found

    def _step(self, found: TransformerEntry, entry: ChainEntry | None, direction: str) -> _Step:
        config = self.config
        if entry is None:
            options, on_error, dead_letter, timeout = (
                config.options_for(found.name),
                config.on_error,
                config.dead_letter,
                config.timeout,
            )
        else:
            options, on_error, dead_letter = config.options_for(found.name, entry), entry.on_error, entry.dead_letter
            timeout = config.timeout if entry.timeout is None else entry.timeout
        return _Step(found.name, found.plugin, found.transformer, options, on_error, dead_letter, direction, timeout)

    # -- lookup ---------------------------------------------------------------------------

    @property
    def transformer_names(self) -> list[str]:
        """Every transformer a chain entry or ``transformation`` header may name."""
        return self.catalog.names()

    def check_transformation(self, name: str | None) -> None:
        """Raise :class:`TransformError` if a ``transformation`` header names no
        transformer (a SUBSCRIBE can be refused before any message flows)."""
        if name is None or not self.config.transformation_header:
            return
        if self.catalog.get(name) is None:
            known = ", ".join(self.catalog.names()) or "none"
            raise TransformError(f"unknown transformation {name!r}; known: {known}", transformer=name)

    def steps_for(self, direction: str, destination: str, transformation: str | None = None) -> list[str]:
        """The transformer names a message would go through, in order."""
        return [step.name for step in self._steps(direction, destination, transformation)]

    def passes_through(self, direction: str, transformation: str | None) -> bool:
        """Whether every message in ``direction`` without a ``transformation`` header
        (or with one, when the header is switched off) passes on untouched: no
        ``[transform]`` entry applies to that direction at all (a cheap test that
        spares the hot path a context and an outcome)."""
        return not self._entry_steps.get(direction) and (
            transformation is None or not self.config.transformation_header)

    def has_work(self, context: TransformContext) -> bool:
        """Whether :meth:`run` would do anything but pass the message on."""
        try:
            return bool(self._steps(context.direction, context.stomp_destination, context.transformation))
        except TransformError:
            return True

    def _steps(self, direction: str, destination: str, transformation: str | None) -> tuple[_Step, ...]:
        if not self.config.transformation_header:
            transformation = None
        key = (direction, destination, transformation)
        steps = self._cache.get(key)
        if steps is not None:
            return steps
        if direction not in self._entry_steps:
            raise ValueError(f"direction must be inbound or outbound, not {direction!r}")
        matching = [step for entry, step in self._entry_steps[direction] if entry.matches(direction, destination)]
        if transformation is not None:
            self.check_transformation(transformation)
            found = self.catalog.get(transformation)
            assert found is not None
            header_step = self._step(found, None, direction)
            if IConfigurableTransformer.providedBy(found.transformer):
                try:
                    found.transformer.check_options(dict(header_step.options))
                except (ValueError, TypeError, ConfigError) as exc:
                    raise TransformError(
                        f"transformation {transformation!r} cannot run with its [transform.options]: {exc}",
                        transformer=transformation,
                    ) from None
            if direction == "inbound":
                matching.insert(0, header_step)
            else:
                matching.append(header_step)
        steps = tuple(matching)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[key] = steps
        return steps

    # -- running --------------------------------------------------------------------------

    def _timer(self) -> IReactorTime:
        if self._clock is None:
            from twisted.internet import reactor

            self._clock = cast(IReactorTime, reactor)
        return self._clock

    def run(self, message: Message, context: TransformContext) -> Deferred[Outcome]:
        """Put ``message`` through its chain; the Deferred fires with the :data:`Outcome`
        and never fails because of a transformer."""
        outcome = self.run_now(message, context)
        if isinstance(outcome, Deferred):
            return outcome
        return succeed(outcome)

    def run_now(
        self, message: Message, context: TransformContext, *, owned: bool = False
    ) -> Outcome | Deferred[Outcome]:
        """:meth:`run`, but a chain that answers synchronously gives its outcome directly.

        :param owned: the caller hands over a message nobody else holds (a SEND just
            decoded), so transformers may work on it in place; it is then copied only
            when a step's failure policy needs the message as it arrived.
        """
        try:
            steps = self._steps(context.direction, context.stomp_destination, context.transformation)
        except TransformError as exc:
            self._metrics.failures.labels(exc.transformer, "", context.direction, "reject").inc()
            self.log.warn(
                "message {message_id} ({direction} {destination}) rejected: {error}",
                message_id=message.message_id,
                direction=context.direction,
                destination=context.stomp_destination,
                error=str(exc),
            )
            return Rejected(exc)
        if not steps:
            return Deliver(message, context.target)
        working = message if owned and not _needs_original(steps) else message.copy()
        return self._advance(steps, 0, message, working, None, context)

    def _advance(
        self,
        steps: tuple[_Step, ...],
        index: int,
        original: Message,
        message: Message,
        branch: str | None,
        context: TransformContext,
    ) -> Outcome | Deferred[Outcome]:
        """Run steps from ``index`` while they answer synchronously."""
        while index < len(steps):
            step = steps[index]
            given = message.copy() if step.on_error == "skip" else message
            try:
                result = step.transformer.transform(given, context.with_options(step.options))
                if isinstance(result, Message) and (not result.properties or _property_problem(result) is None):
                    message = result  # the common case, first
                    index += 1
                    continue
                if inspect.iscoroutine(result):
                    result = Deferred.fromCoroutine(result)
            except Exception:
                failed = self._failed(step, Failure(), original, message, context)
                if failed is not None:
                    return failed
                index += 1
                continue
            if isinstance(result, Deferred):
                if step.timeout and not result.called:
                    result.addTimeout(step.timeout, self._timer())
                return result.addCallbacks(
                    self._resumed,
                    self._resumed_failed,
                    callbackArgs=(steps, index, original, message, branch, context),
                    errbackArgs=(steps, index, original, message, branch, context),
                )
            accepted = self._accept(step, result, original, message, branch, context)
            if not isinstance(accepted, tuple):
                return accepted
            message, branch = accepted
            index += 1
        if branch is None:
            return Deliver(message, context.target)
        return Deliver(message, branch, branched=True)

    def _accept(
        self,
        step: _Step,
        result: Any,
        original: Message,
        message: Message,
        branch: str | None,
        context: TransformContext,
    ) -> tuple[Message, str | None] | Outcome:
        """What a transformer's plain result means: the next ``(message, branch)``, or an end."""
        made = result.message if isinstance(result, Branch) else result
        problem = _property_problem(made) if isinstance(made, Message) else None
        if problem is not None:
            error = TransformError(
                f"transformer {step.name!r} (plugin {step.plugin!r}) returned a message with {problem}; "
                "a property is named by a string and holds a string, number, boolean, bytes or None",
                transformer=step.name,
            )
            failed = self._failed(step, Failure(error), original, message, context)
            return (message, branch) if failed is None else failed
        if isinstance(result, Message):
            return result, branch
        if isinstance(result, Branch) and isinstance(result.message, Message):
            self._metrics.branched.labels(step.name, step.direction).inc()
            result.message.destination = result.destination
            return result.message, result.destination
        if isinstance(result, Drop):
            self._metrics.dropped.labels(step.name, step.direction).inc()
            self.log.info(
                "message {message_id} dropped by transformer {transformer} (plugin {plugin}): {reason}",
                message_id=original.message_id,
                transformer=step.name,
                plugin=step.plugin,
                reason=result.reason,
            )
            return Dropped(result.reason or f"dropped by transformer {step.name!r}", step.name)
        error = TransformError(
            f"transformer {step.name!r} (plugin {step.plugin!r}) returned {type(result).__name__}; "
            "expected a Message, Drop, Branch or a Deferred of one",
            transformer=step.name,
        )
        failed = self._failed(step, Failure(error), original, message, context)
        if failed is None:
            return message, branch
        return failed

    def _resumed(
        self,
        result: Any,
        steps: tuple[_Step, ...],
        index: int,
        original: Message,
        message: Message,
        branch: str | None,
        context: TransformContext,
    ) -> Outcome | Deferred[Outcome]:
        accepted = self._accept(steps[index], result, original, message, branch, context)
        if not isinstance(accepted, tuple):
            return accepted
        return self._advance(steps, index + 1, original, accepted[0], accepted[1], context)

    def _resumed_failed(
        self,
        failure: Failure,
        steps: tuple[_Step, ...],
        index: int,
        original: Message,
        message: Message,
        branch: str | None,
        context: TransformContext,
    ) -> Outcome | Deferred[Outcome]:
        failed = self._failed(steps[index], failure, original, message, context)
        if failed is not None:
            return failed
        return self._advance(steps, index + 1, original, message, branch, context)

    def _count_failure(self, step: _Step) -> int:
        """Failures of ``step``'s transformer (and plugin, direction) in the current log window, this one
        included: under ``skip`` (or ``dead-letter``, ``drop``) the client's connection goes on, so one
        client could otherwise write a log line, with a traceback, a message."""
        now = self._timer().seconds()
        if self._failure_window is None or now - self._failure_window >= FAILURE_WINDOW:
            self._failure_window = now
            self._failures_logged = {}
        key = (step.name, step.plugin, step.direction)
        count = self._failures_logged.get(key, 0) + 1
        self._failures_logged[key] = count
        return count

    def _failed(
        self, step: _Step, failure: Failure, original: Message, message: Message, context: TransformContext
    ) -> Outcome | None:
        """Apply ``step``'s failure policy; None means skip the step and go on."""
        exc = failure.value
        if isinstance(exc, DeferredTimeout):
            exc = TransformError(
                f"transformer {step.name!r} (plugin {step.plugin!r}) timed out after {step.timeout:g}s",
                transformer=step.name,
            )
            failure = Failure(exc)
        if isinstance(exc, TransformError) and exc.transformer:
            error = exc
        else:
            error = TransformError(
                f"transformer {step.name!r} (plugin {step.plugin!r}) failed: {exc}", transformer=step.name
            )
        self._metrics.failures.labels(step.name, step.plugin, step.direction, step.on_error).inc()
        fields: dict[str, Any] = {
            "transformer": step.name,
            "plugin": step.plugin,
            "message_id": original.message_id,
            "direction": context.direction,
            "destination": context.stomp_destination,
            "policy": step.on_error,
            "error": str(error),
        }
        count = self._count_failure(step)
        if count == FAILURES_LOGGED + 1:
            self.log.warn(
                "transformer {transformer} (plugin {plugin}) failed more than {limit} times ({direction}) within "
                "{window:g}s: the others of these {window:g}s are counted in jmsgateway_transform_failures_total, "
                "not logged", transformer=step.name, plugin=step.plugin, limit=FAILURES_LOGGED,
                direction=step.direction, window=FAILURE_WINDOW)
        elif count > FAILURES_LOGGED:
            pass
        elif isinstance(exc, TransformError):
            self.log.warn(_FAILURE_FORMAT, **fields)
        else:
            self.log.failure(_FAILURE_FORMAT, failure, LogLevel.warn, **fields)
        if step.on_error == "skip":
            return None
        if step.on_error == "drop":
            return Dropped(str(error), step.name)
        if step.on_error == "dead-letter" and step.dead_letter is not None:
            dead = original.copy()
            dead.properties[DEAD_LETTER_CAUSE] = str(error)
            dead.properties[DEAD_LETTER_TRANSFORMER] = step.name
            dead.properties[ORIGINAL_DESTINATION] = original.destination
            dead.destination = step.dead_letter
            return DeadLettered(dead, step.dead_letter, error)
        return Rejected(error)


_PROPERTY_TYPES = (str, int, float, bool, bytes)


def _property_problem(message: Message) -> str | None:
    """What is wrong with ``message``'s properties as a transformer left them (None: nothing).

    A property a store, a connector or a STOMP header cannot carry (an object, a list, a name that is
    not a string) would otherwise fail later, where nobody can say which transformer put it there:
    the embedded store's ``message store failure``, an ``internal error``, or ``str()`` of the object
    in a MESSAGE header."""
    for name, value in message.properties.items():
        if type(name) is not str:
            return f"a property named {name!r} (a {type(name).__name__}, not a string)"
        if value is not None and not isinstance(value, _PROPERTY_TYPES):
            return f"property {name!r} holding a {type(value).__name__}"
    return None

