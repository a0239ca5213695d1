"""What every `fleetval` command module builds on: exit codes, argument types, reading input,
opening a store to read, printing JSON.

The product's commands (`fleetval.cli`) and the simulator's (`fleetval.sim.cli`) both import it
and it imports neither: the simulator's commands never import the product's entry point, which
works without the simulator installed.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetval.errors import FleetvalError

if TYPE_CHECKING:
    from sqlalchemy import Engine

EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
MIB = 1024 * 1024
# A tool's output (a DCGM report, an NCCL log, a kernel log) is far below this; /dev/zero is not.
MAX_INPUT_BYTES = 256 * MIB


def read_input(path: str, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of `path` (or stdin for -), at most `limit` bytes; bytes that are not UTF-8 are
    kept (surrogateescape), newlines read as text mode reads them."""
    try:
        if path == "-":
            stdin = getattr(sys.stdin, "buffer", None)
            data = (
                stdin.read(limit + 1)
                if stdin is not None
                else sys.stdin.read(limit + 1).encode("utf-8", "surrogateescape")
            )
        else:
            with open(path, "rb") as file:
                data = file.read(limit + 1)
    except OSError as exc:
        raise FleetvalError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FleetvalError(f"cannot read {path}: larger than {limit / MIB:g} MiB")
    with io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape") as text:
        return text.read()


def migrated_engine(url: str) -> Engine:
    """An engine on a store that exists and has this fleetval's schema (commands that only read
    or add rows never create a store or change its schema)."""
    from alembic.script import ScriptDirectory

    from fleetval.store.engine import make_engine
    from fleetval.store.migrate import MIGRATIONS, current

    engine = make_engine(url)
    database = engine.url.database
    # Connecting to a missing SQLite file would create an empty one.
    is_file_store = engine.url.get_backend_name() == "sqlite" and database not in (None, "", ":memory:")
    if is_file_store and not Path(str(database)).is_file():
        raise FleetvalError(f"no fleetval store at {database}: create it with `fleetval db upgrade --db URL`")
    have = current(engine)
    want = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    if have is None:
        raise FleetvalError("the database holds no fleetval store yet: run `fleetval db upgrade --db URL`")
    if have != want:
        raise FleetvalError(
            f"the store's schema is at revision {have}, this fleetval reads {want}: run "
            "`fleetval db upgrade --db URL` (a store newer than this fleetval needs a newer fleetval)"
        )
    return engine


def emit(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def verdict_json(row: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "criterion",
        "subject",
        "node",
        "result",
        "action",
        "rule_id",
        "reason",
        "evidence",
        "judged_against",
        "probe_id",
        "run_id",
    )
    return {k: row[k] for k in keys}


# Argument types: a bad value is a usage error naming the option, before anything runs.
def db_url(text: str) -> str:
    from fleetval.store.engine import StoreUrlError, store_url

    try:
        store_url(text)
    except StoreUrlError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


# Airflow's default allowed_run_id_pattern; 200 leaves room for the waves' suffixes in 250.
_RUN_ID = re.compile(r"[A-Za-z0-9_.~:+-]{1,200}")


def run_key(text: str) -> str:
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    if not _RUN_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            "a run key is 1-200 of A-Z a-z 0-9 _ . ~ : + - (it names the Airflow run)"
        )
    return text


def int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text[:40]!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {low}..{high}, got {value}")
        return value

    return parse


def number_in(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text[:40]!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text[:40]!r}")
        if value > high or value < low or (low_open and value == low):
            bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
            raise argparse.ArgumentTypeError(f"must be in {bounds}, got {value:g}")
        return value

    return parse


def text(max_chars: int) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError("must not be empty")
        if len(text) > max_chars:
            raise argparse.ArgumentTypeError(f"at most {max_chars} characters, got {len(text)}")
        if not text.isprintable():
            raise argparse.ArgumentTypeError(f"must be printable, got {text[:40]!r}")
        return text

    return parse
