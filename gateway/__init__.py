"""jmsgateway: a plugin-based STOMP gateway broker built on Twisted.

The package root exports only the version; each layer lives in its own
subpackage (``stomp``, ``broker``, ``message``, ``wire``, ``selector``, ``security``,
``transform``, ``routing``, ``connectors``, ``bridges``, ``admin``, ``pipeline``, ``ha``,
``commands``); the layer contract is in setup.cfg (docs/architecture.md).
"""

__version__ = "0.2.0"
