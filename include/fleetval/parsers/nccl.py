"""nccl-tests stdout (and the NCCL_DEBUG=INFO lines mixed into it) → `NcclRun`.

A current build (nccl-tests 2.20.0, NVIDIA/dgx-spark-playbooks PR #103), abbreviated::

    # nccl-tests version 2.20.0 (b4d5bee) nccl-headers=23102 nccl-library=23102
    # Collective test starting: all_reduce_perf
    # nThread 1 nGpus 1 minBytes 8192 maxBytes 8589934592 step: 2(factor) warmup iters: 10 ...
    #  Rank  0 Group  0 Pid 1666603 on spark-d708 device  0 [000f:01:00] NVIDIA GB10
    #       size         count      type   redop    root     time   algbw   busbw  #wrong ...
            8192          2048     float     sum      -1    35.15    0.23    0.23       0 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 70.742

Older builds differ (NVIDIA/nccl-tests #44, NVIDIA/nccl #583): no `redop`/`root` columns, an
`error` column holding the max numeric error (`0e+00`) instead of `#wrong`, header lines without
`#`. Launchers prefix lines (`0: ` srun, `[1,0]<stdout>:` OpenMPI, `[0] ` mpirun tag-output) and
may inject a prefix mid-line. NCCL_DEBUG=INFO lines (NCCL 2.16-2.25 in the fixtures) carry the
version, ranks/nodes, network (`Using network IB|Socket`, `NET/IB : Using [0]mlx5_0:1/RoCE`),
channel transports (`via NET/IB/3`, `via P2P/direct pointer/read`, `via SHM/direct/direct`), NVLS,
and failures (`NET/IB : Got completion from peer ... with error 4` / `... with status=12`,
bootstrap `-> 2` chains). Harness failures: `<host>: Test NCCL failure common.cu:345 '...'`,
`<host>: Test CUDA failure ...`, `<host>: Test timeout (60s) common.cu:NNN`.

The parser is pure and total over what it recognises: a truncated table or a harness failure is
a `NcclRun` with `complete=False` and `errors`, not an exception; only input with nothing
recognisable (empty, garbage) raises `ParseError`.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from typing import Any, Final

from fleetval.errors import ParseError

TOOL: Final = "nccl-tests"

#: busbw = algbw × factor, per nccl-tests' `*GetBw` (src/*.cu) and doc/PERFORMANCE.md.
_FACTORS: Final[dict[str, str]] = {
    "all_reduce": "2(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "all_gather": "(n-1)/n",
    "alltoall": "(n-1)/n",
    "gather": "(n-1)/n",
    "scatter": "(n-1)/n",
    "broadcast": "1",
    "reduce": "1",
    "sendrecv": "1",
    "hypercube": "1",  # its algbw already counts the n-1 peers
}
COLLECTIVES: Final = tuple(_FACTORS)

TRANSPORTS: Final = ("IB", "RoCE", "Socket", "P2P", "SHM", "NVLS", "CollNet")

_ALIASES: Final = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "all_to_all": "alltoall",
    "all2all": "alltoall",
    "send_recv": "sendrecv",
}


def normalize_collective(name: str) -> str:
    """`AllReduce`, `all_reduce_perf`, `allreduce` → `all_reduce`; unknown names raise ValueError."""
    key = name.strip().lower().removesuffix("_perf").removesuffix("_mpi")
    key = _ALIASES.get(key.replace("-", "_"), key.replace("-", "_"))
    if key not in _FACTORS:
        raise ValueError(f"unknown collective {name!r}; known: {', '.join(COLLECTIVES)}")
    return key


def busbw_factor(collective: str, nranks: int, *, in_network: bool = False) -> float:
    """The factor nccl-tests applies to algbw for `collective` over `nranks` ranks.

    `in_network=True` gives PERFORMANCE.md's in-network-reduction all-reduce factor (n-1)/(n+1);
    nccl-tests itself always prints the ring-equivalent 2(n-1)/n, which NVLS/CollNet can exceed.
    """
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    coll = normalize_collective(collective)
    n = float(nranks)
    if coll == "all_reduce":
        return (n - 1) / (n + 1) if in_network else 2 * (n - 1) / n
    if _FACTORS[coll] == "(n-1)/n":
        return (n - 1) / n
    return 1.0


def bus_bandwidth(collective: str, algbw: float, nranks: int) -> float:
    """busbw from algbw (both GB/s): all-reduce, 8 ranks, algbw 12 → 21."""
    return algbw * busbw_factor(collective, nranks)


@dataclass(frozen=True, slots=True)
class NcclRow:
    """One message size. Times in µs, bandwidths in GB/s (10^9 B/s), as nccl-tests prints them.

    `wrong_*` is the `#wrong` element count (None for `N/A` or in the old format); the old
    format's max numeric error goes to `error_*` instead.
    """

    size: int
    count: int
    type: str
    redop: str | None
    root: int | None
    time_oop: float | None
    algbw_oop: float | None
    busbw_oop: float | None
    wrong_oop: int | None
    time_ip: float | None
    algbw_ip: float | None
    busbw_ip: float | None
    wrong_ip: int | None
    error_oop: float | None = None
    error_ip: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "count": self.count,
            "type": self.type,
            "time_oop": self.time_oop,
            "algbw_oop": self.algbw_oop,
            "busbw_oop": self.busbw_oop,
            "wrong_oop": self.wrong_oop,
            "time_ip": self.time_ip,
            "algbw_ip": self.algbw_ip,
            "busbw_ip": self.busbw_ip,
            "wrong_ip": self.wrong_ip,
            "redop": self.redop,
            "root": self.root,
            "error_oop": self.error_oop,
            "error_ip": self.error_ip,
        }


@dataclass(frozen=True, slots=True)
class NcclError:
    """A failure seen in the output. `kind`: ib_completion, ib_async, bootstrap, transport,
    timeout, cuda, nccl, harness."""

    kind: str
    message: str
    host: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "host": self.host, "message": self.message}


@dataclass(frozen=True, slots=True)
class NcclDevice:
    rank: int
    host: str
    device: int
    bus_id: str
    name: str

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "host": self.host,
            "device": self.device,
            "bus_id": self.bus_id,
            "name": self.name,
        }


@dataclass(frozen=True, slots=True)
class NcclRun:
    """Everything one nccl-tests invocation's output says. Missing facts are None, never guessed;
    facts derived from the numbers rather than read are named in `inferred`."""

    collective: str | None
    nranks: int | None
    nnodes: int | None
    nccl_version: str | None
    rows: tuple[NcclRow, ...]
    avg_busbw: float | None
    transports: tuple[str, ...]
    errors: tuple[NcclError, ...]
    complete: bool
    oob_values: int | None = None
    oob_failed: bool | None = None
    tests_version: str | None = None
    cuda_version: str | None = None
    networks: tuple[str, ...] = ()
    net_devices: tuple[str, ...] = ()
    nccl_info_seen: bool = False
    in_network_reduction: bool = False
    harness_failures: tuple[NcclError, ...] = ()
    warnings: tuple[str, ...] = ()
    nccl_env: dict[str, str] = field(default_factory=dict)
    hosts: tuple[str, ...] = ()
    devices: tuple[NcclDevice, ...] = ()
    params: dict[str, int] = field(default_factory=dict)
    interrupted_at_size: int | None = None
    inferred: tuple[str, ...] = ()

    @property
    def socket_used(self) -> bool:
        return "Socket" in self.transports

    def to_json(self) -> dict[str, Any]:
        return {
            "collective": self.collective,
            "nranks": self.nranks,
            "nccl_version": self.nccl_version,
            "rows": [r.to_json() for r in self.rows],
            "avg_busbw": self.avg_busbw,
            "transports": list(self.transports),
            "errors": [e.to_json() for e in self.errors],
            "nnodes": self.nnodes,
            "complete": self.complete,
            "oob_values": self.oob_values,
            "oob_failed": self.oob_failed,
            "tests_version": self.tests_version,
            "cuda_version": self.cuda_version,
            "networks": list(self.networks),
            "net_devices": list(self.net_devices),
            "in_network_reduction": self.in_network_reduction,
            "harness_failures": [e.to_json() for e in self.harness_failures],
            "warnings": list(self.warnings),
            "nccl_env": dict(self.nccl_env),
            "hosts": list(self.hosts),
            "devices": [d.to_json() for d in self.devices],
            "params": dict(self.params),
            "interrupted_at_size": self.interrupted_at_size,
            "inferred": list(self.inferred),
        }


# --- launcher prefixes -------------------------------------------------------------------------

_OMPI_TAG = re.compile(r"\[\d+,\d+\]<(?:stdout|stderr)>:")
_SRUN_HEAD = re.compile(r"^\s*(\d{1,5}):\s")
_MPICH_HEAD = re.compile(r"^\[(\d{1,5})\]\s?")
_SRUN_MID = re.compile(r"(?<=\s)\d{1,5}: (?=\s*\S)")
_MPICH_MID = re.compile(r"\s\[\d{1,5}\]\s")
_TID_END = re.compile(r":\d+$")
# A row whose parameters were printed and whose results never came: the next message lands on
# the same line (nccl-tests prints the parameters before timing, stdout is line-buffered).
_GLUED_ROW = re.compile(r"^(\s*\d+\s+\d+\s+[A-Za-z][A-Za-z0-9_]*\s+[a-z]+\s+-?\d+)(?=[A-Za-z])")


def _split_mpich(text: str) -> list[str]:
    """Split at mid-line `[N]` tags, except the device field of `host:pid:tid [N] NCCL ...`."""
    pieces: list[str] = []
    start = 0
    for m in _MPICH_MID.finditer(text):
        if _TID_END.search(text[: m.start()]):
            continue
        pieces.append(text[start : m.start()])
        start = m.end()
    pieces.append(text[start:])
    return pieces


def _segments(line: str) -> list[str]:
    """Split one physical line into logical lines, dropping launcher tags wherever they occur."""
    parts = _OMPI_TAG.split(line)
    out: list[str] = []
    for part in parts:
        m = _SRUN_HEAD.match(part)
        if m:
            out.extend(_SRUN_MID.split(part[m.end() :]))
            continue
        m = _MPICH_HEAD.match(part)
        if m:
            out.extend(_split_mpich(part[m.end() :]))
            continue
        out.append(part)
    result: list[str] = []
    for seg in out:
        g = _GLUED_ROW.match(seg)
        if g:
            result.extend([g.group(1), seg[g.end() :]])
        else:
            result.append(seg)
    return [s.rstrip("\r\n") for s in result if s.strip()]


# --- line patterns -----------------------------------------------------------------------------

_TESTS_VERSION = re.compile(r"nccl-tests version (\S+)(?: \((\w+)\))?(?:.*?nccl-library=(\d+))?")
_COLL_START = re.compile(r"Collective test starting:\s*(\w+?)(?:_perf)?\b")
_PERF_BINARY = re.compile(r"\b([a-z_2]+)_perf(?:_mpi)?\b")
_PARAMS = re.compile(r"nThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_PARAM_KV = re.compile(r"(warmup iters|agg iters|iters|validation|graph|unalign):\s*(\d+)")
_RANK_LINE = re.compile(
    r"^\s*#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*)$"
)
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)(?:\+cuda([\d.]+))?")
_NCCL_LINE = re.compile(
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+)\s+(?:\[\d+\]\s+)?(?:(?P<src>\S+:\d+)\s+)?"
    r"NCCL (?P<level>INFO|WARN|ERROR|TRACE) ?(?P<msg>.*)$"
)
_ENV_SET = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*?)\.?\s*$")
_ENV_ASSIGN = re.compile(r"\b(NCCL_[A-Z0-9_]+)=(\S+)")
_NRANKS = re.compile(r"\bn[Rr]anks[ =](\d+)")
_NNODES = re.compile(r"\bnNodes[ =](\d+)")
_USING_NETWORK = re.compile(r"Using network (.+?)\s*$")
_NET_IB_DEVS = re.compile(r"NET/IB\s*:\s*Using\s+(.*?)(?:;\s*OOB.*)?$")
_IB_DEV = re.compile(r"\[\d+\](\S+?)/(IB|RoCE)\b")
_VIA = re.compile(r"\bvia\s+(NET/([^/]+)|P2P|SHM|COLLNET|CollNet|NVLS)", re.IGNORECASE)
_NVLS_CHANNELS = re.compile(r"(\d+) nvls channels")
_NVLS_MARK = re.compile(r"NVLS multicast support is available|NVLS Head")
_COLLNET_MARK = re.compile(
    r"coll plugin|Connected CollNet|CollNet (?:channels? )?(?:enabled|Chains)|SHARP", re.IGNORECASE
)
_IB_COMPLETION = re.compile(r"Got completion from peer")
_IB_ASYNC = re.compile(r"async fatal event|Got async event.*(?:port error|catastrophic|fatal)", re.IGNORECASE)
_PROPAGATION = re.compile(r"(?P<file>[\w/]+\.cc):(?P<line>\d+) -> (?P<code>[1-9]\d*)\b")
_FATAL_CHAIN = re.compile(r"bootstrap|init|group|proxy|transport/|socket|enqueue|net\.cc|collectives")
_TIMEOUT_WORDS = re.compile(r"time(?:d)? ?out", re.IGNORECASE)
_HARNESS = re.compile(r"(?P<host>\S+): Test (?P<what>NCCL|CUDA) failure (?P<loc>\S+) '(?P<msg>.*?)'?\s*$")
_HARNESS_TRACE = re.compile(r"^\s*\.\. \S+(?: pid \d+)?: Test failure \S+")
_TEST_TIMEOUT = re.compile(r"(?P<host>\S+): Test timeout \((?P<secs>\d+)s\) (?P<loc>\S+)")
_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout|Some NCCL operations have failed or timed out"
)
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([-+0-9.eE]+|-?nan|-?inf)")
_SIZE_HEADER_WORDS = frozenset({"size", "count", "type", "algbw", "busbw"})

_ROW_NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
_TYPE_TOKEN = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_MAX_ERRORS = 200
_MAX_WARNINGS = 50


def _num(tok: str) -> float | None:
    if tok.upper() == "N/A" or not _ROW_NUMBER.match(tok):
        return None
    v = float(tok)
    return v if math.isfinite(v) else None


def _wrong(tok: str) -> int | None:
    if not re.fullmatch(r"-?\d+", tok):
        return None
    v = int(tok)
    return v if v >= 0 else None  # -1 is "not checked" in builds that print it raw


def _row_from_tokens(tokens: list[str], wrong_style: str | None) -> NcclRow | None:
    """A data row, or None. Column layout is taken from the token count (11/12/13)."""
    if len(tokens) not in (11, 12, 13):
        return None
    if not (tokens[0].isdigit() and tokens[1].isdigit() and _TYPE_TOKEN.match(tokens[2])):
        return None
    rest = tokens[3:]
    redop: str | None = None
    root: int | None = None
    if len(rest) == 10:
        if not (rest[0].isalpha() and re.fullmatch(r"-?\d+", rest[1])):
            return None
        redop, root, rest = rest[0], int(rest[1]), rest[2:]
    elif len(rest) == 9:
        if not rest[0].isalpha():
            return None
        redop, rest = rest[0], rest[1:]
    for i in (0, 1, 2, 4, 5, 6):
        if _num(rest[i]) is None and rest[i].upper() != "N/A":
            return None
    style = wrong_style
    if style is None:  # no header seen: `0e+00` is the old max-error column, `0` a #wrong count
        style = "error" if any(c in rest[3] for c in ".eE") else "wrong"
    wrong_oop = wrong_ip = None
    error_oop = error_ip = None
    if style == "error":
        error_oop, error_ip = _num(rest[3]), _num(rest[7])
    else:
        wrong_oop, wrong_ip = _wrong(rest[3]), _wrong(rest[7])
        if (wrong_oop is None and rest[3].upper() != "N/A" and _num(rest[3]) is None) or (
            wrong_ip is None and rest[7].upper() != "N/A" and _num(rest[7]) is None
        ):
            return None
    return NcclRow(
        size=int(tokens[0]),
        count=int(tokens[1]),
        type=tokens[2],
        redop=redop,
        root=root,
        time_oop=_num(rest[0]),
        algbw_oop=_num(rest[1]),
        busbw_oop=_num(rest[2]),
        wrong_oop=wrong_oop,
        time_ip=_num(rest[4]),
        algbw_ip=_num(rest[5]),
        busbw_ip=_num(rest[6]),
        wrong_ip=wrong_ip,
        error_oop=error_oop,
        error_ip=error_ip,
    )


def _is_row_start(tokens: list[str]) -> bool:
    return (
        len(tokens) >= 3
        and tokens[0].isdigit()
        and tokens[1].isdigit()
        and bool(_TYPE_TOKEN.match(tokens[2]))
    )


def _decode_nccl_code(code: int) -> str:
    # NCCL_VERSION_CODE: X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before.
    if code >= 20900:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


class _State:
    """Mutable accumulator for one pass over the text."""

    def __init__(self) -> None:
        self.rows: list[NcclRow] = []
        self.wrong_style: str | None = None
        self.pending: list[str] | None = None
        self.interrupted_at: int | None = None
        self.collective: str | None = None
        self.collective_from_binary: str | None = None
        self.tests_version: str | None = None
        self.library_code: int | None = None
        self.nccl_version: str | None = None
        self.cuda_version: str | None = None
        self.params: dict[str, int] = {}
        self.devices: dict[int, NcclDevice] = {}
        self.info_nranks: int | None = None
        self.info_nnodes: int | None = None
        self.info_hosts: list[str] = []
        self.networks: list[str] = []
        self.net_devices: list[str] = []
        self.link_layers: set[str] = set()
        self.via: set[str] = set()
        self.nvls_channels: int | None = None
        self.nvls_mark = False
        self.collnet = False
        self.errors: list[NcclError] = []
        self.error_keys: set[tuple[str, str | None, str]] = set()
        self.harness: list[NcclError] = []
        self.warnings: list[str] = []
        self.env: dict[str, str] = {}
        self.oob_values: int | None = None
        self.oob_failed: bool | None = None
        self.avg_busbw: float | None = None
        self.footer_seen = False
        self.header_seen = False
        self.info_seen = False
        self.debug_lines = False

    def add_error(self, err: NcclError, key: str | None = None) -> None:
        k = (err.kind, err.host, key if key is not None else err.message)
        if k in self.error_keys or len(self.errors) >= _MAX_ERRORS:
            return
        self.error_keys.add(k)
        self.errors.append(err)

    def close_pending(self) -> None:
        if self.pending is not None:
            self.interrupted_at = int(self.pending[0])
            self.pending = None


def _handle_nccl_line(st: _State, m: re.Match[str]) -> None:
    st.info_seen = True
    st.debug_lines = True
    host, level, msg = m.group("host"), m.group("level"), m.group("msg")
    src = m.group("src") or ""
    if host not in st.info_hosts:
        st.info_hosts.append(host)
    if e := _ENV_SET.search(msg):
        st.env[e.group(1)] = e.group(2).strip()
    if v := _NCCL_VERSION.search(msg):
        st.nccl_version, st.cuda_version = v.group(1), v.group(2)
    if n := _NRANKS.search(msg):
        st.info_nranks = max(st.info_nranks or 0, int(n.group(1)))
    if n := _NNODES.search(msg):
        st.info_nnodes = max(st.info_nnodes or 0, int(n.group(1)))
    if u := _USING_NETWORK.search(msg):
        name = u.group(1).strip()
        if name not in st.networks:
            st.networks.append(name)
    if d := _NET_IB_DEVS.search(msg):
        for dev, layer in _IB_DEV.findall(d.group(1)):
            st.link_layers.add(layer)
            if f"{dev}/{layer}" not in st.net_devices:
                st.net_devices.append(f"{dev}/{layer}")
    for via in _VIA.finditer(msg):
        if via.group(2):
            st.via.add("NET:" + via.group(2).strip())
        else:
            st.via.add(via.group(1).upper())
    if c := _NVLS_CHANNELS.search(msg):
        st.nvls_channels = max(st.nvls_channels or 0, int(c.group(1)))
    if _NVLS_MARK.search(msg):
        st.nvls_mark = True
    if _COLLNET_MARK.search(msg) and not re.search(r"COLLNET_ENABLE set by environment to 0", msg):
        st.collnet = True
    if level in ("WARN", "ERROR"):
        full = f"{src} {msg}".strip()
        if _IB_COMPLETION.search(msg):
            st.add_error(NcclError("ib_completion", full, host))
        elif _IB_ASYNC.search(msg):
            st.add_error(NcclError("ib_async", full, host))
        elif re.search(r"socketStartConnect|Connect to .* failed|bootstrap", msg, re.IGNORECASE):
            st.add_error(NcclError("bootstrap", full, host))
        elif _TIMEOUT_WORDS.search(msg):
            st.add_error(NcclError("timeout", full, host))
        elif re.search(r"Cuda failure|CUDA error", msg, re.IGNORECASE):
            st.add_error(NcclError("cuda", full, host))
        elif re.search(r"\bfail(?:ed|ure)?\b|\berror\b|abort", msg, re.IGNORECASE):
            st.add_error(NcclError("nccl", full, host))
        elif len(st.warnings) < _MAX_WARNINGS:
            st.warnings.append(full)
        return
    # `file.cc:NNN -> N`: an ncclResult_t error code being returned up the stack. Only chains
    # through the communicator's own paths count: topology probing (graph/*, nvmlwrap) returns
    # codes that NCCL recovers from in healthy runs.
    if p := _PROPAGATION.search(msg):
        file = p.group("file")
        if "(Operation now in progress)" in msg or not _FATAL_CHAIN.search(file):
            return  # nonblocking-connect retry noise; a real failure continues up the chain
        if re.search(r"bootstrap|socket", file):
            kind = "bootstrap"
        elif re.search(r"transport|proxy|net", file):
            kind = "transport"
        else:
            kind = "nccl"
        st.add_error(
            NcclError(kind, f"{file}:{p.group('line')} -> {p.group('code')}", host), key="propagation"
        )


def _note_row_prefix(st: _State, prefix: str) -> None:
    """Text before a harness message on the same line is the row it interrupted, if any."""
    tokens = prefix.split()
    if _is_row_start(tokens):
        st.interrupted_at = int(tokens[0])


def _handle_segment(st: _State, seg: str) -> None:
    text = seg.strip()
    tokens = text.lstrip("#").split()
    # -- harness failures first: they may follow a glued partial row
    if h := _HARNESS.search(seg):
        st.close_pending()
        _note_row_prefix(st, seg[: h.start()])
        err = NcclError(
            "harness", f"Test {h.group('what')} failure {h.group('loc')} '{h.group('msg')}'", h.group("host")
        )
        if len(st.harness) < _MAX_ERRORS:
            st.harness.append(err)
        st.add_error(err)
        return
    if t := _TEST_TIMEOUT.search(seg):
        st.close_pending()
        _note_row_prefix(st, seg[: t.start()])
        st.add_error(
            NcclError("timeout", f"Test timeout ({t.group('secs')}s) {t.group('loc')}", t.group("host"))
        )
        return
    if _HARNESS_TRACE.match(seg):
        return
    if _WATCHDOG.search(seg):
        st.add_error(NcclError("timeout", text))
        return
    if m := _NCCL_LINE.search(seg):
        _handle_nccl_line(st, m)
        return
    # -- headers, devices, footers
    if v := _TESTS_VERSION.search(seg):
        st.tests_version = v.group(1) + (f" ({v.group(2)})" if v.group(2) else "")
        if v.group(3):
            st.library_code = int(v.group(3))
        st.header_seen = True
        return
    if c := _COLL_START.search(seg):
        st.collective = c.group(1)
        st.header_seen = True
        return
    if p := _PARAMS.search(seg):
        st.params.update(
            nThread=int(p.group(1)), nGpus=int(p.group(2)), minBytes=int(p.group(3)), maxBytes=int(p.group(4))
        )
        for key, val in _PARAM_KV.findall(seg):
            st.params[key.replace(" ", "_")] = int(val)
        st.header_seen = True
        return
    if r := _RANK_LINE.match(seg):
        rank = int(r.group(1))
        st.devices[rank] = NcclDevice(rank, r.group(2), int(r.group(3)), r.group(4), r.group(5).strip())
        st.header_seen = True
        return
    if o := _OOB.search(seg):
        st.close_pending()
        st.oob_values, st.oob_failed = int(o.group(1)), o.group(2) == "FAILED"
        st.footer_seen = True
        return
    if a := _AVG.search(seg):
        st.close_pending()
        st.avg_busbw = _num(a.group(1))
        st.footer_seen = True
        return
    if n := _NCCL_VERSION.search(seg):  # bare `NCCL version 2.16.5+cuda11.8` (older NCCL)
        st.nccl_version, st.cuda_version = n.group(1), n.group(2)
        st.info_seen = True
        return
    if {t.lower() for t in tokens} >= _SIZE_HEADER_WORDS:
        st.header_seen = True
        lowered = [t.lower() for t in tokens]
        st.wrong_style = (
            "wrong"
            if "#wrong" in lowered or "wrong" in lowered
            else ("error" if "error" in lowered else None)
        )
        return
    if "_perf" in seg:
        for key, val in _ENV_ASSIGN.findall(seg):
            st.env[key] = val
        if b := _PERF_BINARY.search(seg):
            st.collective_from_binary = st.collective_from_binary or b.group(1)
    # -- data rows (possibly split across segments by an injected prefix)
    if not tokens or text.startswith("#"):
        return
    if st.pending is not None:
        joined = st.pending + tokens
        row = _row_from_tokens(joined, st.wrong_style)
        if row is not None:
            st.rows.append(row)
            st.pending = None
            return
        st.close_pending()
    row = _row_from_tokens(tokens, st.wrong_style)
    if row is not None:
        st.rows.append(row)
    elif _is_row_start(tokens) and len(tokens) < 11:
        st.pending = tokens


def _infer_all_reduce_ranks(rows: list[NcclRow]) -> set[int] | None:
    """Rank counts consistent with busbw/algbw = 2(n-1)/n on every well-resolved row, given the
    two-decimal printing; None when no row is precise enough or the ratio is not all-reduce's."""
    feasible: set[int] | None = None
    for r in rows:
        a, b = r.algbw_oop, r.busbw_oop
        if a is None or b is None or a < 5.0:
            continue
        lo, hi = (b - 0.005) / (a + 0.005), (b + 0.005) / (a - 0.005)
        if hi <= 1.0 or lo >= 2.0:
            return set()
        n_lo = 2 / (2 - lo) if lo > 1.0 else 1.0
        n_hi = 2 / (2 - hi) if hi < 2.0 else 1e9
        cand = set(range(max(2, math.ceil(n_lo - 1e-9)), min(4096, math.floor(n_hi + 1e-9)) + 1))
        feasible = cand if feasible is None else feasible & cand
    return feasible


def _infer_collective(st: _State, nranks: int | None) -> tuple[str | None, int | None, list[str]]:
    inferred: list[str] = []
    rows = st.rows
    if not rows:
        return None, nranks, inferred
    ratios = [r.busbw_oop / r.algbw_oop for r in rows if r.algbw_oop and r.busbw_oop and r.algbw_oop >= 5.0]
    if not ratios:
        return None, nranks, inferred
    ratio = statistics.median(ratios)
    redops = {r.redop for r in rows}
    roots = {r.root for r in rows}
    collective: str | None = None
    if ratio > 1.02 and "none" not in redops:
        collective = "all_reduce"  # the only collective whose factor exceeds 1
        if nranks is None:
            feasible = _infer_all_reduce_ranks(rows)
            if feasible is not None and len(feasible) == 1:
                nranks = feasible.pop()
                inferred.append("nranks")
    elif abs(ratio - 1.0) < 0.02 and roots and all(r is not None and r >= 0 for r in roots):
        collective = "broadcast" if redops == {"none"} else "reduce"
    elif nranks and nranks > 2 and abs(ratio - (nranks - 1) / nranks) < 0.02 and redops - {"none", None}:
        collective = "reduce_scatter"
    if collective is not None:
        inferred.append("collective")
    return collective, nranks, inferred


def _transports(st: _State) -> tuple[tuple[str, ...], bool]:
    found: set[str] = set()
    ib_family = [n for n in st.networks if n.upper().startswith("IB")]
    via_nets = {v[4:] for v in st.via if v.startswith("NET:")}
    if ib_family or any(v.upper().startswith("IB") for v in via_nets):
        # NCCL calls its verbs transport "IB" whatever the link layer; the device list tells.
        if st.link_layers:
            found |= st.link_layers
        else:
            found.add("IB")
    if "Socket" in st.networks or "Socket" in via_nets:
        found.add("Socket")
    for name in ("P2P", "SHM"):
        if name in st.via:
            found.add(name)
    nvls = st.nvls_channels > 0 if st.nvls_channels is not None else st.nvls_mark
    if nvls or "NVLS" in st.via:
        found.add("NVLS")
    if st.collnet or "COLLNET" in st.via:
        found.add("CollNet")
    ordered = tuple(t for t in TRANSPORTS if t in found)
    return ordered, ("NVLS" in found or "CollNet" in found)


def parse_nccl(text: str) -> NcclRun:
    """Parse nccl-tests stdout (with or without NCCL_DEBUG=INFO lines) into an `NcclRun`."""
    if not text or not text.strip():
        raise ParseError(TOOL, "empty output")
    st = _State()
    for line in text.splitlines():
        for seg in _segments(line):
            _handle_segment(st, seg)
    st.close_pending()

    recognised = st.rows or st.header_seen or st.info_seen or st.footer_seen or st.errors
    if not recognised:
        raise ParseError(TOOL, "no nccl-tests table, header, footer or NCCL log line found", text[:200])

    inferred: list[str] = []
    nranks: int | None = len(st.devices) if st.devices else st.info_nranks
    hosts: list[str] = []
    for dev in sorted(st.devices.values(), key=lambda d: d.rank):
        if dev.host not in hosts:
            hosts.append(dev.host)
    nnodes: int | None = len(hosts) if hosts else st.info_nnodes

    collective: str | None = None
    for raw in (st.collective, st.collective_from_binary):
        if raw:
            try:
                collective = normalize_collective(raw)
                break
            except ValueError:
                continue
    if collective is None:
        collective, nranks, inferred = _infer_collective(st, nranks)

    nccl_version = st.nccl_version
    if nccl_version is None and st.library_code is not None:
        nccl_version = _decode_nccl_code(st.library_code)

    transports, in_network = _transports(st)
    stopped = any(e.kind in ("harness", "timeout") for e in st.errors)
    complete = st.footer_seen and not stopped and st.interrupted_at is None and bool(st.rows)
    return NcclRun(
        collective=collective,
        nranks=nranks,
        nnodes=nnodes,
        nccl_version=nccl_version,
        rows=tuple(st.rows),
        avg_busbw=st.avg_busbw,
        transports=transports,
        errors=tuple(st.errors),
        complete=complete,
        oob_values=st.oob_values,
        oob_failed=st.oob_failed,
        tests_version=st.tests_version,
        cuda_version=st.cuda_version,
        networks=tuple(st.networks),
        net_devices=tuple(st.net_devices),
        nccl_info_seen=st.debug_lines,
        in_network_reduction=in_network,
        harness_failures=tuple(st.harness),
        warnings=tuple(st.warnings),
        nccl_env=st.env,
        hosts=tuple(hosts or st.info_hosts),
        devices=tuple(sorted(st.devices.values(), key=lambda d: d.rank)),
        params=st.params,
        interrupted_at_size=st.interrupted_at,
        inferred=tuple(inferred),
    )
