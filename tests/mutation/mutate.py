"""``make mutate``: the project's mutation run over the judgement (queries and the code that decides).

Each mutant in ``tests/mutation/mutants.toml`` names a file, a fragment to find in it and its
replacement. Fragments are matched as **token sequences** (SQL or Python tokens; whitespace, line
breaks and comments ignored), never by line number, so a mutant survives reformatting and code
moving around; ``after`` (optional) is a fragment that must come first, to pick one of several
occurrences. A fragment that is missing or ambiguous is an error that names the mutant: re-point it
in the table when the code it guards moved.

Every mutant is applied to a private copy of the sources and runs the tests that cover its file
(the ``[tests]`` table, or its own ``tests``), stopping at the first failure. A mutant is *killed*
when a test fails (or the run times out), *survives* otherwise. ``equivalent`` mutants (the table
explains why no answer can change) are run too and reported, but not counted against the score.
The last line is ``mutation: K killed / N mutants (E equivalent)``; the exit status is 1 when
K / (N - E) is below ``--target`` (0.9).

Example:
    >>> toks = tokens("a.x >= f.lim -- the limit\\n AND b", "sql")
    >>> [t.text for t in toks]
    ['a', '.', 'x', '>=', 'f', '.', 'lim', 'and', 'b']
    >>> find_span("WHERE a.x >= f.lim AND b", "a.x >=  f.lim", "sql")
    (6, 18)
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures as cf
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = Path(__file__).with_name("mutants.toml")
#: what a mutant's private copy holds (sample_data is linked, never copied or written)
COPIED = ("forensics", "queries", "tests", "notebooks", "pyproject.toml")
LINKED = ("sample_data",)
#: files whose mutants change what is loaded: those runs ingest the sample themselves
LOADERS = ("forensics/sources/",)


class TableError(Exception):
    """The mutant table does not resolve against the code (a fragment is missing or ambiguous)."""


@dataclass(frozen=True)
class Tok:
    """One token: its text (case-folded for SQL words) and its character span in the file."""

    text: str
    start: int
    end: int


_SQL_TOKEN = re.compile(
    r"""(?P<ws>\s+)|(?P<comment>--[^\n]*|/\*.*?\*/)|(?P<str>'(?:[^']|'')*')|(?P<qid>"(?:[^"]|"")*")"""
    r"""|(?P<num>\d+(?:\.\d+)?)|(?P<word>[A-Za-z_$][\w$]*)"""
    r"""|(?P<op><=|>=|<>|!=|\|\||::|->>|->|[^\s\w])""",
    re.S,
)


def tokens(text: str, lang: str) -> list[Tok]:
    """The tokens of ``text`` (``lang`` is ``sql`` or ``py``), whitespace and comments dropped.

    Example:
        >>> [t.text for t in tokens("x = f(a,  b)  # why", "py")]
        ['x', '=', 'f', '(', 'a', ',', 'b', ')']
    """
    if lang == "sql":
        out = []
        for m in _SQL_TOKEN.finditer(text):
            kind = m.lastgroup
            if kind in ("ws", "comment"):
                continue
            word = m.group()
            out.append(Tok(word.lower() if kind == "word" else word, m.start(), m.end()))
        return out
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENCODING, tokenize.ENDMARKER}
    out = []
    for t in tokenize.generate_tokens(io.StringIO(text).readline):
        if t.type in skip:
            continue
        a = starts[t.start[0] - 1] + t.start[1]
        b = starts[t.end[0] - 1] + t.end[1]
        out.append(Tok(t.string, a, b))
    return out


def _lang(path: str) -> str:
    return "py" if path.endswith(".py") else "sql"


def _occurrences(hay: list[Tok], needle: list[Tok], start: int = 0) -> list[int]:
    n = len(needle)
    texts = [t.text for t in needle]
    return [i for i in range(start, len(hay) - n + 1) if [t.text for t in hay[i:i + n]] == texts]


def _text_spans(text: str, frag: str, start: int = 0) -> list[tuple[int, int]]:
    """Where ``frag`` occurs in ``text`` from ``start``, any run of whitespace matching any other."""
    parts = [re.escape(p) for p in frag.split()]
    pat = re.compile(r"\s+".join(parts))
    return [(m.start(), m.end()) for m in pat.finditer(text, start)]


def find_span(text: str, find: str, lang: str, after: str | None = None) -> tuple[int, int]:
    """The character span of ``find`` in ``text``: unique in the file, or the first after ``after``.

    ``lang`` ``text`` matches raw text (whitespace-insensitive): for code inside a string literal
    (SQL in a Python string, an f-string's expression), which has no tokens of its own.

    Example:
        >>> find_span("a > 1; b > 1", "> 1", "sql", after="b")
        (9, 12)
        >>> find_span("x = f'{a  +  1}'", "a + 1", "text")
        (7, 14)
    """
    if lang == "text":
        begin = 0
        if after is not None:
            anchors = _text_spans(text, after)
            if len(anchors) != 1:
                raise TableError(f"anchor {after!r} found {len(anchors)} times (must be once)")
            begin = anchors[0][1]
        spans = _text_spans(text, find, begin)
        if after is None and len(spans) > 1:
            raise TableError(f"fragment {find!r} found {len(spans)} times: add an 'after' anchor")
        if not spans:
            raise TableError(f"fragment {find!r} not found" + (f" after {after!r}" if after else ""))
        return spans[0]
    hay = tokens(text, lang)
    needle = tokens(find, lang)
    if not needle:
        raise TableError("empty fragment")
    begin = 0
    if after is not None:
        anchor = tokens(after, lang)
        hits = _occurrences(hay, anchor)
        if len(hits) != 1:
            raise TableError(f"anchor {after!r} found {len(hits)} times (must be once)")
        begin = hits[0] + len(anchor)
        found = _occurrences(hay, needle, begin)[:1]
    else:
        found = _occurrences(hay, needle)
        if len(found) > 1:
            raise TableError(f"fragment {find!r} found {len(found)} times: add an 'after' anchor")
    if not found:
        where = f" after {after!r}" if after else ""
        raise TableError(f"fragment {find!r} not found{where}")
    i = found[0]
    return hay[i].start, hay[i + len(needle) - 1].end


@dataclass
class Mutant:
    """One row of the table."""

    id: str
    file: str
    find: str
    replace: str
    guards: str
    after: str | None = None
    tests: list[str] = field(default_factory=list)
    equivalent: str | None = None
    also: list[dict[str, str]] = field(default_factory=list)
    match: str = "tokens"  # or "text": inside string literals (see find_span)

    def apply(self, text: str) -> str:
        """``text`` with this mutant's change made (its fragments must resolve)."""
        out = text
        for edit in [{"find": self.find, "replace": self.replace, "after": self.after}, *self.also]:
            lang = "text" if self.match == "text" else _lang(self.file)
            a, b = find_span(out, edit["find"], lang, edit.get("after"))
            out = out[:a] + edit["replace"] + out[b:]
        if out == text:
            raise TableError("the replacement changes nothing")
        if self.file.endswith(".py"):
            try:
                ast.parse(out)
            except SyntaxError as exc:
                raise TableError(f"the mutated file does not parse: {exc}") from exc
        return out


def load_table(path: Path = TABLE) -> list[Mutant]:
    """The mutants of the table, each with its tests resolved (its own, else its file's)."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    by_file: dict[str, list[str]] = data.get("tests", {})
    out = []
    seen = set()
    for row in data.get("mutant", []):
        m = Mutant(**row)
        if m.id in seen:
            raise TableError(f"mutant id {m.id!r} appears twice")
        seen.add(m.id)
        if not m.tests:
            m.tests = list(by_file.get(m.file, []))
        if not m.tests:
            raise TableError(f"mutant {m.id}: no tests for {m.file} (add it to [tests])")
        out.append(m)
    return out


def check(mutants: list[Mutant], root: Path = ROOT) -> list[str]:
    """Every problem of the table against the code at ``root`` (empty: every mutant resolves)."""
    problems = []
    for m in mutants:
        src = root / m.file
        if not src.is_file():
            problems.append(f"{m.id}: file {m.file} does not exist")
            continue
        try:
            m.apply(src.read_text(encoding="utf-8"))
        except TableError as exc:
            problems.append(f"{m.id} ({m.file}): {exc}")
        for t in m.tests:
            if not (root / t.split("::")[0]).exists():
                problems.append(f"{m.id}: test {t} does not exist")
    return problems


# -- running -------------------------------------------------------------------------------------


def _no_bytecode(directory: str, names: list[str]) -> list[str]:
    """What a copy leaves out: bytecode and pytest's cache, but not numba's compiled kernels.

    numba's cache (``__pycache__/*.nbi``, ``*.nbc``) is valid where the source's mtime and size
    are those it was compiled from: copies keep mtimes, so a box loads the snapshot's kernels
    instead of compiling them (~35-60 CPU-s a run that ingests), and a mutated source recompiles.
    """
    if Path(directory).name == "__pycache__":
        return [n for n in names if not n.endswith((".nbi", ".nbc"))]
    return [n for n in names if n == ".pytest_cache"]


def _sandbox(base: Path, root: Path = ROOT) -> Path:
    """A private copy of the sources under ``base`` (from ``root``: the snapshot taken at the start)."""
    box = Path(tempfile.mkdtemp(prefix="sandbox-", dir=base))
    for name in COPIED:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, box / name, ignore=_no_bytecode)
        elif src.exists():
            shutil.copy2(src, box / name)
    for name in LINKED:
        (box / name).symlink_to(ROOT / name)
    return box


def _env(box: Path, prebuilt: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(box)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("FORENSICS_TEST_SAMPLE_CASE", None)
    if prebuilt is not None:
        env["FORENSICS_TEST_SAMPLE_CASE"] = str(prebuilt)
    return env


def _pytest(box: Path, tests: list[str], env: dict[str, str], timeout: float) -> tuple[str, str, float]:
    """Run ``tests`` in ``box``; return (outcome, first failing test or '', seconds)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "--no-header", "-p", "no:cacheprovider",
           "-o", "addopts=", "--strict-markers", "--basetemp", str(box / ".tmp"), *tests]
    t0 = time.monotonic()
    try:
        res = subprocess.run(cmd, cwd=box, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return "timeout", "", time.monotonic() - t0
    dt = time.monotonic() - t0
    if res.returncode == 0:
        return "survived", "", dt
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", res.stdout, re.M)
    if res.returncode in (1, 2) and (failed or "error" in res.stdout.lower()):
        return "killed", failed[0] if failed else res.stdout.strip().splitlines()[-1], dt
    return "broken", res.stdout[-400:] + res.stderr[-400:], dt


def _prebuilt(base: Path, snap: Path) -> Path:
    """The sample ingested once by the unmutated code (reused by mutants that leave the loaders alone)."""
    path = base / "sample.duckdb"
    code = (
        "import datetime as dt, sys, forensics\n"
        "from pathlib import Path\n"
        "s = Path(sys.argv[2])\n"
        "with forensics.open_case(sys.argv[1], now=dt.datetime(2026, 10, 1)) as c:\n"
        "    c.ingest_gateway(s / 'gateway'); c.ingest_engine(s / 'engine', tz='Asia/Singapore')\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path), str(ROOT / "sample_data")], check=True,
                   capture_output=True, cwd=snap, env=_env(snap, None))
    return path


def run_one(m: Mutant, base: Path, prebuilt: Path, timeout: float) -> tuple[Mutant, str, str, float]:
    box = _sandbox(base, base / "snapshot")
    try:
        target = box / m.file
        target.write_text(m.apply(target.read_text(encoding="utf-8")), encoding="utf-8")
        loader = m.file.startswith(LOADERS)
        outcome, detail, secs = _pytest(box, m.tests, _env(box, None if loader else prebuilt), timeout)
        return m, outcome, detail, secs
    finally:
        shutil.rmtree(box, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make mutate", description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", "-j", type=int, default=2, help="mutants run in parallel (default 2)")
    ap.add_argument("--only", action="append", default=[], help="run only mutants whose id contains this")
    ap.add_argument("--check", action="store_true", help="only check that every mutant resolves")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant (a timeout kills it)")
    ap.add_argument("--target", type=float, default=0.9, help="score below which the exit status is 1")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the check that the unmutated code passes (only while writing a test for one mutant)")
    args = ap.parse_args(argv)

    mutants = load_table()
    problems = check(mutants)
    if problems:
        print("the mutant table does not resolve; re-point these rows in tests/mutation/mutants.toml:")
        print("\n".join(f"  {p}" for p in problems))
        return 2
    if args.only:
        mutants = [m for m in mutants if any(o in m.id for o in args.only)]
    if args.list:
        for m in mutants:
            print(f"{m.id:40} {m.file:40} {'(equivalent) ' if m.equivalent else ''}{m.guards}")
        return 0
    if args.check:
        print(f"mutation table: {len(mutants)} mutants resolve")
        return 0

    base = Path(tempfile.mkdtemp(prefix="forensics-mutate-"))
    try:
        t0 = time.monotonic()
        # the sources as they are now: editing the checkout during the run changes nothing
        snap = _sandbox(base)
        snap.rename(base / "snapshot")
        # the kernels compiled once, into the snapshot (every box copies them: _no_bytecode)
        subprocess.run([sys.executable, "-m", "forensics", "warm"], check=True, capture_output=True,
                       cwd=base / "snapshot", env=_env(base / "snapshot", None))
        prebuilt = _prebuilt(base, base / "snapshot")
        # the unmutated code must pass the tests every mutant runs, or no kill means anything
        box = _sandbox(base, base / "snapshot")
        all_tests = sorted({t for m in mutants for t in m.tests})
        outcome, detail, secs = ("survived", "", 0.0) if args.no_baseline else _pytest(
            box, all_tests, _env(box, prebuilt), args.timeout * 2)
        shutil.rmtree(box, ignore_errors=True)
        if outcome != "survived":
            print(f"the unmutated code fails its tests ({outcome}: {detail}); fix that first")
            return 2
        print(f"baseline: {len(all_tests)} test files pass unmutated ({secs:.0f} s)", flush=True)
        results = []
        with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futs = [pool.submit(run_one, m, base, prebuilt, args.timeout) for m in mutants]
            for fut in cf.as_completed(futs):
                m, outcome, detail, secs = fut.result()
                results.append((m, outcome, detail, secs))
                tag = " (equivalent)" if m.equivalent else ""
                print(f"{outcome:8} {m.id}{tag} [{secs:.0f} s] {detail}", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    order = {m.id: i for i, m in enumerate(load_table())}
    results.sort(key=lambda r: order[r[0].id])
    broken = [r for r in results if r[1] == "broken"]
    counted = [r for r in results if not r[0].equivalent]
    killed = [r for r in counted if r[1] in ("killed", "timeout")]
    survivors = [r for r in counted if r[1] not in ("killed", "timeout")]
    equivalent = [r for r in results if r[0].equivalent]
    print()
    if survivors:
        print("survivors (each changes an answer no test sees):")
        for m, outcome, _detail, _secs in survivors:
            print(f"  {m.id} [{outcome}] {m.file}: {m.find!r} -> {m.replace!r}\n      guards: {m.guards}")
    for m, outcome, _detail, _secs in equivalent:
        if outcome in ("killed", "timeout"):
            print(f"  note: equivalent mutant {m.id} was killed: is it really equivalent?")
    if broken:
        print(f"{len(broken)} run(s) broke (not a test failure): " + ", ".join(r[0].id for r in broken))
    n = len(results)
    e = len(equivalent)
    score = len(killed) / (n - e) if n > e else 1.0
    print(f"score {score:.3f} (target {args.target}); {time.monotonic() - t0:.0f} s wall, {args.jobs} jobs")
    print(f"mutation: {len(killed)} killed / {n} mutants ({e} equivalent)")
    return 0 if score >= args.target and not broken else 1


if __name__ == "__main__":
    sys.exit(main())
