"""TLS settings for node-to-node HTTP calls (forwarding, peer views, clock probes)."""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raftcron.config import NodeConfig

log = logging.getLogger("raftcron.peer_tls")


def peer_tls(config: NodeConfig) -> ssl.SSLContext | bool:
    """Peers are trusted through the system CAs and, with TLS on, this node's own
    certificate (a cluster may share one self-signed certificate)."""
    if not config.tls_cert:
        return True
    context = ssl.create_default_context()
    try:
        context.load_verify_locations(config.tls_cert)
    except (OSError, ssl.SSLError):
        log.warning("cannot add %s to the trusted certificates", config.tls_cert)
    return context
