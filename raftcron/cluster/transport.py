"""The Raft port survives strangers: limits on what an unauthenticated peer can cost.

pysyncobj 0.3.17 (tcp_connection.py) trusts the 4-byte length prefix of every message
and buffers until that many bytes arrived - up to 2 GiB per connection, before it has
checked anything - and it grows that buffer with `bytes +=`, copying all of it at every
8 KiB read (quadratic: 13.5 s of CPU for 64 MiB, all of it on the Raft tick thread,
which also sends the heartbeats). It keeps a silent connection for `connectionTimeout`
(3,600 s here, ARCHITECTURE §4) and accepts any number of them.

With a cluster password every connection starts with one small message: the peer's
random key, encrypted under the cluster key (tcp transport's handshake). A connection is
*authenticated* once such a message has decrypted, i.e. the peer knows the password.
Before that, this transport:

- accepts a first message of at most `handshake_max_bytes` and nothing after it (a
  legitimate peer waits for our answer), checked on the length prefix the moment its
  four bytes arrive, so an announced 1 GiB costs four bytes of buffer;
- drops an accepted connection that pysyncobj has not matched to a cluster node within
  `auth_deadline_s` (key, then address under our fresh random key: a replayed handshake
  token does not get that far);
- holds at most `max_unauthenticated` accepted connections, and at most
  `max_unauthenticated_per_host` from one source address (so that one stranger's host
  cannot take every slot from a restarting peer); one beyond is closed at once.

Authenticated traffic keeps pysyncobj's protocol, timeouts and idle links unchanged. Its
messages are capped at `message_max_bytes`, far above anything raftcron sends (see
`message_max_bytes` below) and far below 2 GiB. Every connection buffers in a bytearray
(linear instead of quadratic copying; bench/raft_port.py measures both).

Without a password nothing can be authenticated (and pickles from anyone are executed):
the first message parsed then counts as the handshake. raftcron always sets one.
"""

from __future__ import annotations

import errno
import functools
import logging
import socket
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import pysyncobj.pickle as raft_pickle
from pysyncobj.monotonic import monotonic as monotonic_time
from pysyncobj.poller import POLL_EVENT_TYPE
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.tcp_server import TcpServer
from pysyncobj.transport import TCPTransport

log = logging.getLogger("raftcron.raft")

PREFIX = struct.Struct("i")  # pysyncobj's native-order signed length prefix


def log_sparsely(count: int, message: str, *args: Any) -> None:
    """Log the 1st, 10th, 100th and every 1000th occurrence: a flood of strangers must
    not turn into a flood of log lines."""
    if count in (1, 10, 100) or count % 1000 == 0:
        log.warning(message, *args)


@dataclass(frozen=True)
class PortLimits:
    """What one stranger may cost the Raft port.

    handshake_max_bytes: the encrypted random key a peer sends first is small
    (measured 228 bytes: a Fernet token of the zlib-compressed pickled 32-byte key).
    message_max_bytes: pysyncobj splits snapshots into `logCompactionBatchSize` chunks
    (64 KiB) and entries into `appendEntriesBatchSizeBytes` (64 KiB) batches, but a batch
    ends with the entry that crosses the limit, whole, and a forwarded command travels in
    one message. So the largest message is bounded by the largest command, and raftcron's
    commands are built from API bodies of at most 1 MiB (api.errors.MAX_BODY_BYTES) or
    from the leader's bounded batches; zlib then Fernet make that at most about 4/3 of it.
    64 MiB leaves a wide margin and is 32 times below the 2 GiB pysyncobj would buffer;
    a larger message closes the link (logged), it is never buffered.
    """

    handshake_max_bytes: int = 4096
    message_max_bytes: int = 64 << 20
    auth_deadline_s: float = 5.0
    max_unauthenticated: int = 64
    max_unauthenticated_per_host: int = 16
    listen_backlog: int = 128


@dataclass
class PortStats:
    """Counters of what the guard turned away (read from other threads: plain ints)."""

    oversized: int = 0  # a length prefix above the cap for the connection's state
    pre_auth_overflow: int = 0  # bytes after the first message before it authenticated
    auth_timeouts: int = 0  # dropped at the deadline without authenticating
    refused: int = 0  # closed at accept: too many unauthenticated connections
    largest_message: int = 0  # the largest length prefix accepted so far
    peer_links_lost: int = 0  # connections to cluster members that went down, any cause


class GuardedConnection(TcpConnection):
    """pysyncobj's connection with a checked length prefix and a bytearray buffer.

    Overrides the two name-mangled read methods of TcpConnection; everything else
    (sending, encryption, timeouts, callbacks) is pysyncobj's own.
    """

    def __init__(self, *args: Any, limits: PortLimits, stats: PortStats,
                 **kwargs: Any) -> None:
        self.limits = limits
        self.stats = stats
        self.authenticated = False
        self.peer_host: str | None = None  # source address of an accepted connection
        self._checked_upto = 0  # buffer offset of the next length prefix not yet checked
        super().__init__(*args, **kwargs)

    def connect(self, host: str, port: int) -> bool:
        self._reset_guard()
        return super().connect(host, port)

    def disconnect(self) -> None:
        self._reset_guard()
        super().disconnect()

    def _reset_guard(self) -> None:
        self.authenticated = False
        self._checked_upto = 0

    def _in_handshake(self) -> bool:
        """Before the peer proved the cluster key. Without a password there is no key to
        prove (the first message may be a large append): only the deadline and the count
        of connections apply then."""
        return not self.authenticated and self.encryptor is not None

    def _buffer(self) -> bytearray:
        buf = self._TcpConnection__readBuffer
        if not isinstance(buf, bytearray):  # pysyncobj resets it to bytes() on (dis)connect
            buf = self._TcpConnection__readBuffer = bytearray(buf)
        return buf

    def _refuse(self, counter: str, detail: str) -> None:
        count = getattr(self.stats, counter) + 1
        setattr(self.stats, counter, count)
        log_sparsely(count, "Raft port: closing a connection (%s; %d so far)", detail, count)
        self.disconnect()

    def _prefixes_ok(self, buf: bytearray) -> bool:
        """Check every length prefix that has arrived, before its message is buffered."""
        while self._checked_upto + PREFIX.size <= len(buf):
            handshake = self._in_handshake()
            if handshake and self._checked_upto > 0:
                # A peer that has not proven the key sends one message and waits.
                self._refuse("pre_auth_overflow", "data after an unauthenticated handshake")
                return False
            (length,) = PREFIX.unpack_from(buf, self._checked_upto)
            cap = self.limits.handshake_max_bytes if handshake else self.limits.message_max_bytes
            if not 0 <= length <= cap:
                state = "unauthenticated" if handshake else "authenticated"
                self._refuse("oversized", f"{state} message of {length} bytes, cap {cap}")
                return False
            self._checked_upto += PREFIX.size + length
        return True

    def _process_read(self) -> bool:
        sock = self._TcpConnection__socket
        try:
            incoming = sock.recv(self._TcpConnection__recvBufferSize)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                self.disconnect()
            return False
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) or not incoming:
            self.disconnect()
            return False
        buf = self._buffer()
        buf += incoming
        return self._prefixes_ok(buf)

    def _process_parse_message(self) -> Any:
        buf = self._buffer()
        if len(buf) < PREFIX.size:
            return None
        (length,) = PREFIX.unpack_from(buf, 0)
        if len(buf) - PREFIX.size < length:
            return None
        with memoryview(buf) as view:  # released before the buffer is resized below
            data = bytes(view[PREFIX.size:PREFIX.size + length])
        try:
            if self.encryptor:
                timestamp = self.encryptor.extract_timestamp(data)
                if timestamp < self.recvLastTimestamp:
                    raise ValueError("replayed or reordered token")
                self.recvLastTimestamp = timestamp
                data = self.encryptor.decrypt(data)
            message = raft_pickle.loads(zlib.decompress(data))
            if self.recvRandKey:
                rand_key, message = message
                if rand_key != self.recvRandKey:
                    raise ValueError("message for another connection")
        except Exception:  # noqa: BLE001 - pysyncobj's own rule: anything wrong closes
            self.disconnect()
            return None
        del buf[:PREFIX.size + length]  # bytearray: drops the head without a full copy
        self._checked_upto -= PREFIX.size + length
        self.stats.largest_message = max(self.stats.largest_message, length)
        self.authenticated = True  # it decrypted under the cluster key
        return message

    # TcpConnection calls these through its mangled names.
    _TcpConnection__processRead = _process_read
    _TcpConnection__processParseMessage = _process_parse_message


class GuardedTcpServer(TcpServer):
    """TcpServer that accepts into GuardedConnection, through the transport's admission."""

    def __init__(self, *args: Any, transport: GuardedTCPTransport, **kwargs: Any) -> None:
        self._transport = transport
        super().__init__(*args, **kwargs)

    def bind(self) -> None:
        super().bind()
        # pysyncobj listens with a backlog of 5: a burst of strangers would make a
        # reconnecting peer's SYN wait for a retransmission.
        self._TcpServer__socket.listen(self._transport.limits.listen_backlog)

    def _accept(self, descr: int, event: int) -> None:
        if event & POLL_EVENT_TYPE.READ:
            try:
                sock, addr = self._TcpServer__socket.accept()
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    self.unbind()
                    return
            else:
                if not self._transport.admit(addr[0]):
                    sock.close()
                else:
                    self._serve(sock, addr[0])
        if event & POLL_EVENT_TYPE.ERROR:
            self.unbind()

    def _serve(self, sock: socket.socket, host: str) -> None:
        send_size = self._TcpServer__sendBufferSize
        recv_size = self._TcpServer__recvBufferSize
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_size)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_size)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        conn = GuardedConnection(
            poller=self._TcpServer__poller, socket=sock,
            timeout=self._TcpServer__connectionTimeout,
            sendBufferSize=send_size, recvBufferSize=recv_size,
            keepalive=self._TcpServer__keepalive,
            limits=self._transport.limits, stats=self._transport.port_stats)
        conn.peer_host = host
        self._TcpServer__onNewConnectionCallback(conn)

    _TcpServer__onNewConnection = _accept


class GuardedTCPTransport(TCPTransport):
    """pysyncobj's TCP transport with PortLimits on accepted connections.

    Limits come from the SyncObj's `port_limits` attribute (PortLimits() if absent).
    """

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any) -> None:  # noqa: N803
        self.limits: PortLimits = getattr(syncObj, "port_limits", None) or PortLimits()
        self.port_stats = PortStats()
        self._pending: dict[GuardedConnection, float] = {}  # accepted, not authenticated
        super().__init__(syncObj, selfNode, otherNodes)

    def _createServer(self) -> None:  # noqa: N802 - pysyncobj's name
        super()._createServer()
        plain = self._server
        conf = self._syncObj.conf
        self._server = GuardedTcpServer(
            self._syncObj._poller, plain._TcpServer__host, plain._TcpServer__port,
            onNewConnection=self._onNewIncomingConnection,
            sendBufferSize=conf.sendBufferSize, recvBufferSize=conf.recvBufferSize,
            connectionTimeout=conf.connectionTimeout, transport=self)

    def unauthenticated(self) -> int:
        """Accepted connections not yet known as a cluster node (tick thread's view)."""
        self._forget_identified()
        return len(self._pending)

    def _forget_identified(self) -> None:
        """A connection leaves the deadline and the count once pysyncobj has matched it
        to a node: that takes the peer's key (first message) and then its address sent
        with our fresh random key, which a replayed handshake token cannot produce. (It
        also drops pysyncobj's utility connections at the deadline: raftcron uses none.)"""
        unknown = self._unknownConnections
        for conn in [c for c in self._pending if c.authenticated and c not in unknown]:
            del self._pending[conn]

    def admit(self, host: str) -> bool:
        """Called on accept of a connection from `host`: False closes it."""
        total = self.unauthenticated()
        from_host = sum(1 for c in self._pending if c.peer_host == host)
        if (total < self.limits.max_unauthenticated
                and from_host < self.limits.max_unauthenticated_per_host):
            return True
        self.port_stats.refused += 1
        log_sparsely(self.port_stats.refused, "Raft port: %d unauthenticated connections "
                     "(%d from %s) already, refusing new ones (%d refused so far)", total,
                     from_host, host, self.port_stats.refused)
        return False

    def _onNewIncomingConnection(self, conn: GuardedConnection) -> None:  # noqa: N802
        self._pending[conn] = monotonic_time()
        super()._onNewIncomingConnection(conn)

    def _onDisconnected(self, conn: Any) -> None:  # noqa: N802
        self._pending.pop(conn, None)
        if self._connToNode(conn) in self._nodes:
            self.port_stats.peer_links_lost += 1
        super()._onDisconnected(conn)

    def _onTick(self) -> None:  # noqa: N802
        super()._onTick()
        self._drop_late()

    def _drop_late(self) -> None:
        if not self._pending:
            return
        self._forget_identified()
        too_old = monotonic_time() - self.limits.auth_deadline_s
        for conn in [c for c, at in self._pending.items() if at < too_old]:
            self._pending.pop(conn, None)
            if conn.state != CONNECTION_STATE.DISCONNECTED:
                self.port_stats.auth_timeouts += 1
                log_sparsely(self.port_stats.auth_timeouts, "Raft port: dropping a connection "
                             "that did not authenticate within %.1f s (%d so far)",
                             self.limits.auth_deadline_s, self.port_stats.auth_timeouts)
                conn.disconnect()

    def addNode(self, node: Any) -> None:  # noqa: N802
        """pysyncobj's addNode, with the outgoing connection guarded as well."""
        super().addNode(node)
        conn = self._connections.get(node)
        if conn is None or isinstance(conn, GuardedConnection):
            return
        conf = self._syncObj.conf
        guarded = GuardedConnection(
            poller=self._syncObj._poller, timeout=conf.connectionTimeout,
            sendBufferSize=conf.sendBufferSize, recvBufferSize=conf.recvBufferSize,
            keepalive=conf.tcp_keepalive, limits=self.limits, stats=self.port_stats)
        guarded.encryptor = self._syncObj.encryptor
        guarded.setOnConnectedCallback(functools.partial(self._onOutgoingConnected, guarded))
        guarded.setOnMessageReceivedCallback(functools.partial(self._onMessageReceived, node))
        guarded.setOnDisconnectedCallback(functools.partial(self._onDisconnected, guarded))
        self._connections[node] = guarded
