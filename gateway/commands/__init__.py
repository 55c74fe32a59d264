"""The commands that run a part of the gateway alone (``jmsgateway bridge``, ``jmsgateway pipeline``).

Like :mod:`gateway.app` they are composition roots: they load the configuration and wire the
layers below; no layer imports them.
"""
