"""README.md and docs/*.md name only real things.

(a) every repository path they name exists: inline code, links (a link inside docs/ is relative to
    docs/, its #anchor a heading of the target) and paths in fenced blocks, resolved from the
    repository root;
(b) every `make X` they show is a target of the Makefile;
(c) every `fleetval …` command line in a fenced bash block parses with the real CLI parser, once its
    documented placeholders (FILE, URL, N, …) are given sample values and each `a|b` alternative is
    tried.

The skip rules are the constants below: keep them explicit and small.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import DAGS, ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOC_IDS = [str(doc.relative_to(ROOT)) for doc in DOCS]

# A file name with one of these endings is a path even without a slash.
FILE_ENDINGS = (
    ".py", ".md", ".yaml", ".yml", ".json", ".sql", ".sh", ".csv", ".txt", ".toml", ".env", ".in",
    ".cfg", ".go", ".mod", ".sum", ".html", ".j2",
)  # fmt: skip
# Placeholders the docs write where a reader puts a name of their own.
PLACEHOLDERS = {"FILE", "FLEET.yaml", "NODE.json", "PODS", "DIR", "STATE_DIR", "my-scenario.yaml"}
# File names that are not the repository's: a checkpoint's own manifest, the Airflow chart's schema,
# the control plane cache's record of what it built.
NOT_REPOSITORY_FILES = {"manifest.json", "values.schema.json", "versions.json"}
# Characters that make a token a template, not a path: <node>, $VAR, …, and absolute or home paths
# (/tmp, /var, /run, /etc, paths inside containers, the page's URL paths, ~/.cache).
TEMPLATE_MARKS = ("<", ">", "$", "…", "...", "%")
BASH_FENCES = {"bash", "sh", "shell", "console"}

TOP_LEVEL = {p.name for p in ROOT.iterdir() if not p.name.startswith(".")}
SKIPPED_FOLDERS = {"__pycache__", "build", "fleetval.egg-info"}  # build output, not sources


def _all_file_names() -> set[str]:
    names: set[str] = set()
    for _folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIPPED_FOLDERS]
        names.update(files)
    return names


FILE_NAMES = _all_file_names()


# ---------------------------------------------------------------------------------------------
# Reading a Markdown file: fenced blocks apart from the prose.


def _split(text: str) -> tuple[str, list[tuple[str, str, int]]]:
    """The prose (fenced blocks blanked, line numbers kept) and the fenced blocks (info, body, line)."""
    prose: list[str] = []
    blocks: list[tuple[str, str, int]] = []
    fence: str | None = None
    info, start = "", 0
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.lstrip()
        if fence is None:
            match = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if match:
                fence, info, body, start = match.group(1), match.group(2).lower(), [], number + 1
                prose.append("")
            else:
                prose.append(line)
        elif stripped.startswith(fence) and not stripped[len(fence) :].strip():
            blocks.append((info, "\n".join(body), start))
            fence = None
            prose.append("")
        else:
            body.append(line)
            prose.append("")
    return "\n".join(prose), blocks


def _inline_code(prose: str) -> Iterator[tuple[str, int]]:
    for match in re.finditer(r"(`+)(.+?)\1", prose, re.S):
        yield match.group(2).strip(), prose.count("\n", 0, match.start()) + 1


def _links(prose: str) -> Iterator[tuple[str, int]]:
    without_code = re.sub(r"(`+).+?\1", lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose, flags=re.S)
    for match in re.finditer(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", without_code):
        yield match.group(1), without_code.count("\n", 0, match.start()) + 1


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def _anchors(path: Path) -> set[str]:
    prose, _ = _split(path.read_text())
    seen: dict[str, int] = {}
    anchors = set()
    for line in prose.splitlines():
        match = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


# ---------------------------------------------------------------------------------------------
# (a) paths


def _path_candidate(token: str, *, bare_ok: bool) -> str | None:
    """The repository path a token names, or None when it is not one (see the rules above)."""
    token = token.strip("'\"()[],;:").removeprefix("./")
    if token.endswith(".") and not token.endswith("/."):
        token = token[:-1]
    if not token or "://" in token or token.startswith(("/", "~", "-")) or "=" in token:
        return None
    if any(mark in token for mark in TEMPLATE_MARKS):
        return None
    parts = [p for p in token.split("/") if p]
    if not parts or any(p in PLACEHOLDERS for p in parts):
        return None
    if "/" in token:
        if parts[0] in TOP_LEVEL or parts[-1].endswith(FILE_ENDINGS):
            return token
        return None
    if bare_ok and token.endswith(FILE_ENDINGS) and token not in NOT_REPOSITORY_FILES:
        return token
    return None


def _expand(path: str) -> list[str]:
    """`controlplane/{etcd,kubernetes}/go.mod` → each; the rest as is."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", path)
    if not match:
        return [path]
    before, after = path[: match.start()], path[match.end() :]
    return [x for alt in match.group(1).split(",") for x in _expand(before + alt + after)]


def _exists(path: str) -> bool:
    if "/" not in path.rstrip("/"):
        return (ROOT / path).exists() or path in FILE_NAMES
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def _missing_paths(doc: Path) -> list[str]:
    rel = doc.relative_to(ROOT)
    prose, blocks = _split(doc.read_text())
    missing: list[str] = []

    for code, line in _inline_code(prose):
        tokens = code.split()
        for token in tokens:
            path = _path_candidate(token, bare_ok=len(tokens) == 1)
            for one in _expand(path) if path else []:
                if not _exists(one):
                    missing.append(f"{rel}:{line}: `{one}` (inline code) does not exist")
    for info, body, start in blocks:
        if info not in BASH_FENCES:
            continue
        for offset, text in enumerate(body.splitlines()):
            for token in text.split("#", 1)[0].split():
                path = _path_candidate(token, bare_ok=False)
                for one in _expand(path) if path else []:
                    if not _exists(one):
                        missing.append(f"{rel}:{start + offset}: {one} (in a {info} block) does not exist")
    for target, line in _links(prose):
        if "://" in target or target.startswith("mailto:"):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (doc.parent / file_part).resolve() if file_part else doc
        if not linked.exists():
            missing.append(f"{rel}:{line}: link ({target}) does not exist")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            missing.append(f"{rel}:{line}: link ({target}): no heading #{anchor} in {linked.name}")
    return missing


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_named_paths_exist(doc: Path) -> None:
    missing = _missing_paths(doc)
    assert not missing, "paths named in the docs that are not in the repository:\n" + "\n".join(missing)


# ---------------------------------------------------------------------------------------------
# (b) make targets


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([A-Za-z0-9][\w.-]*)\s*:(?!=)", makefile, re.M))
    for phony in re.findall(r"^\.PHONY\s*:(.*)$", makefile, re.M):
        targets.update(phony.split())
    return targets


def _make_calls(doc: Path) -> Iterator[tuple[str, int]]:
    prose, blocks = _split(doc.read_text())
    pattern = re.compile(r"(?:^|[\s;&|(])make\s+((?:[A-Za-z_]\w*=\S*\s+)*)([a-z][\w-]*)")
    for code, line in _inline_code(prose):
        for match in pattern.finditer(" " + code):
            yield match.group(2), line
    for info, body, start in blocks:
        if info in BASH_FENCES:
            for offset, text in enumerate(body.splitlines()):
                for match in pattern.finditer(" " + text.split("#", 1)[0]):
                    yield match.group(2), start + offset


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_make_targets_exist(doc: Path) -> None:
    targets = _make_targets()
    rel = doc.relative_to(ROOT)
    unknown = [f"{rel}:{line}: make {name}" for name, line in _make_calls(doc) if name not in targets]
    assert not unknown, "make targets the Makefile does not have:\n" + "\n".join(unknown)


# ---------------------------------------------------------------------------------------------
# (c) fleetval command lines

# Sample values for the placeholders the docs write in command synopses.
SAMPLES = {
    "FILE": "out.txt",
    "FLEET.yaml": "include/fleetval/sim/fleets/demo.yaml",
    "FLEET_NAME": "demo",
    "SPEC": "include/fleetval/sim/fleets/demo.yaml",
    "URL": "sqlite:///fleetval.db",
    "GBPS": "370",
    "N": "8",
    "N2": "r01-n02",
    "NAME": "r01-n01",
    "KEY": "run-1",
    "DIR": ".cluster",
    "D": "ckpt",
    "P": "6443",
    "G": "A100-SXM4-40GB",
    "PROFILE": "1g.10gb",
    "SCENARIO": "d-sched-06-gang",
    "KIND": "kueue.no_reclaim",
    "ckpt.KIND": "ckpt.non_atomic",
    "S": "10",
    "CMD": "python train.py",
    "COMPONENT": "kueue",
    "NODE.json": "node.json",
    "PODS": "pods.txt",
    "F": "file.txt",
    "C": "driver-validation",
    "CONTAINER": "driver-validation",
}


def _command_lines(doc: Path) -> Iterator[tuple[str, int]]:
    """Each `fleetval …` line of a fenced bash block, continuation lines joined."""
    _, blocks = _split(doc.read_text())
    for info, body, start in blocks:
        if info not in BASH_FENCES:
            continue
        pending, first = "", 0
        for offset, text in enumerate(body.splitlines()):
            if not pending:
                first = start + offset
            if text.rstrip().endswith("\\"):
                pending += text.rstrip()[:-1] + " "
                continue
            line, pending = (pending + text).strip(), ""
            words = line.removeprefix("$ ").split()
            while words and re.fullmatch(r"[A-Za-z_]\w*=\S*", words[0]):
                words.pop(0)  # FOO=bar fleetval …
            if words and words[0] in ("fleetval", ".venv/bin/fleetval"):
                yield line, first


def _word(word: str) -> list[str]:
    """A synopsis word as the values to try: brackets and ellipses dropped, placeholders filled,
    `a|b` as each alternative."""
    word = word.strip("[]").removesuffix("…").removesuffix("...")
    if not word or word in ("…", "..."):
        return []
    if "=" in word and not word.startswith("-"):
        key, _, value = word.partition("=")
        return [f"{SAMPLES.get(key, key)}={SAMPLES.get(value, value)}"]
    return [SAMPLES.get(alt, alt) for alt in word.split("|")]


def _variants(words: list[str]) -> Iterator[list[str]]:
    """The first alternative of every word, then each other alternative of each word in turn."""
    choices = [_word(w) for w in words]
    first = [c[0] for c in choices if c]
    yield first
    for i, options in enumerate(choices):
        for alt in options[1:]:
            yield [*(c[0] for c in choices[:i] if c), alt, *(c[0] for c in choices[i + 1 :] if c)]


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _invocations(line: str) -> Iterator[list[str]]:
    """The argv lists a synopsis line shows: `fleetval parse nccl FILE | judge nccl FILE …` is two,
    `fleetval scenario list | check FILE…` too (`check` of `scenario`); a `|` into another program
    is a pipe, not an alternative."""
    from fleetval.cli import build_parser

    top = _subcommands(build_parser())
    words = shlex.split(line, comments=True)
    while words and "=" in words[0] and not words[0].startswith("-"):
        words.pop(0)
    words = words[1:]  # fleetval
    segments = [list(group) for is_bar, group in itertools.groupby(words, lambda w: w == "|") if not is_bar]
    if not segments:
        return
    head = segments[0]
    for n, segment in enumerate(segments):
        if n and segment and segment[0] not in top and head[0] in top:
            if segment[0] not in _subcommands(top[head[0]]):
                break  # a real pipe: the rest is another program
            segment = [head[0], *segment]  # `scenario list | check FILE`: `check` of `scenario`
        elif n and (not segment or segment[0] not in top):
            break
        yield from _variants(segment)


def _parse_error(argv: list[str]) -> str | None:
    from fleetval.cli import build_parser

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            if exc.code:
                return stderr.getvalue().strip() or f"exit {exc.code}"
    return None


@pytest.mark.parametrize("doc", DOCS, ids=DOC_IDS)
def test_fleetval_commands_parse(doc: Path) -> None:
    rel = doc.relative_to(ROOT)
    bad = []
    for line, number in _command_lines(doc):
        for argv in _invocations(line):
            error = _parse_error(argv)
            if error:
                bad.append(f"{rel}:{number}: {line}\n    as: fleetval {shlex.join(argv)}\n    {error}")
    assert not bad, "fleetval command lines the CLI refuses:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------------------------
# The front page stays a front page.


def test_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move detail into docs/"


def test_readme_lists_every_dag() -> None:
    readme = (ROOT / "README.md").read_text()
    unlisted = [p.stem for p in sorted(DAGS.glob("*.py")) if f"`{p.stem}`" not in readme]
    assert not unlisted, f"DAGs missing from the README's DAG table: {unlisted}"
