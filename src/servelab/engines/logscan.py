"""A finished engine log, or a saved /metrics page, read into events and a stats series.

`servelab engine scan` reads what an engine wrote while servelab was not watching: the log
of an SGLang or vLLM server of any version (plain or gzip; launched by servelab or not), or
one /metrics page saved with curl. Its lines go through the readers a launched engine's log
goes through live (`SignatureMatcher`, `LogStats`), so a scan finds the events and stats
samples a run would have recorded.

Which engine wrote it, when not given: each line goes to every engine's readers and the
engine with the most lines recognised wins. A line counts for an engine when a signature
only that engine has matches it, or when it is that engine's stats line; the signatures
several engines share (torch's out of memory, NCCL's, uvicorn's startup) count for none. A
/metrics page is told by its metric names (`sglang:*`, `vllm:*`).

The stats series is placed in time by the lines' own stamps (`engines.logstamps`) when
every stats line has one, else by line order.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from statistics import median
from typing import BinaryIO, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, computed_field

from servelab.core.errors import ConfigError
from servelab.engines.enginelog import parse_log_line
from servelab.engines.logstamps import Stamp, StampReader, StampStyle
from servelab.engines.signatures import SIGNATURES, EventKind, LogEvent, SignatureMatcher
from servelab.telemetry.logstats import LOG_STATS_ENGINES, LogStats, parse_stats_line
from servelab.telemetry.scrape import EngineName, EngineSample, guess_engine, sample_from_text

__all__ = [
    "SCAN_ENGINES",
    "SERIES_FIELDS",
    "EngineGuess",
    "EngineLogScan",
    "FieldStats",
    "StatsPoint",
    "StatsSeries",
    "check_scan_engine",
    "engines_recognising",
    "scan_engine_file",
    "scan_engine_stream",
    "scan_engine_text",
]

SCAN_ENGINES: tuple[str, ...] = tuple(sorted(LOG_STATS_ENGINES & SIGNATURES.keys()))
"""Engines with both log signatures and a stats line: the ones a log can be read for."""
SERIES_FIELDS = (
    "running",
    "queued",
    "kv_usage",
    "gen_throughput",
    "prefill_tokens",
    "cached_tokens",
)
"""The gauges of a stats series, in the order they are shown."""

_METRICS_SHARE = 0.9
"""A text is a /metrics page when this share of its non-blank lines are exposition lines."""
_NAMED = re.compile(r"\b(sglang|vllm|transformers)\b", re.IGNORECASE)
"""An engine's name in a line, for what an unread text looks like."""
_PREFIX = re.compile(r"(?:ray_)?(sglang|vllm)[:_]")
"""A sample's engine prefix, as the engine or an exporter writes it (`telemetry.scrape`)."""
_EXPOSITION = re.compile(
    r"^(?:# (?:HELP|TYPE) \S+.*|# EOF"
    r"|[A-Za-z_:][\w:]*(?:\{.*\})? [-+]?(?:\d[\d.eE+-]*|NaN|Inf)(?: -?\d+)?)$"
)


class StatsPoint(BaseModel):
    """The engine's gauges after one stats line (or in one /metrics page)."""

    model_config = ConfigDict(extra="forbid")

    line_no: int | None = Field(description="The stats line, from 1; None for a /metrics page.")
    stamp: str | None = Field(default=None, description="The line's own timestamp, as written.")
    t_s: float | None = Field(
        default=None,
        description="Seconds since the text's first stamped line; None when the series is "
        "placed by line order.",
    )
    running: float | None = None
    queued: float | None = None
    kv_usage: float | None = Field(default=None, description="KV cache in use, a fraction 0-1.")
    gen_throughput: float | None = Field(default=None, description="Output tok/s, the engine's.")
    prefill_tokens: float | None = Field(
        default=None, description="Prompt tokens the latest prefill batch computed."
    )
    cached_tokens: float | None = Field(
        default=None, description="Prompt tokens the latest prefill batch took from the cache."
    )


class FieldStats(BaseModel):
    """One gauge over the series: the samples that carry it, and their spread."""

    model_config = ConfigDict(extra="forbid")

    field: str
    samples: int
    min: float
    median: float
    max: float


class StatsSeries(BaseModel):
    """The stats samples in order, and each gauge's spread."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["log", "metrics"]
    times: Literal["engine_stamps", "line_order", "snapshot"] = Field(
        description="engine_stamps: every stats line carries its own timestamp (t_s); "
        "line_order: some do not, so the samples are placed by line; snapshot: one /metrics "
        "page, one sample with no time."
    )
    points: list[StatsPoint]
    fields: list[FieldStats] = Field(description="The gauges with a value, in SERIES_FIELDS order.")


class EngineGuess(BaseModel):
    """Which engine's readers the text went through, and what decided it."""

    model_config = ConfigDict(extra="forbid")

    engine: str | None = Field(description="None: no engine recognised a line.")
    how: Literal["given", "log_lines", "metric_names"]
    matches: dict[str, int] = Field(
        description="By engine: its lines recognised (a log), or its samples (a /metrics page)."
    )


class EngineLogScan(BaseModel):
    """What one engine log or /metrics page says: events, stats series, and how it was read."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="The file read, or '-' for standard input.")
    kind: Literal["log", "metrics"]
    lines: int
    engine: str | None
    guess: EngineGuess
    version: str | None = Field(default=None, description="From the engine's version line.")
    stamp_style: StampStyle | None = Field(
        default=None, description="The most common leading timestamp style; None: no stamps."
    )
    stamped_lines: int = 0
    events: list[LogEvent] = Field(default_factory=list)
    counts: dict[EventKind, int] = Field(default_factory=dict, description="Occurrences by kind.")
    stats: StatsSeries | None = None
    looks_like: str | None = Field(
        default=None,
        description="Set only when nothing was recognised: the engine (and version) the text "
        "seems to come from, and why.",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def recognised(self) -> bool:
        """A stats sample, or an event besides the version line, was read."""
        return self.stats is not None or any(
            event.kind is not EventKind.ENGINE_VERSION for event in self.events
        )


def scan_engine_file(path: Path, *, engine: str | None = None) -> EngineLogScan:
    """Read a finished log or a saved /metrics page (plain or gzip); ConfigError when it
    cannot be read."""
    check_scan_engine(engine)
    try:
        stream = path.open("rb")
    except FileNotFoundError:
        raise ConfigError(f"no file at {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"{path} is a folder, not a log or /metrics page") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    with stream:
        return scan_engine_stream(stream, source=str(path), engine=engine)


def scan_engine_stream(
    stream: BinaryIO, *, source: str, engine: str | None = None
) -> EngineLogScan:
    """`scan_engine_file` of an open binary stream (standard input): gzip is told by its
    first bytes, not by a name."""
    check_scan_engine(engine)
    buffered = (
        stream
        if isinstance(stream, io.BufferedReader)
        else io.BufferedReader(cast(io.RawIOBase, stream))
    )
    try:
        gzipped = buffered.peek(2)[:2] == b"\x1f\x8b"
        binary = gzip.GzipFile(fileobj=buffered) if gzipped else buffered
        text = io.TextIOWrapper(binary, encoding="utf-8", errors="replace", newline="\n")
        return _scan_lines(text, source=source, engine=engine)
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise ConfigError(f"{source} is not a readable gzip file: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {source}: {exc}") from None


def scan_engine_text(text: str, *, engine: str | None = None, source: str = "-") -> EngineLogScan:
    """`scan_engine_file` of text already in memory."""
    check_scan_engine(engine)
    return _scan_lines(io.StringIO(text), source=source, engine=engine)


def check_scan_engine(engine: str | None) -> None:
    """A ConfigError unless `engine` is None or one whose log servelab reads."""
    if engine is not None and engine not in SCAN_ENGINES:
        raise ConfigError(
            f"no log reader for engine {engine!r}", hint=f"known: {', '.join(SCAN_ENGINES)}"
        )


def engines_recognising(line: str) -> frozenset[str]:
    """The engines whose own signatures or stats line match `line` (see the module doc)."""
    own = _own_signature_engines(line)
    return frozenset(
        engine
        for engine in SCAN_ENGINES
        if engine in own or parse_stats_line(engine, line, prefill=True) is not None
    )


# --- reading --------------------------------------------------------------------------------


class _Reader:
    """One engine's readers over the text, and the lines they recognised."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.matcher = SignatureMatcher(engine)
        self.stats = LogStats(engine)
        self.samples: list[tuple[int, Stamp | None, EngineSample]] = []
        self.recognised = 0

    def feed(self, dated: str, line: str, line_no: int, stamp: Stamp | None, own: set[str]) -> None:
        """`dated` keeps an ISO stamp the matcher dates its events by; `line` has none;
        `own`: the engines whose own signatures match it."""
        self.matcher.feed(dated)
        sample = self.stats.feed(line, t_ns=line_no)
        if sample is not None:
            self.samples.append((line_no, stamp, sample))
        if sample is not None or self.engine in own:
            self.recognised += 1


def _scan_lines(lines: Iterable[str], *, source: str, engine: str | None) -> EngineLogScan:
    # Every engine reads every line, given one or not: the others' counts tell a wrong --engine.
    readers = [_Reader(name) for name in SCAN_ENGINES]
    stamps = StampReader()
    styles: Counter[StampStyle] = Counter()
    mentions: Counter[str] = Counter()
    others: Counter[str] = Counter()
    exposition: list[str] = []
    first_s: float | None = None
    count = nonblank = 0
    for raw in lines:
        count += 1
        utc, _, line = parse_log_line(raw)  # servelab's engine.log stamps, taken off
        line = line.rstrip("\r")
        dated = f"{utc} {line}" if utc else line
        stamp = stamps.read(dated)
        if stamp is not None:
            styles[stamp.style] += 1
            first_s = stamp.unix_s if first_s is None else first_s
        if line.strip():
            nonblank += 1
            if _EXPOSITION.match(line):
                exposition.append(line)
            mentions.update({name.lower() for name in _NAMED.findall(line)})
        own = _own_signature_engines(line)
        others.update(own & _OTHER_ENGINES)
        for reader in readers:
            reader.feed(dated, line, count, stamp, own)
    if nonblank and len(exposition) >= _METRICS_SHARE * nonblank:
        return _metrics_scan(exposition, source=source, engine=engine, lines_read=count)
    matches = {reader.engine: reader.recognised for reader in readers}
    chosen = _chosen(readers, engine, styles.most_common(1)[0][0] if styles else None)
    style = styles.most_common(1)[0][0] if styles else None
    scan = EngineLogScan(
        source=source,
        kind="log",
        lines=count,
        engine=chosen.engine if chosen else None,
        guess=EngineGuess(
            engine=chosen.engine if chosen else None,
            how="given" if engine else "log_lines",
            matches=matches,
        ),
        version=str(named.fields["version"])
        if chosen and (named := _version_line(chosen.matcher.events))
        else None,
        stamp_style=style,
        stamped_lines=sum(styles.values()),
        events=chosen.matcher.events if chosen else [],
        counts=chosen.matcher.counts if chosen else {},
        stats=_log_series(chosen.samples, first_s) if chosen and chosen.samples else None,
    )
    if scan.recognised:
        return scan
    looks = _looks_like(readers, others, style, mentions)
    return scan.model_copy(update={"looks_like": looks})


def _chosen(readers: list[_Reader], engine: str | None, style: StampStyle | None) -> _Reader | None:
    """The given engine's readers, else those that recognised the most lines (none: None);
    a tie (a message both engines print word for word, as SGLang's copy of vLLM's custom
    all-reduce) goes to the engine whose timestamp style the lines carry."""
    if engine is not None:
        return next(reader for reader in readers if reader.engine == engine)
    best = max(readers, key=lambda reader: (reader.recognised, reader.engine == style))
    return best if best.recognised else None


def _version_line(events: list[LogEvent]) -> LogEvent | None:
    """The first event naming the engine's version."""
    return next(
        (e for e in events if e.kind is EventKind.ENGINE_VERSION and e.fields.get("version")),
        None,
    )


def _looks_like(
    readers: list[_Reader], others: Counter[str], style: StampStyle | None, mentions: Counter[str]
) -> str | None:
    """What the text seems to be when none of it was read: its version line, else another
    engine's signatures, else its stamps' style, else the engine it names most."""
    for reader in readers:
        if (event := _version_line(reader.matcher.events)) is not None:
            version = event.fields["version"]
            return f"{reader.engine} {version} (its version line, line {event.line_no})"
    if others:
        name, lines = others.most_common(1)[0]
        return f"{name} ({_lines(lines)} matched its signatures)"
    if style in SCAN_ENGINES:
        return f"{style} (its timestamps are in {style}'s style)"
    if mentions:
        name, lines = mentions.most_common(1)[0]
        return f"{name} (named on {_lines(lines)})"
    return None


def _lines(count: int) -> str:
    return f"{count} line" if count == 1 else f"{count} lines"


def _log_series(
    samples: list[tuple[int, Stamp | None, EngineSample]], first_s: float | None
) -> StatsSeries:
    """The samples placed by their stamps when every one has one, else by line."""
    stamped = all(stamp is not None for _, stamp, _ in samples)
    origin = first_s if stamped else None
    points = [
        _point(
            sample,
            line_no=line_no,
            stamp=stamp.text if stamp else None,
            t_s=None if origin is None or stamp is None else round(stamp.unix_s - origin, 6),
        )
        for line_no, stamp, sample in samples
    ]
    return _series(points, source="log", times="line_order" if origin is None else "engine_stamps")


def _point(
    sample: EngineSample, *, line_no: int | None, stamp: str | None, t_s: float | None
) -> StatsPoint:
    return StatsPoint(
        line_no=line_no,
        stamp=stamp,
        t_s=t_s,
        running=sample.running,
        queued=sample.queued,
        kv_usage=sample.kv_usage,
        gen_throughput=sample.gen_throughput,
        prefill_tokens=sample.prefill_tokens,
        cached_tokens=sample.cached_tokens,
    )


def _series(
    points: list[StatsPoint],
    *,
    source: Literal["log", "metrics"],
    times: Literal["engine_stamps", "line_order", "snapshot"],
) -> StatsSeries:
    fields = []
    for name in SERIES_FIELDS:
        values = [value for point in points if (value := getattr(point, name)) is not None]
        if values:
            fields.append(
                FieldStats(
                    field=name,
                    samples=len(values),
                    min=min(values),
                    median=median(values),
                    max=max(values),
                )
            )
    return StatsSeries(source=source, times=times, points=points, fields=fields)


# --- /metrics -------------------------------------------------------------------------------


def _metrics_scan(
    lines: list[str], *, source: str, engine: str | None, lines_read: int
) -> EngineLogScan:
    text = "\n".join(lines) + "\n"
    named = Counter(
        match[1] for line in lines if not line.startswith("#") and (match := _PREFIX.match(line))
    )
    matches = {name: named[name] for name in SCAN_ENGINES}
    chosen = engine or guess_engine(text)
    sample = _metrics_sample(text, source, chosen) if chosen else None
    points = [_point(sample, line_no=None, stamp=None, t_s=None)] if sample is not None else []
    scan = EngineLogScan(
        source=source,
        kind="metrics",
        lines=lines_read,
        engine=chosen,
        guess=EngineGuess(
            engine=chosen, how="given" if engine else "metric_names", matches=matches
        ),
        stats=_series(points, source="metrics", times="snapshot") if points else None,
    )
    if scan.recognised:
        return scan
    likeliest = guess_engine(text)
    looks = f"{likeliest} (its metric names)" if likeliest else "a /metrics page of another server"
    return scan.model_copy(update={"looks_like": looks})


def _metrics_sample(text: str, source: str, engine: str) -> EngineSample | None:
    """One saved /metrics page as `engine`'s sample; None without its names."""
    try:
        return sample_from_text(text, engine=cast(EngineName, engine))  # one of SCAN_ENGINES
    except ValueError as exc:
        raise ConfigError(
            f"{source} looks like a /metrics page but does not parse: {exc}"
        ) from None


# --- recognising a line ------------------------------------------------------------------------


def _own_signatures() -> tuple[tuple[str, tuple[tuple[str, re.Pattern[str]], ...]], ...]:
    """Every engine's signatures no other engine has, by literal: (literal, ((engine,
    regex), ...)). An engine whose signatures are another's (embedded: transformers serve)
    is left out."""
    engines: dict[str, tuple[str, ...]] = {}
    for engine, sigs in SIGNATURES.items():
        names = tuple(sig.name for sig in sigs)
        if names not in engines.values():
            engines[engine] = names
    owners = Counter(name for names in engines.values() for name in set(names))
    gated: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
    for engine in engines:
        for sig in SIGNATURES[engine]:
            if owners[sig.name] == 1:
                for literal in sig.literals:
                    gated.setdefault(literal, []).append((engine, sig.regex))
    return tuple((literal, tuple(regexes)) for literal, regexes in gated.items())


_OWN_SIGNATURES = _own_signatures()
_OTHER_ENGINES = frozenset(
    engine for _, gated in _OWN_SIGNATURES for engine, _ in gated if engine not in SCAN_ENGINES
)
"""Engines with signatures but no stats line (transformers serve, the simulator): a log of
theirs is not read, but is named as theirs."""


def _own_signature_engines(line: str) -> set[str]:
    """The engines one of whose own signatures matches `line`: one substring test per
    literal of every engine, a regex only where its literal occurs."""
    engines: set[str] = set()
    for literal, gated in _OWN_SIGNATURES:
        if literal in line:
            engines.update(
                engine for engine, regex in gated if engine not in engines and regex.search(line)
            )
    return engines
