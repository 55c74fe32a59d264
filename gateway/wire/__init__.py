"""The STOMP wire format: the :class:`~gateway.wire.frame.Frame` and the sans-IO codec.

Shared by the STOMP server (:mod:`gateway.stomp`), the stomp:// connector's client and the
frame <-> message conversion (:mod:`gateway.message.convert`); imports no Twisted.
"""
