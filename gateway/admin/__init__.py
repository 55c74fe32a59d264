"""The admin HTTP endpoint: health, Prometheus metrics, status, bridge and routing control.

``[admin] listen = ["tcp:8161:interface=127.0.0.1"]`` opens it (off by
default).  :mod:`~gateway.admin.settings` validates the table,
:mod:`~gateway.admin.health` gathers what the gateway's parts report,
:mod:`~gateway.admin.resources` serves it as JSON (and ``/metrics`` as the
Prometheus text format) and :mod:`~gateway.admin.site` assembles the site,
behind HTTP Basic authentication (``twisted.cred``, the ``[auth]`` users)
when the gateway has users.

Nothing is imported here: the gateway reads ``[admin]`` at every start, and
only a gateway with an admin listener should pay for ``twisted.web``.
"""
