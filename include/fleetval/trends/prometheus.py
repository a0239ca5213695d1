"""A fleet's GPU counter history from the Prometheus that scrapes its dcgm-exporter, one sample per
sweep, for the device trend judge (D-DEV-TREND-01).

- What is read: the dcgm-exporter fields the device rules read (`DEVICE_FIELDS`, names as in
  `fleetval.trends.history`), for the last `sweeps` sweeps (`DEVICE_LOOKBACK`: the longest rule
  window plus one; older samples are never looked at), one point per `step` (a week: the weekly
  sweep's interval), through `/api/v1/query_range`.
- Each point is the last sample within `lookback` (a day) before it (`last_over_time`): the
  weekly sweep pauses dcgm-exporter on a node while DCGM diagnoses it, so the instant itself may
  have no sample. Series of one GPU that differ only in scrape labels (a restarted exporter pod)
  are one series (`max by` node, UUID, gpu).
- The node is the `node_label` label (dcgm-exporter's `Hostname`, `FLEETVAL_PROMETHEUS_NODE_LABEL`),
  the GPU its `UUID` (else its `gpu` index).
- Cost follows the fleet: one query per field per chunk of `chunk_nodes` nodes (a regex on the node
  label, sent as a POST form so no URL grows with the fleet), never one per node.
- Problems are the source's, never the node's: Prometheus unreachable (the remaining queries are
  not tried), an HTTP error, a body that is not Prometheus' JSON, a partial answer (`warnings`), a
  point off the sweep grid. Each lands on the nodes of the query's chunk; `judge_device_histories`
  makes them `inconclusive` (never pass; a warn seen on what was read still stands, as in the judge).

`read_device_histories` does the I/O through a `Fetch` (urllib by default; no other dependency);
the PromQL, the parsing and the judging are pure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import http.client
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.errors import FleetvalError
from fleetval.records import Result, Verdict
from fleetval.trends.history import Sample
from fleetval.trends.judge import DEVICE_LOOKBACK, judge_device_trend, unreadable_device_history
from fleetval.trends.rules import DEVICE_RULES

DEVICE_FIELDS: Final = tuple(dict.fromkeys(f for rule in DEVICE_RULES for f in rule.fields))
WEEK: Final = dt.timedelta(days=7)
DAY: Final = dt.timedelta(days=1)
DEFAULT_NODE_LABEL: Final = "Hostname"
CHUNK_NODES: Final = 500
TIMEOUT_S: Final = 30.0
# Problems kept per node (the first few say what broke; a thousand copies say nothing more).
MAX_PROBLEMS: Final = 5
# How far a returned timestamp may sit from the sweep grid before the answer is not believed.
GRID_TOLERANCE_S: Final = 1.0


class PrometheusUnreadable(FleetvalError):
    """An answer that is not a usable range query result (HTTP error, not JSON, partial, off-grid)."""


class PrometheusUnreachable(PrometheusUnreadable):
    """No answer at all (connection refused, timeout, DNS): the other queries are not tried."""


# (url, form parameters) → the response body; raises PrometheusUnreadable / PrometheusUnreachable.
Fetch = Callable[[str, Mapping[str, str]], bytes]


@dataclass(frozen=True, slots=True)
class PrometheusSource:
    url: str
    node_label: str = DEFAULT_NODE_LABEL
    step: dt.timedelta = WEEK
    lookback: dt.timedelta = DAY
    sweeps: int = DEVICE_LOOKBACK
    chunk_nodes: int = CHUNK_NODES
    timeout_s: float = TIMEOUT_S

    def window(self, at: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
        """The first and last sweep instants read: `sweeps` points, `step` apart, the last at `at`."""
        return at - (self.sweeps - 1) * self.step, at


@dataclass(slots=True)
class DeviceHistories:
    """node → GPU → samples (sweep 0 is the window's first point), and what could not be read."""

    gpus: dict[str, dict[str, list[Sample]]] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    read: dict[str, Any] = field(default_factory=dict)  # what was asked: evidence on every verdict

    def add_problem(self, nodes: Iterable[str], problem: str) -> None:
        for node in nodes:
            mine = self.problems.setdefault(node, [])
            if problem not in mine and len(mine) < MAX_PROBLEMS:
                mine.append(problem)


# --- PromQL ---------------------------------------------------------------------------------------


def _regex_literal(text: str) -> str:
    """`text` matched literally by an RE2 regex (node names carry dots)."""
    return "".join(c if c.isalnum() or c in "-_" else "\\" + c for c in text)


def _string(text: str) -> str:
    """A PromQL double-quoted string holding `text`."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def device_promql(name: str, *, node_label: str, nodes: Sequence[str], lookback: dt.timedelta) -> str:
    """One dcgm-exporter field for `nodes`: per node and GPU, the last sample within `lookback`."""
    matcher = _string("|".join(_regex_literal(n) for n in nodes))
    window = f"{int(lookback.total_seconds())}s"
    return f"max by ({node_label}, UUID, gpu) (last_over_time({name}{{{node_label}=~{matcher}}}[{window}]))"


# --- parsing ---------------------------------------------------------------------------------------

# (node, GPU, [(sweep, value)]) for one series of a range query's answer.
Series = tuple[str, str, list[tuple[int, float]]]


def _sweep_of(ts: Any, *, start: float, step_s: float, sweeps: int) -> int:
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise PrometheusUnreadable(f"timestamp {ts!r} is not a number")
    k = round((ts - start) / step_s)
    if not 0 <= k < sweeps or abs(start + k * step_s - ts) > GRID_TOLERANCE_S:
        raise PrometheusUnreadable(f"timestamp {ts} is not one of the sweeps asked for")
    return k


def _value(text: Any) -> float:
    # Prometheus sends values as strings ("NaN", "+Inf" included); `Sample.usable` drops the odd ones.
    if not isinstance(text, str):
        raise PrometheusUnreadable(f"value {text!r} is not a string")
    try:
        return float(text)
    except ValueError:
        raise PrometheusUnreadable(f"value {text[:40]!r} is not a number") from None


def parse_range(
    body: bytes, *, node_label: str, start: float, step_s: float, sweeps: int
) -> tuple[list[Series], list[str]]:
    """A `/api/v1/query_range` answer → its series and the per-series problems (a series with no
    GPU label). Anything that is not a complete matrix answer raises PrometheusUnreadable."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise PrometheusUnreadable(f"not JSON: {body[:80]!r}") from None
    if not isinstance(doc, dict):
        raise PrometheusUnreadable("not a JSON object")
    if doc.get("status") != "success":
        raise PrometheusUnreadable(f"status {doc.get('status')!r}: {str(doc.get('error', ''))[:200]}")
    if doc.get("warnings"):  # a partial answer (a store down behind Thanos, a limit hit)
        raise PrometheusUnreadable(f"partial answer: {str(doc['warnings'])[:200]}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise PrometheusUnreadable("not a matrix result")
    if not isinstance(data.get("result"), list):
        raise PrometheusUnreadable("not a matrix result")
    out: list[Series] = []
    odd: list[str] = []
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise PrometheusUnreadable("a series without labels")
        values = item.get("values")
        if not isinstance(values, list):
            raise PrometheusUnreadable("a series without values")
        labels = item["metric"]
        node = labels.get(node_label)
        if not isinstance(node, str):
            raise PrometheusUnreadable(f"a series without the {node_label} label")
        gpu = labels.get("UUID") or (f"gpu{labels['gpu']}" if labels.get("gpu") else None)
        if not isinstance(gpu, str):
            odd.append(node)
            continue
        points = []
        for pair in values:
            if not isinstance(pair, list) or len(pair) != 2:
                raise PrometheusUnreadable(f"point {str(pair)[:40]} is not [time, value]")
            points.append((_sweep_of(pair[0], start=start, step_s=step_s, sweeps=sweeps), _value(pair[1])))
        out.append((node, gpu, points))
    return out, odd


# --- reading ---------------------------------------------------------------------------------------


def _error_of(body: bytes) -> str:
    try:
        doc = json.loads(body)
        return str(doc.get("error") or doc)[:200] if isinstance(doc, dict) else str(doc)[:200]
    except ValueError:
        return repr(body[:120])


def urllib_fetch(timeout_s: float = TIMEOUT_S) -> Fetch:
    """POST the form to the URL with urllib (the standard library: no client to install)."""

    def fetch(url: str, params: Mapping[str, str]) -> bytes:
        request = urllib.request.Request(
            url,
            data=urllib.parse.urlencode(params).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:  # an answer: the server is there, this query failed
            raise PrometheusUnreadable(f"HTTP {exc.code}: {_error_of(exc.read())}") from None
        except (urllib.error.URLError, OSError) as exc:  # refused, timed out, no such host
            raise PrometheusUnreachable(f"unreachable: {getattr(exc, 'reason', exc)}") from None
        except http.client.HTTPException as exc:  # the answer broke off
            raise PrometheusUnreadable(f"broken answer: {type(exc).__name__}: {exc}") from None

    return fetch


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for i in range(0, len(items), max(1, size)):
        yield items[i : i + size]


def read_device_histories(
    nodes: Iterable[str], *, source: PrometheusSource, at: dt.datetime, fetch: Fetch | None = None
) -> DeviceHistories:
    """Every node's GPU samples over the `source.sweeps` sweeps ending at `at` (see module doc)."""
    wanted = sorted(set(nodes))
    fetch = fetch or urllib_fetch(source.timeout_s)
    first, last = source.window(at)
    step_s = source.step.total_seconds()
    out = DeviceHistories(
        read={
            "source": "prometheus",
            "url": source.url,
            "node_label": source.node_label,
            "first_sweep_at": first.isoformat(),
            "last_sweep_at": last.isoformat(),
            "step_s": step_s,
            "lookback_s": source.lookback.total_seconds(),
        }
    )
    values: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
    queries = 0
    unreachable: str | None = None
    for chunk in _chunks(wanted, source.chunk_nodes):
        for name in DEVICE_FIELDS:
            if unreachable is not None:
                out.add_problem(chunk, f"Prometheus {unreachable}")
                break
            query = device_promql(name, node_label=source.node_label, nodes=chunk, lookback=source.lookback)
            params = {
                "query": query,
                "start": f"{first.timestamp():.3f}",
                "end": f"{last.timestamp():.3f}",
                "step": f"{step_s:.0f}s",
            }
            queries += 1
            try:
                series, odd = parse_range(
                    fetch(f"{source.url}/api/v1/query_range", params),
                    node_label=source.node_label,
                    start=first.timestamp(),
                    step_s=step_s,
                    sweeps=source.sweeps,
                )
            except PrometheusUnreachable as exc:
                unreachable = str(exc)
                out.add_problem(chunk, f"Prometheus {unreachable}")
                break
            except PrometheusUnreadable as exc:
                out.add_problem(chunk, f"{name}: {exc}")
                continue
            asked = set(chunk)
            out.add_problem([n for n in odd if n in asked], f"{name}: a series without UUID or gpu label")
            for node, gpu, points in series:
                if node not in asked:  # not ours (a regex is a regex): never judged on
                    continue
                per_sweep = values.setdefault(node, {}).setdefault(gpu, {})
                for sweep, value in points:
                    seen = per_sweep.setdefault(sweep, {})
                    seen[name] = max(value, seen.get(name, value))
    out.read["queries"] = queries
    out.gpus = {
        node: {gpu: [Sample(s, dict(v)) for s, v in sorted(sweeps.items())] for gpu, sweeps in gpus.items()}
        for node, gpus in values.items()
    }
    return out


# --- judging ---------------------------------------------------------------------------------------


def judge_device_histories(nodes: Iterable[str], histories: DeviceHistories) -> list[Verdict]:
    """D-DEV-TREND-01 for each node from what was read. A node whose read had a problem is
    `inconclusive` unless what was read warns; a node with no series at all is `inconclusive`
    with the label it was looked up by (a relabelled or hostname-less exporter)."""
    verdicts = []
    read = histories.read
    for node in sorted(set(nodes)):
        problems = histories.problems.get(node, [])
        gpus = histories.gpus.get(node, {})
        verdict = judge_device_trend(node, gpus)
        if problems and verdict.result is not Result.WARN:
            verdicts.append(
                unreadable_device_history(
                    node,
                    f"Prometheus: {problems[0]}",
                    {"read": read, "read_problems": problems, "on_what_was_read": verdict.result.value},
                )
            )
        elif not gpus:
            verdicts.append(
                unreadable_device_history(
                    node,
                    f"no dcgm-exporter series with {read.get('node_label')}={node!r} in Prometheus",
                    {"read": read},
                )
            )
        else:
            evidence = {**verdict.evidence, "read": read}
            if problems:
                evidence["read_problems"] = problems
            verdicts.append(dataclasses.replace(verdict, evidence=evidence))
    return verdicts
