"""The ``wf-rpc-server`` configuration file: one JSON document, strictly typed.

Layout::

    {
      "server": {
        "host": "127.0.0.1", "port": 8765,
        "scheduler": {"enabled": false, "poll_interval_s": 1.0,
                      "max_concurrent_runs": 4, "drain_grace_s": 30.0,
                      "misfire_lateness_s": 60.0},
        "store": {"root": ".wf_store", "postgres_dsn": null, "postgres_schema": "wf",
                  "durability": "fsync", "recovery_deadline_s": 300.0,
                  "recovery_backoff_max_s": 10.0},
        "security": {"required": false, "credentials": [...],
                     "tls": {"certificate": "...", "private_key": "...",
                             "client_ca": "...", "require_client_certificate": true}},
        "observability": {"log_format": "json", "log_level": "info", "tracing": false},
        "http": {"idle_timeout_s": 60.0, "header_timeout_s": 10.0, "body_timeout_s": 60.0,
                 "connections_max": 4096, "request_bytes_max": 16777216}
      },
      "dispatch": { ...SchedulerConfig: policies, balancer, partition_by, limits,
                    backpressure, stealing, lease_ttl_s, heartbeat_misses_max... }
    }

Every struct forbids unknown fields, so a typo is refused at start with the
JSON path of the offending key (``$.server.securty``) rather than ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import msgspec

from wf.errors import InvalidArgument
from wf.scheduler.config import SchedulerConfig
from wf.schedules.config import ScheduleServiceConfig
from wf.server.auth import CredentialConfig, check_credentials
from wf.wire.bounds import DURATION_MAX_S


class RetentionConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the server prunes from its store, and how often (docs/deploy.md, Retention).

    Off by default: nothing is ever removed until ``older_than_s`` is set."""

    older_than_s: Annotated[float, msgspec.Meta(ge=0, le=DURATION_MAX_S)] = 0.0
    """Remove finished runs (with their activities and transitions), finished standalone
    activities and old schedule occurrences once they are this old (``0``: never)."""
    interval_s: Annotated[float, msgspec.Meta(ge=0.1, le=DURATION_MAX_S)] = 3_600.0
    """Time between two pruning passes (the first runs one interval after start); at
    least 0.1 s, so a typo cannot make the passes back-to-back."""
    batch: Annotated[int, msgspec.Meta(ge=1, le=5_000)] = 500
    """Rows of a kind one batch deletes (one short write transaction each)."""
    batch_pause_s: Annotated[float, msgspec.Meta(ge=0, le=60)] = 0.05
    """Pause between two batches of a pass, so a backlog never crowds out the writes."""


class StoreConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where state lives."""

    root: str = ".wf_store"
    """Embedded store folder (SQLite), used unless ``postgres_dsn`` is set."""
    postgres_dsn: str | None = None
    """PostgreSQL DSN for the shared, multi-node store."""
    postgres_schema: str = "wf"
    """PostgreSQL schema."""
    durability: Literal["fsync", "process"] = "fsync"
    """SQLite: fsync every commit, or survive process death only."""
    recovery_deadline_s: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    """After a failed commit, how long the server may take to reload and write again
    before it exits (code 3) for a supervisor to restart it."""
    recovery_backoff_max_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    """Longest pause between two reload attempts (from 0.1 s, doubling)."""
    retention: RetentionConfig = msgspec.field(default_factory=RetentionConfig)
    """Periodic pruning of what finished long ago (off by default)."""


class TlsConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Server certificate and, for mutual TLS, the client CA."""

    certificate: str
    """PEM file of the server certificate (chain)."""
    private_key: str
    """PEM file of its private key."""
    client_ca: str | None = None
    """PEM file of the CA that signs client certificates (enables mutual TLS)."""
    require_client_certificate: bool = False
    """Refuse TLS handshakes without a valid client certificate."""

    def __post_init__(self) -> None:
        if self.require_client_certificate and self.client_ca is None:
            raise InvalidArgument(
                "require_client_certificate needs client_ca", field="server.security.tls"
            )


class SecurityConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """WF-005 §24."""

    required: bool = False
    """Refuse anonymous callers (implied when credentials are configured)."""
    credentials: list[CredentialConfig] = msgspec.field(default_factory=list)
    """Tokens and certificate identities with roles and scopes."""
    tls: TlsConfig | None = None
    """Serve HTTPS (and mutual TLS with a client CA)."""

    def __post_init__(self) -> None:
        check_credentials(self.credentials)


class ObservabilityConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Logs and traces."""

    log_format: Literal["json", "text"] = "json"
    """One JSON object per line, or text for humans (see ``docs/observability.md``)."""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Root log level; ``debug`` adds ``rpc.call``, lease start and renewal lines."""
    activity_log_level: Literal["debug", "info"] = "debug"
    """The level of the server's lines on every activity's success path
    (``activity.submitted``, ``lease.granted``, ``activity.completed``): three per
    activity, about a sixth of the server's CPU at full speed, so ``debug`` unless
    asked for. Failures, retries, revocations and cancellations keep their levels."""
    tracing: bool = False
    """OpenTelemetry spans (needs the ``otel`` extra; a no-op without it)."""


class HttpConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The HTTP edge: how long a connection may sit, how many, how large a request
    (``docs/server.md``, "HTTP limits and timeouts")."""

    idle_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 60.0
    """An open connection with no request in progress (before the first one, between
    two) is closed after this long. A request being answered (a long poll) is not idle."""
    header_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 10.0
    """From the first byte of a request to the end of its header (and the whole TLS
    handshake) at most this long, or the connection is closed."""
    body_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 60.0
    """Reading one request's body takes at most this long, or it is answered 408 and
    the connection is closed."""
    connections_max: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 4096
    """Most connections open at once; one more is answered 503 and closed. Lowered at
    start to fit the process's open-file limit (see ``wf.server.http_edge``)."""
    request_bytes_max: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 16 * 1024 * 1024
    """Largest request body; a larger one is answered 413."""


class ClusterConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Several servers on one PostgreSQL store: one active, the others hot standbys
    (``docs/ha.md``). Ignored on SQLite, whose single owner holds a file lock."""

    node_id: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    """This node's id in ``cluster.status`` (default: host, process id and start time)."""
    advertise_url: Annotated[str, msgspec.Meta(min_length=1, max_length=2000)] | None = None
    """The URL clients reach this node at, handed to them in ``not_leader`` errors
    while another node is active (default: none; clients then rotate through their
    own list of URLs)."""
    campaign_interval_s: Annotated[float, msgspec.Meta(gt=0, le=60)] = 0.1
    """How often a standby tries to take ownership (one cheap lock attempt)."""
    session_timeout_s: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 3.0
    """PostgreSQL ends the active's writer session after this long without a statement
    (``idle_session_timeout``, ``idle_in_transaction_session_timeout``, TCP user
    timeout and keepalives): a frozen or cut-off active loses its lock within it,
    and a standby takes over. The active pings its session well within it."""
    gate_margin_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 1.0
    """The active stops answering (``not_leader``) once its session went unconfirmed
    for ``session_timeout_s - gate_margin_s``: before PostgreSQL could have let
    another node take over."""
    warm_interval_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 1.0
    """How often a standby brings its warm copy of the scheduler state up to date."""
    warm_verify_interval_s: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    """How often a standby compares its warm copy with a full load (and replaces a
    copy that differs, logging an error)."""
    report_interval_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 1.0
    """How often every node records its role, epoch and lag in the cluster table."""
    clock_skew_warn_s: Annotated[float, msgspec.Meta(ge=0)] = 0.05
    """A node whose clock differs from PostgreSQL's by more warns when it campaigns."""
    clock_skew_max_s: Annotated[float, msgspec.Meta(gt=0)] = 5.0
    """A node whose clock differs from PostgreSQL's by more does not campaign."""

    def __post_init__(self) -> None:
        if self.gate_margin_s >= self.session_timeout_s:
            raise InvalidArgument(
                "server.cluster.gate_margin_s must be below session_timeout_s",
                field="server.cluster.gate_margin_s",
            )


class UiConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``server.ui``: the operator console in the browser (docs/console.md)."""

    enabled: bool = True
    """Serve the console at ``/ui`` (and redirect ``/`` there); off: both are 404."""


class ServerSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``server`` section."""

    host: str = "127.0.0.1"
    port: int = 8765
    scheduler: ScheduleServiceConfig = msgspec.field(default_factory=ScheduleServiceConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    security: SecurityConfig = msgspec.field(default_factory=SecurityConfig)
    observability: ObservabilityConfig = msgspec.field(default_factory=ObservabilityConfig)
    http: HttpConfig = msgspec.field(default_factory=HttpConfig)
    cluster: ClusterConfig = msgspec.field(default_factory=ClusterConfig)
    ui: UiConfig = msgspec.field(default_factory=UiConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise InvalidArgument("port must be 0..65535", field="server.port")


class ServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The whole configuration file."""

    server: ServerSection = msgspec.field(default_factory=ServerSection)
    dispatch: SchedulerConfig = msgspec.field(default_factory=SchedulerConfig)


def parse_config(data: bytes, *, source: str = "config") -> ServerConfig:
    """Decode and validate a configuration document.

    Raises :class:`InvalidArgument` whose message names the offending key's path.
    """
    try:
        return msgspec.json.decode(data, type=ServerConfig)
    except msgspec.ValidationError as exc:
        raise InvalidArgument(f"{source}: {exc}", source=source) from exc
    except msgspec.DecodeError as exc:
        raise InvalidArgument(f"{source}: not valid JSON: {exc}", source=source) from exc
    except InvalidArgument as exc:
        raise InvalidArgument(f"{source}: {exc.message}", source=source, **exc.details) from exc


def load_config(path: Path | None) -> ServerConfig:
    """The configuration in ``path``, or the defaults."""
    if path is None:
        return ServerConfig()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read config {path}: {exc.strerror}", path=str(path)) from exc
    return parse_config(data, source=str(path))
