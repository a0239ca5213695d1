"""`fleetval metrics serve`: the store's verdicts as Prometheus metrics on /metrics (docs/metrics.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Final

DEFAULT_HOST: Final = "127.0.0.1"  # loopback unless asked: the metrics name every node
# fleet_health.DEFAULT_HORIZON_DAYS, not imported: building the parser imports no SQLAlchemy.
DEFAULT_HORIZON_DAYS: Final = 90
DEFAULT_FULL_EVERY_S: Final = 300


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve /metrics until interrupted (SIGTERM or Ctrl-C)."""
    import datetime as dt
    import signal
    import threading

    from prometheus_client import CollectorRegistry, start_http_server

    from fleetval.metrics.collector import StoreCollector

    engine = args.open_store(args.db)
    registry = CollectorRegistry()
    registry.register(
        StoreCollector(
            engine, horizon_days=args.horizon_days, full_every=dt.timedelta(seconds=args.full_every)
        )
    )
    server, thread = start_http_server(args.port, addr=args.host, registry=registry)
    stop = threading.Event()
    try:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())  # before the line a caller waits for
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(json.dumps({"metrics": f"http://{host}:{server.server_port}/metrics"}))
        sys.stdout.flush()
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        engine.dispose()
    return 0


def add_parser(sub: Any, *, db_url: Any, int_in: Any, open_store: Any) -> None:
    """`open_store(url)`: the entry point's engine on a store with this fleetval's schema (it
    refuses any other, as every reading command does)."""
    p_metrics = sub.add_parser("metrics", help="the store's verdicts as Prometheus metrics")
    metrics_sub = p_metrics.add_subparsers(dest="metrics_command", required=True)
    p_serve = metrics_sub.add_parser("serve", help="serve /metrics (OpenMetrics or Prometheus text)")
    p_serve.add_argument("--db", required=True, type=db_url, help="the store to read")
    p_serve.add_argument("--port", required=True, type=int_in(0, 65535), help="port (0: a free one, printed)")
    p_serve.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to listen on (default {DEFAULT_HOST})"
    )
    p_serve.add_argument(
        "--horizon-days",
        type=int_in(1, 3650),
        default=DEFAULT_HORIZON_DAYS,
        help=f"judgements of runs started within this many days (default {DEFAULT_HORIZON_DAYS})",
    )
    p_serve.add_argument(
        "--full-every",
        type=int_in(1, 86400),
        default=DEFAULT_FULL_EVERY_S,
        help=f"read it all at least this often, s (else on a change; default {DEFAULT_FULL_EVERY_S})",
    )
    p_serve.set_defaults(func=cmd_serve, open_store=open_store)
