"""The admin console: static pages (``/console/``) over a JSON API (``/console/api/``).

The pages (``gateway/admin/static/``: one HTML page, a script and a style
sheet, no build step, nothing loaded from elsewhere) read these and draw
the tables and the rate chart themselves:

===========================================  ===============================================
``GET  api/overview``                        connections, rates (and history), health
``GET  api/destinations``                    the embedded broker's queues, topics, durables
``GET  api/browse?destination=Q&limit=N``    pending messages of a queue, not consumed (read)
``GET  api/connections``                     STOMP connections with their subscriptions
``GET  api/routes``                          Kafka routes and their counters
``GET  api/bridges``                         bridges
``POST api/purge``      ``{destination}``     drop a queue's pending messages (admin)
``POST api/delete``     ``{destination, message_id}``  drop one pending message (admin)
``POST api/send``       ``{destination, body, persistent?, properties?}``  a test text message (write)
``POST api/move``       ``{destination, message_ids?}``  dead letters back to their origin (admin; write
                                              on every origin)
``POST api/create``     ``{destination}``     create a queue of the embedded broker (admin)
``POST api/remove``     ``{destination}``     delete a queue and its pending messages, not while it
                                              has consumers (admin)
``POST api/close``      ``{id}``              close a STOMP connection (ERROR frame, then close): an
                                              operator's own, any for an administrator
``POST api/bridge``     ``{name, action}``    start, stop, pause or resume a bridge (administrators)
===========================================  ===============================================

Every POST takes a JSON body: :class:`~gateway.admin.requests.AdminRequest`
refuses one without the JSON content type or ``X-Requested-With``, or from
another origin, before it gets here (no page of another site can send it;
the console uses no HTML forms, so it needs no token).  Who may see and do
what follows the asking principal's management role and grants
(:mod:`gateway.admin.roles`, :mod:`gateway.admin.permissions`); every action
is logged with the login that asked for it.  The page asks for confirmation before it posts.
A standby (:mod:`gateway.ha`) answers every action 503, naming the lock the active gateway holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request
from twisted.web.static import File

from gateway.admin import console_views as views
from gateway.admin.observed import ObservedGateway
from gateway.admin.permissions import Action, ConsoleAccess, Forbidden, PermitAll
from gateway.admin.rates import RateHistory
from gateway.admin.resources import BRIDGE_ACTIONS, ErrorPage, json_body
from gateway.admin.roles import Principal, Principals
from gateway.broker.operations import ORIGIN_PROPERTY, QueueOperations
from gateway.errors import GatewayError
from gateway.interfaces import IAuthorizer
from gateway.message.model import TextMessage, new_message_id
from gateway.stomp.sender_identity import stamp_sender
from gateway.stomp.session import StompError

STATIC = os.path.join(os.path.dirname(__file__), "static")
"""The console's pages, shipped as package data."""

SECURITY_HEADERS = {
    b"content-security-policy": b"default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    b"x-frame-options": b"DENY",
    b"x-content-type-options": b"nosniff",
    b"referrer-policy": b"same-origin",
}
"""Sent with every console response: no framing (clickjacking a confirmation), nothing from elsewhere."""

BROWSE_LIMIT = 1000

log = Logger()

Params = dict[str, Any]


def _string(params: Params, key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key!r} must be a non-empty string")
    return value


class ActionFailed(Exception):
    """An action that cannot be done as asked (HTTP 409), with a message for the operator."""


class ConsoleAction(Resource):
    """``POST`` with a JSON object: ``act(login, params)`` (a value or a Deferred of one) as JSON.

    ``describe(params)`` names the action in the log, with the acting login (the one the login guard
    accepted): ``console: alice purged /queue/a (3 messages)``.
    """

    isLeaf = True

    def __init__(self, name: str, act: Callable[[Principal, Params], Any],
                 describe: Callable[[Params, Any], str], principals: Principals,
                 unavailable: Callable[[], str | None] = lambda: None) -> None:
        super().__init__()
        self.name = name
        self.act = act
        self.describe = describe
        self.principals = principals
        self.unavailable = unavailable
        """Why no action can be done now (answered 503 before anything is tried), or None."""

    def render_GET(self, request: Request) -> bytes:
        request.setHeader(b"allow", b"POST")
        return json_body(request, 405, {"error": "this is an action: use POST with a JSON body"})

    def render_POST(self, request: Request) -> Any:
        principal = self.principals.of(request)
        who = principal.name
        try:
            params = json.loads(request.content.read() or b"{}") if request.content is not None else {}
            if not isinstance(params, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as error:
            return json_body(request, 400, {"error": f"bad request body: {error}"})
        reason = self.unavailable()
        if reason is not None:
            log.info("console: {who} was refused a {name} ({code}): {error}", who=who, name=self.name, code=503,
                     error=reason)
            return json_body(request, 503, {"error": reason})
        gone: list[bool] = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def done(result: Any) -> None:
            log.info("console: {who} {action}", who=who, action=self.describe(params, result))
            if not gone:
                request.write(json_body(request, 200, {"ok": True, "result": result}))
                request.finish()

        def failed(failure: Failure) -> None:
            error = failure.value
            if isinstance(error, KeyError):
                code, message = 404, str(error.args[0] if error.args else error)
            elif isinstance(error, Forbidden):
                code, message = 403, str(error)
            elif isinstance(error, ValueError | ActionFailed | GatewayError):
                code, message = (400 if isinstance(error, ValueError) else 409), str(error)
            else:
                code, message = 500, failure.getErrorMessage()
                log.failure("console: {who}'s {name} failed", failure, who=who, name=self.name)
            target = params.get("destination") or params.get("id") or params.get("name")
            log.info("console: {who} was refused a {name} of {target!r} ({code}): {error}", who=who, name=self.name,
                     target=target, code=code, error=message)
            if not gone:
                request.write(json_body(request, code, {"error": message}))
                request.finish()

        d: Deferred[Any] = maybeDeferred(self.act, principal, params)
        d.addCallbacks(done, failed)
        return NOT_DONE_YET


class BrowsePage(Resource):
    """``GET api/browse?destination=/queue/a&limit=100``: pending messages, not consumed."""

    isLeaf = True

    def __init__(self, operations: QueueOperations, access: ConsoleAccess, principals: Principals) -> None:
        super().__init__()
        self.operations = operations
        self.access = access
        self.principals = principals

    def render_GET(self, request: Request) -> bytes:
        args = request.args or {}
        destination = args.get(b"destination", [b""])[0].decode("utf-8", "replace")
        try:
            limit = min(BROWSE_LIMIT, int(args.get(b"limit", [b"100"])[0]))
            self.access.require(self.principals.of(request), "browse", destination)
            queue = self.operations.queue(destination)
            messages = self.operations.browse(destination, limit)
        except KeyError as error:
            return json_body(request, 404, {"error": str(error.args[0])})
        except Forbidden as error:
            return json_body(request, 403, {"error": str(error)})
        except ValueError:
            return json_body(request, 400, {"error": "limit must be a number"})
        return json_body(request, 200, {
            "destination": destination,
            "pending": len(queue),
            "inflight": queue.inflight,
            "dead_letter": self.operations.is_dead_letter_queue(destination),
            "messages": [views.browsed(message) for message in messages],
        }, secrets_hidden=False)  # the messages as they are: their content is what an operator browses


class ConsoleApi(Resource):
    """``/console/api/``: the pages' JSON documents and the actions."""

    def __init__(self, gateway: ObservedGateway, authorizer: IAuthorizer, history: RateHistory,
                 principals: Principals) -> None:
        super().__init__()
        self.gateway = gateway
        self.access = ConsoleAccess(authorizer)
        self.principals = principals
        self.operations = QueueOperations(gateway.broker)
        clock = gateway.reactor
        access = self.access
        self.putChild(b"overview", ViewPage(principals, lambda who: views.overview(gateway, history, clock.seconds(),
                                                                                   who)))
        self.putChild(b"destinations", ViewPage(principals, lambda who: views.destinations(
            gateway.broker, self.operations, who, access, views.client_owners(gateway.factory))))
        self.putChild(b"connections",
                      ViewPage(principals, lambda who: views.connections(gateway.factory, clock.seconds(), who)))
        self.putChild(b"routes", ViewPage(principals, lambda _: views.routes(gateway)))
        self.putChild(b"bridges", ViewPage(principals, lambda who: views.bridges(gateway, who)))
        self.putChild(b"browse", BrowsePage(self.operations, access, principals))

        def action(name: str, act: Callable[[Principal, Params], Any], describe: Callable[[Params, Any], str]) -> None:
            self.putChild(name.encode(), ConsoleAction(name, act, describe, principals, self._standby))

        action("purge", self.purge,
               lambda p, n: f"purged {p.get('destination')!r}" + (f" ({n} messages)" if n is not None else ""))
        action("delete", self.delete,
               lambda p, _: f"deleted message {p.get('message_id')!r} from {p.get('destination')!r}")
        action("send", self.send, lambda p, r: f"sent a test message to {p.get('destination')!r}"
               + (f" ({r['message_id']})" if r else ""))
        action("move", self.move, lambda p, n: f"moved dead letters of {p.get('destination')!r} back to their origin"
               + (f" ({n} messages)" if n is not None else ""))
        action("create", self.create_queue,
               lambda p, made: f"{'created' if made else 'asked to create (it exists)'} queue {p.get('destination')!r}")
        action("remove", self.delete_queue, lambda p, n: f"deleted queue {p.get('destination')!r}"
               + (f" ({n} pending messages dropped)" if n is not None else ""))
        action("close", self.close, self._describe_close)
        self.putChild(b"bridge", ConsoleAction(
            "bridge action", self.bridge, lambda p, _: f"asked bridge {p.get('name')!r} to {p.get('action')}",
            principals, self._standby))

    def _standby(self) -> str | None:
        """Why a standby does nothing asked (its store is closed, nothing runs), for every action."""
        if not self.gateway.role.standby:
            return None
        return (f"this gateway is a standby: another gateway holds the message store's lock "
                f"({self.gateway.role.lock_path}); act on the active one")

    def getChild(self, path: bytes, request: Request) -> Resource:
        return ErrorPage(404, f"no console API {path.decode('utf-8', 'replace')!r}")

    # -- actions on the embedded broker's queues -------------------------

    def _queue_for(self, principal: Principal, action: Action, params: Params) -> str:
        destination = _string(params, "destination")
        self.access.require(principal, action, destination)
        self.operations.queue(destination)  # KeyError for a queue the broker does not have
        return destination

    def purge(self, principal: Principal, params: Params) -> Deferred[int]:
        return self.operations.purge(self._queue_for(principal, "purge", params))

    def delete(self, principal: Principal, params: Params) -> Deferred[bool]:
        destination = self._queue_for(principal, "delete", params)
        message_id = _string(params, "message_id")

        def removed(found: bool) -> bool:
            if not found:
                raise KeyError(f"message {message_id} is not pending on {destination} (consumed, or in flight)")
            return found

        return self.operations.remove(destination, message_id).addCallback(removed)

    def move(self, principal: Principal, params: Params) -> Deferred[int]:
        """Dead letters back to their origins: ``admin`` on the dead-letter queue, and the mover's
        write grant on every origin they go to (a message names its own origin, so without that a
        login could write anywhere through its own dead-letter queue)."""
        destination = self._queue_for(principal, "move", params)
        ids = params.get("message_ids")
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
            raise ValueError("'message_ids' must be a list of message ids")
        if not self.operations.is_dead_letter_queue(destination):
            raise ActionFailed(f"{destination} is not a dead-letter queue "
                               f"(their names start with {self.gateway.broker.settings.dead_letter_prefix})")
        wanted = set(ids) if ids is not None else None
        chosen = {message.message_id: origin for message in self.operations.queue(destination).messages()
                  if isinstance(origin := message.properties.get(ORIGIN_PROPERTY), str)
                  and (wanted is None or message.message_id in wanted)}
        for origin in sorted(set(chosen.values())):
            self.access.require_write(principal, origin)
        return self.operations.move_to_origin(destination, set(chosen))

    def create_queue(self, principal: Principal, params: Params) -> Deferred[bool]:
        """A queue of the embedded broker (``admin`` on it); false when it existed already.  A name that
        the gateway's ``[[destinations]]`` send to another connector is refused (409)."""
        destination = _string(params, "destination")
        self.access.require(principal, "create_queue", destination)
        connector = self.gateway.destinations.resolve(destination).connector
        if connector is not self.gateway.broker:
            raise ActionFailed(f"{destination} goes to another connector ([[destinations]]), not the embedded broker")
        return self.operations.create_queue(destination)

    def delete_queue(self, principal: Principal, params: Params) -> Deferred[int]:
        """Delete a queue and its pending messages (``admin`` on it); 409 while it has consumers."""
        return self.operations.delete_queue(self._queue_for(principal, "delete_queue", params))

    def send(self, principal: Principal, params: Params) -> Deferred[dict[str, str]]:
        destination = _string(params, "destination")
        self.access.require(principal, "send", destination)
        body = params.get("body", "")
        persistent = params.get("persistent", True)
        properties = params.get("properties", {})
        if not isinstance(body, str) or not isinstance(persistent, bool) or not isinstance(properties, dict) \
                or not all(isinstance(k, str) and isinstance(v, str) for k, v in properties.items()):
            raise ValueError("'body' must be a string, 'persistent' true or false, 'properties' strings by name")
        stamped = dict(properties)
        stamp_sender(stamped, principal.login)  # the acting login is the verified sender, as on a STOMP SEND
        message = TextMessage(destination=destination, message_id=new_message_id(), persistent=persistent,
                              timestamp=int(self.gateway.reactor.seconds() * 1000), properties=stamped,
                              text=body)
        sent: Deferred[None] = self.gateway.broker.send(message)
        return sent.addCallback(lambda _: {"message_id": message.message_id})

    # -- connections and bridges -----------------------------------------

    def _connection(self, params: Params) -> Any:
        session_id = _string(params, "id")
        for protocol in self.gateway.factory.connections:
            if protocol.session is not None and protocol.session.session_id == session_id:
                return protocol
        raise KeyError(f"no STOMP connection {session_id!r} (closed already?)")

    def close(self, principal: Principal, params: Params) -> dict[str, str]:
        """Close a STOMP connection: any for an administrator, its own for an operator."""
        if not principal.may_act:
            raise Forbidden(f"{principal.name} may not close connections (an operator closes its own, an "
                            "administrator any)")
        protocol = self._connection(params)
        session = protocol.session
        if not principal.administrator and not principal.owns(session.login):
            raise Forbidden(f"{principal.name} may close only its own connections, not {session.session_id}")
        session.fail(StompError("connection closed by an administrator",
                                f"closed by {principal.name} from the admin console"))
        return {"id": session.session_id, "peer": protocol.peer}

    def _describe_close(self, params: Params, result: Any) -> str:
        if result:
            return f"closed STOMP connection {result['id']} of {result['peer']}"
        return f"closing STOMP connection {params.get('id')!r}"

    def bridge(self, principal: Principal, params: Params) -> Deferred[Any]:
        if not principal.administrator:
            raise Forbidden(f"{principal.name} may not control bridges (administrators only)")
        name, action = _string(params, "name"), _string(params, "action")
        if action not in BRIDGE_ACTIONS:
            raise ValueError(f"no bridge action {action!r}; actions: {', '.join(BRIDGE_ACTIONS)}")
        bridge = self.gateway.bridges.bridge(name)  # KeyError naming the bridges there are
        return maybeDeferred(getattr(bridge, action)).addCallback(lambda _: bridge.status())


class ViewPage(Resource):
    """``GET``: ``produce(principal)`` as JSON, for the principal the request is."""

    isLeaf = True

    def __init__(self, principals: Principals, produce: Callable[[Principal], Any]) -> None:
        super().__init__()
        self.principals = principals
        self.produce = produce

    def render_GET(self, request: Request) -> bytes:
        principal = self.principals.of(request)
        if principal.role is None:
            return json_body(request, 403, {"error": f"{principal.name} has no management role"})
        return json_body(request, 200, self.produce(principal))


class ConsoleRoot(Resource):
    """``/console/``: the static pages, ``api/`` and the console's security headers on all of it."""

    def __init__(self, gateway: ObservedGateway, authorizer: IAuthorizer | None = None,
                 history: RateHistory | None = None, principals: Principals | None = None) -> None:
        super().__init__()
        self.history = history or RateHistory(gateway.reactor, gateway.factory.traffic)
        self.pages = File(STATIC)
        self.pages.indexNames = ["index.html"]
        self.pages.contentTypes = {**self.pages.contentTypes, ".js": "text/javascript; charset=utf-8",
                                   ".css": "text/css; charset=utf-8", ".html": "text/html; charset=utf-8"}
        self.api = ConsoleApi(gateway, authorizer if authorizer is not None else PermitAll(), self.history,
                              principals or Principals())

    def getChildWithDefault(self, path: bytes, request: Request) -> Any:
        for name, value in SECURITY_HEADERS.items():
            request.setHeader(name, value)
        if path == b"api":
            return self.api
        return self.pages.getChildWithDefault(path, request)

    def render(self, request: Request) -> Any:
        request.redirect(b"/console/")
        return b""
