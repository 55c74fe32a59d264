"""The gateway id of an installation: generated once, kept in ``<data_dir>/gateway.id``.

Each gateway writes its id as ``jmsbridge.origin`` on the Kafka records it
produces, and its router does not route back a message that carries it (the
cycle guard).  Two gateways with the same id would take each other's records
for their own, so the default is unique per installation, the way ActiveMQ
generates a broker id or RabbitMQ names a node: ``jmsgateway-<12 hex digits>``,
made the first time a gateway starts on a data directory and read from
``<data_dir>/gateway.id`` afterwards.  ``[gateway] id`` overrides it.
Nothing else here.
"""

from __future__ import annotations

import os
import uuid

from gateway.errors import ConfigError

ID_FILE = "gateway.id"
"""The file under ``data_dir`` holding the generated id."""


def installation_id(data_dir: str) -> str:
    """The id stored under ``data_dir``; generated (and stored) on first use."""
    path = os.path.join(data_dir, ID_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            stored = handle.read().strip()
        if stored:
            return stored
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ConfigError(f"cannot read the gateway id: {exc.strerror}", path=path) from None
    generated = f"jmsgateway-{uuid.uuid4().hex[:12]}"
    try:
        os.makedirs(data_dir, exist_ok=True)
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(generated + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)  # first writer wins; a concurrent start reads the winner's id
        except FileExistsError:
            os.unlink(temporary)
            return installation_id(data_dir)
        os.unlink(temporary)
    except OSError as exc:
        raise ConfigError(f"cannot store the gateway id: {exc.strerror}", path=path) from None
    return generated


def resolve_gateway_id(configured: str, data_dir: str) -> str:
    """``configured`` when set, else the installation's id."""
    return configured or installation_id(data_dir)
