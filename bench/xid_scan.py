"""Bench: `scan_xid_file` vs `grep -c 'NVRM: Xid'` on the same multi-GB kernel log.

For each mix, generates a syslog-format kern.log (default 1 GiB) in a temp dir: realistic kernel
noise (network, storage, audit, mlx5, cgroup), non-Xid NVRM driver chatter, and Xid messages in
the real formats of tests/fixtures/xid (pid/name, `pid='<unknown>'`, legacy `Channel ID`, MIG
`GPU-I:`, 94/95 `RST:`, NVLink5 149/154, `caused by previous Xid`), multi-line "fallen off the
bus" messages and a few truncated Xid lines. Mixes (share of lines):

    sparse   1 Xid message per 20,000 lines, 0.05 % NVRM chatter (a healthy node: ~400 Xid lines/GiB)
    storm    5 % Xid messages, 5 % NVRM chatter (an Xid storm)
    failing  0.5 % Xid messages, 1 % NVRM chatter (a failing node's log: the headline)

Both tools read the same file from the warm page cache (one untimed read first). Each of
`--pairs` samples times both, in alternating order (grep first, then scan first, ...); each
checks they count the same Xid lines and that the count is what was generated. Every sample is
printed with the load average (the machine may be shared), then the medians and the median of
the per-pair ratios scan/grep. The last line is the failing mix's median ratio. Target: <= 3.

    .venv/bin/python bench/xid_scan.py                      # all three mixes, 1 GiB each
    .venv/bin/python bench/xid_scan.py --size 256M --mixes failing
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fleetval.xid.parser import scan_xid_file
from fleetval.xid.simulated import MESSAGES

NOISE = (
    "IPv6: ADDRCONF(NETDEV_CHANGE): eth0: link becomes ready",
    'audit: type=1400 audit(1733139527.123:4567): apparmor="DENIED" operation="open" '
    'profile="snap.lxd.daemon" name="/proc/1/environ" pid=23456 comm="lxd" requested_mask="r"',
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Opts: (null). Quota mode: none.",
    "mlx5_core 0000:0c:00.0: mlx5_port_module_event:1156:(pid 0): Port module event: module 0, Cable plugged",
    "mlx5_core 0000:0c:00.0 ibp12s0: Link up",
    "cali7a1b2c3d4e5: Link UP",
    "IPVS: rr: UDP 10.96.0.10:53 - no destination available",
    "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
    "kauditd_printk_skb: 12 callbacks suppressed",
    "TCP: request_sock_TCP: Possible SYN flooding on port 10250. Sending cookies.  Check SNMP counters.",
    "Memory cgroup out of memory: Killed process 812345 (python3) total-vm:81234567kB, anon-rss:7123456kB",
    "oom_reaper: reaped process 812345 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB",
    "veth4f2a1b3: entered promiscuous mode",
    "cni0: port 3(veth4f2a1b3) entered forwarding state",
    "nvme nvme0: I/O 123 QID 7 timeout, completion polled",
    "xfs filesystem being mounted at /var/lib/kubelet/pods/1f2e3d4c/volumes supports timestamps until 2038",
    "INFO: task cache_mgr_event:620917 blocked for more than 120 seconds.",
    "perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate to 79800",
    "nvidia-nvswitch2: open (major=510)",
)
# Driver lines that are not Xids: the scanner pays ~1 µs for each line holding "NVRM".
NVRM_CHATTER = (
    "NVRM: GPU Board Serial Number: 1652822012345",
    "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  (dvs-builder@U22)",
    "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
    "NVRM: GPU 0000:0a:00.0: rm_init_adapter failed, device minor number 5",
    "NVRM: nvAssertOkFailedNoLog: Assertion failed: Failure: Generic Error [NV_ERR_GENERIC] (0x0000FFFF)",
)
XID_CODES = (13, 31, 45, 48, 63, 74, 79, 94, 95, 109, 145, 149, 154)
PCIS = tuple(f"0000:{bus}:00" for bus in ("1b", "3b", "5d", "61", "9a", "ba", "cb", "db"))
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def xid_lines(rng: random.Random) -> tuple[list[str], int]:
    """One Xid-ish message as kernel message bodies, and how many of them contain 'NVRM: Xid'."""
    pci = rng.choice(PCIS)
    code = rng.choice(XID_CODES)
    r = rng.random()
    if r < 0.05:  # multi-line fell-off-the-bus, no Xid number
        return [
            f"NVRM: The NVIDIA GPU {pci}.0",
            "NVRM: (PCI ID: 10de:2330) installed in this system has",
            "NVRM: fallen off the bus and is not responding to commands.",
        ], 0
    if r < 0.07:  # truncated by the log shipper: must surface as an unreadable event
        return [f"NVRM: Xid (PCI:{pci}): "], 1
    if r < 0.12:
        return [f"NVRM: Xid (PCI:{pci}): 32, Channel ID 00000052 intr 02000000"], 1
    if r < 0.17:
        who = "pid=1496200, name=pt_main_thread"
        return [f"NVRM: Xid (PCI:{pci}): 45, {who}, Ch 0000000a caused by previous Xid 149"], 1
    if r < 0.20:
        msg = "Contained: CE User Channel (0x9). RST: No, D-RST: No"
        return [f"NVRM: Xid (PCI:{pci} GPU-I:05): 94, pid=7194, {msg}"], 1
    who = (
        "pid='<unknown>', name=<unknown>, "
        if rng.random() < 0.5
        else f"pid={rng.randint(1000, 999999)}, name=python3, "
    )
    body = [f"NVRM: Xid (PCI:{pci}): {code}, {who}{MESSAGES[code]}"]
    if rng.random() < 0.1:
        body.insert(0, f"NVRM: GPU at PCI:{pci}: GPU-{rng.getrandbits(32):08x}-1111-2222-3333-444455556666")
    return body, 1


MIXES = {  # (share of lines that start an Xid message, share of non-Xid NVRM lines)
    "sparse": (1 / 20_000, 0.0005),
    "storm": (0.05, 0.05),
    "failing": (0.005, 0.01),
}


def generate(path: Path, size: int, seed: int, xid_share: float, chatter: float) -> tuple[int, int]:
    """Write about `size` bytes of kern.log; return (lines containing 'NVRM: Xid', all lines)."""
    rng = random.Random(seed)
    uptime = 199.0
    epoch = 1_733_139_527  # 2024-12-02T11:38:47Z
    expected = 0
    written = 0
    lines = 0
    stamp_cache: dict[int, str] = {}
    with path.open("w", encoding="utf-8", buffering=1 << 22) as f:
        while written < size:
            block: list[str] = []
            for _ in range(50_000):
                uptime += rng.random() * 0.002
                r = rng.random()
                if r < xid_share:
                    bodies, n = xid_lines(rng)
                    expected += n
                elif r < xid_share + chatter:
                    bodies = [rng.choice(NVRM_CHATTER)]
                else:
                    bodies = [rng.choice(NOISE)]
                second = epoch + int(uptime)
                stamp = stamp_cache.get(second)
                if stamp is None:
                    t = time.gmtime(second)
                    stamp = (
                        f"{MONTHS[t.tm_mon - 1]} {t.tm_mday:2d} {t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}"
                    )
                    stamp_cache = {second: stamp}
                for body in bodies:
                    block.append(f"{stamp} r01-n03 kernel: [{uptime:12.6f}] {body}\n")
            chunk = "".join(block)
            f.write(chunk)
            written += len(chunk)
            lines += len(block)
    return expected, lines


def time_grep(path: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = subprocess.run(["grep", "-c", "NVRM: Xid", str(path)], capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if out.returncode not in (0, 1):
        raise RuntimeError(f"grep failed: {out.stderr.strip()}")
    return elapsed, int(out.stdout.strip())


def time_scan(path: Path) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    xid_lines_seen = 0
    events = 0
    for ev in scan_xid_file(path):
        events += 1
        if ev.kind in ("xid", "unreadable"):  # the events whose line holds 'NVRM: Xid'
            xid_lines_seen += 1
    return time.perf_counter() - t0, xid_lines_seen, events


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def bench_mix(tmp: Path, mix: str, size: int, seed: int, pairs: int) -> float | None:
    """Median of the per-pair ratios scan/grep for one mix; None when the counts disagree."""
    xid_share, chatter = MIXES[mix]
    log = tmp / f"kern-{mix}.log"
    t0 = time.perf_counter()
    expected, lines = generate(log, size, seed, xid_share, chatter)
    size_b = log.stat().st_size
    print(
        f"\n[{mix}] generated {size_b / (1 << 30):.2f} GiB, {lines:,} lines in "
        f"{time.perf_counter() - t0:.1f} s: {expected:,} 'NVRM: Xid' lines "
        f"({expected / lines:.2%} of lines, {expected / (size_b / (1 << 30)):,.0f} per GiB); {load()}"
    )
    try:
        time_grep(log)  # warm the page cache for both
        grep_times, scan_times, ratios = [], [], []
        for k in range(pairs):
            if k % 2 == 0:
                g, grep_count = time_grep(log)
                s, scan_count, events = time_scan(log)
            else:
                s, scan_count, events = time_scan(log)
                g, grep_count = time_grep(log)
            if not grep_count == scan_count == expected:
                print(
                    f"error: grep counted {grep_count}, scan {scan_count}, generated {expected}",
                    file=sys.stderr,
                )
                return None
            grep_times.append(g)
            scan_times.append(s)
            ratios.append(s / g)
            first = "grep first" if k % 2 == 0 else "scan first"
            print(
                f"  pair {k + 1} ({first}): grep {g:.3f} s, scan {s:.3f} s ({events:,} events), "
                f"ratio {s / g:.2f}; {load()}"
            )
        grep_s, scan_s = statistics.median(grep_times), statistics.median(scan_times)
        ratio = statistics.median(ratios)
        print(f"  grep -c 'NVRM: Xid': median {grep_s:.3f} s ({size_b / grep_s / 1e9:.2f} GB/s)")
        print(f"  scan_xid_file:       median {scan_s:.3f} s ({size_b / scan_s / 1e9:.2f} GB/s)")
        verdict = "met" if ratio <= 3 else "MISSED"
        print(f"  [{mix}] median ratio scan/grep over {pairs} pairs: {ratio:.2f} (target <= 3: {verdict})")
        return ratio
    finally:
        log.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1G", help="log size per mix, e.g. 256M, 1G (default 1G = 1 GiB)")
    ap.add_argument("--pairs", type=int, default=5, help="timed (grep, scan) pairs per mix; medians kept")
    ap.add_argument(
        "--mixes",
        default="sparse,storm,failing",
        help=f"comma-separated, of {', '.join(MIXES)}; headline last",
    )
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--dir", default=None, help="parent for the temp dir (default: system temp)")
    args = ap.parse_args(argv)
    if shutil.which("grep") is None:
        print("error: grep not found", file=sys.stderr)
        return 2
    mixes = [m.strip() for m in args.mixes.split(",") if m.strip()]
    if unknown := [m for m in mixes if m not in MIXES]:
        print(f"error: unknown mix {unknown[0]!r}", file=sys.stderr)
        return 2
    print(
        f"xid_scan bench: {args.size} per mix, {args.pairs} pairs; {load()} (shared machine: see each sample)"
    )
    tmp = Path(tempfile.mkdtemp(prefix="fleetval-xid-bench-", dir=args.dir))
    try:
        results = {}
        for mix in mixes:
            ratio = bench_mix(tmp, mix, parse_size(args.size), args.seed, args.pairs)
            if ratio is None:
                return 1
            results[mix] = ratio
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nmedian ratio scan/grep: " + ", ".join(f"{m} {r:.2f}" for m, r in results.items()))
    print(f"{mixes[-1]} mix, median ratio scan/grep (target <= 3):")
    print(f"{results[mixes[-1]]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
