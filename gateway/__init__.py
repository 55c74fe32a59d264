"""jmsgateway: a plugin-based STOMP gateway broker built on Twisted.

The package root exports only the version; each layer lives in its own
subpackage (``stomp``, ``broker``, ``message``, ``selector``, ``transform``,
``routing``, ``connectors``, ``bridges``, ``admin``, ``pipeline``).
"""

__version__ = "0.1.0"
