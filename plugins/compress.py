"""Shipped plugin ``compress``: the ``compress`` transformer gzip/zlib-compresses
message bodies and decompresses them again, marking compressed messages with
a property.

Options::

    mode = "auto"            # auto: inbound compress, outbound decompress; or "compress" / "decompress"
    algorithm = "gzip"       # gzip | zlib
    level = 6                # 0-9
    min_size = 256           # bodies smaller than this (bytes) stay as they are
    max_size = 67108864      # decompressed bodies larger than this fail the message (zip bombs)
    property = "JMSGW_COMPRESSION"   # flag property: the algorithm used
    thread_threshold = 262144        # bodies this large are (de)compressed in a thread

Compressing a TextMessage gives a BytesMessage with ``<property>_TEXT = true``
so decompression restores the TextMessage (UTF-8).  A message that already
carries the flag is not compressed twice; decompression only touches
messages carrying it.  Large bodies are handled with ``deferToThread`` so the
reactor never waits for zlib.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread
from zope.interface import implementer

from gateway.errors import TransformError
from gateway.interfaces import IConfigurableTransformer, ITransformContext
from gateway.message.model import BytesMessage, Message, TextMessage
from gateway.transform import hookimpl
from gateway.transform.bodies import body_bytes, retype
from gateway.transform.config import TransformConfig

ALGORITHMS = ("gzip", "zlib")
_MODES = ("auto", "compress", "decompress")
_OPTIONS = ("mode", "algorithm", "level", "min_size", "max_size", "property", "thread_threshold")
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}
DEFAULTS: dict[str, Any] = {
    "mode": "auto",
    "algorithm": "gzip",
    "level": 6,
    "min_size": 256,
    "max_size": 64 * 1024 * 1024,
    "property": "JMSGW_COMPRESSION",
    "thread_threshold": 256 * 1024,
}


def compress_bytes(data: bytes, algorithm: str, level: int) -> bytes:
    """``data`` compressed; gzip output is reproducible (no timestamp)."""
    if algorithm == "gzip":
        return gzip.compress(data, compresslevel=level, mtime=0)
    return zlib.compress(data, level)


def decompress_bytes(data: bytes, algorithm: str, max_size: int) -> bytes:
    """``data`` decompressed, refusing more than ``max_size`` bytes of output.

    :raises TransformError: unknown algorithm, corrupt, truncated or too large.
    """
    if algorithm not in _WBITS:
        raise TransformError(f"unknown compression {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    decompressor = zlib.decompressobj(_WBITS[algorithm])
    try:
        out = decompressor.decompress(data, max_size + 1)
    except zlib.error as exc:
        raise TransformError(f"{algorithm} body is corrupt: {exc}") from None
    if len(out) > max_size:
        raise TransformError(f"decompressed body is larger than max_size ({max_size} bytes)")
    if not decompressor.eof:
        raise TransformError(f"{algorithm} body is truncated")
    return out


@implementer(IConfigurableTransformer)
class CompressTransformer:
    """Compress bodies inbound, decompress them outbound (gzip or zlib)."""

    name = "compress"

    def __init__(self, run_in_thread: Callable[[Callable[[], Message]], Deferred[Message]] = deferToThread):
        self._run_in_thread = run_in_thread

    def check_options(self, options: dict[str, Any]) -> None:
        for key in options:
            if key not in _OPTIONS:
                raise ValueError(f"unknown option {key!r}; known: {', '.join(_OPTIONS)}")
        merged = {**DEFAULTS, **options}
        if merged["mode"] not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}")
        if merged["algorithm"] not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}")
        for key in ("level", "min_size", "max_size", "thread_threshold"):
            value = merged[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{key} must be an integer >= 0")
        if merged["level"] > 9:
            raise ValueError("level must be between 0 and 9")
        if not isinstance(merged["property"], str) or not merged["property"]:
            raise ValueError("property must be a non-empty string")

    def transform(self, message: Message, context: ITransformContext) -> Message | Deferred[Message]:
        options = {**DEFAULTS, **context.options} if context.options else DEFAULTS
        mode = options["mode"]
        if mode == "auto":
            mode = "compress" if context.direction == "inbound" else "decompress"
        flag: str = options["property"]
        if mode == "compress":
            if flag in message.properties or not isinstance(message, TextMessage | BytesMessage):
                return message
            size = message.body_size()
            if size < options["min_size"]:
                return message
            work = lambda: self._compress(message, options, flag)  # noqa: E731
        else:
            if flag not in message.properties or not isinstance(message, BytesMessage):
                return message
            size = message.body_size()
            work = lambda: self._decompress(message, options, flag)  # noqa: E731
        if size >= options["thread_threshold"]:
            return self._run_in_thread(work)
        return work()

    @staticmethod
    def _compress(message: TextMessage | BytesMessage, options: dict[str, Any], flag: str) -> Message:
        data = body_bytes(message)
        algorithm: str = options["algorithm"]
        compressed = retype(message, BytesMessage, body=compress_bytes(data, algorithm, options["level"]))
        compressed.properties[flag] = algorithm
        if isinstance(message, TextMessage):
            compressed.properties[f"{flag}_TEXT"] = True
        return compressed

    @staticmethod
    def _decompress(message: BytesMessage, options: dict[str, Any], flag: str) -> Message:
        algorithm = str(message.properties[flag])
        data = decompress_bytes(message.body, algorithm, options["max_size"])
        was_text = message.properties.get(f"{flag}_TEXT") in (True, "true", "True", "1")
        result: Message
        if was_text:
            try:
                result = retype(message, TextMessage, text=data.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise TransformError(f"decompressed text is not UTF-8: {exc}") from None
        else:
            result = retype(message, BytesMessage, body=data)
        result.properties.pop(flag, None)
        result.properties.pop(f"{flag}_TEXT", None)
        return result


@hookimpl
def jmsgateway_transformers(config: TransformConfig) -> list[IConfigurableTransformer]:
    """Register ``compress``."""
    return [CompressTransformer()]
