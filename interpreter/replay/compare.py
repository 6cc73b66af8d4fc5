"""Comparing a cell's recorded outputs with a replay's, in a normal form (pure).

Outputs are compared in a normal form, not byte for byte:

* text has its colour codes and only what really varies between runs masked:
  - memory addresses in reprs (``<Foo object at 0x7f...>``) and a bare hex number that
    can only be a user-space address (12 digits from ``0x55...``); ``0xff`` is a value;
  - object ids: a bare 14-15 digit integer that can only be an ``id()`` (8-byte aligned,
    in the user-space range of 64-bit Linux addresses); a number after "id" is a value;
  - readings of the clock: a date and time (``datetime``, pandas, ``logging``, ISO 8601)
    or a time of day with fractional seconds, masked only when it falls within the time
    that run of the cell took (give or take :data:`CLOCK_SLACK_S`; a naive time may be in
    any time zone), so a timestamp in the data is compared however it is printed;
  - timing reports: IPython's ``Wall time:``, ``CPU times:`` and ``%timeit`` lines, and
    tqdm's elapsed time and rate; a duration the cell computed and printed is a value;
  - UUIDs are values, except a version-1 (time-based) UUID whose time falls within the
    run: a ``uuid4()`` printed by the cell differs on every run and is reported, since a
    random UUID and one read from data cannot be told apart;
  - artifact ids, session ids, ``tempfile`` names and IPython's temporary cell file
    names; trailing whitespace is dropped. Digits that carry a value are never masked:
    a hash, a long integer or a date in the data must match;
* numbers are compared as numbers: integers exactly, floats (a number with a point or an
  exponent) within a relative tolerance of :data:`REL_TOL` (``1e-9``) and no absolute
  one (``3e-13`` and ``9e-13`` differ; ``0.0`` only matches ``0.0``, so noise around zero
  such as ``1.1e-16`` is reported); an integer never matches a float;
* everything a cell printed to stdout (or stderr) is compared as one text, so the way
  the stream happened to be chunked and interleaved with displays does not matter;
* rich outputs are compared in order, MIME type by MIME type, for the types the recording
  has (a newer kernel may add representations; it may not drop one); a value the
  recording's notebook set aside for its output budget (``interpreter/notebook_budget.py``:
  only its artifact, or the execution's record, holds it) must be there again, but its
  value is not compared, and the note the broker put in front of ``text/plain`` is not
  part of the output;
* JSON values are compared structurally, their numbers as above;
* raster images by decoded size and a perceptual tolerance on downscaled pixels (Pillow),
  SVG as text without its generated ids;
* an error is compared by exception name and message, not by traceback.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import re
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Any

from interpreter.client.render import bundle_text
from interpreter.mime import ANSI_RE, PDF_MIME, RASTER_MIMES, SVG_MIME
from interpreter.models import ArtifactRef, Execution
from interpreter.notebook_budget import recorded_form

# ---------------------------------------------------------------------- normalisation

REL_TOL = 1e-9
"""Relative tolerance for floats (a replay may run on other hardware or BLAS). There is no
absolute tolerance: a printed ``3e-13`` is a value, so zero only matches zero."""

CLOCK_SLACK_S = 2.0
"""How far outside a cell's run a timestamp may fall and still count as a reading of the
clock while it ran (the broker's and the kernel's times of the same run differ a little)."""

RunWindow = tuple[datetime, datetime]
"""When a cell ran: its first and last known instants (timezone-aware)."""

_DURATION = r"[\d.]+\s?(?:ns|µs|μs|us|ms|s|min|h)"
_PLUS_MINUS = r"(?:±|\+-)"

_MASKS: list[tuple[re.Pattern[str], str]] = [
    (ANSI_RE, ""),
    # Memory addresses in reprs (``<Foo object at 0x7f...>``, ``<memory at 0x...>``), and a
    # bare hex number that can only be a user-space address (``hex(id(x))``). Other hex
    # literals (``0xff``) are values.
    (re.compile(r"\bat 0x[0-9a-fA-F]+\b"), "at 0x<addr>"),
    (re.compile(r"\b0x(?:5[5-9a-fA-F]|[67][0-9a-fA-F])[0-9a-fA-F]{10}\b"), "0x<addr>"),
    # Timing reports: IPython's %time and %timeit, and tqdm's elapsed time and rate. A
    # duration the cell printed itself is a value.
    (re.compile(rf"(Wall time: ){_DURATION}"), r"\1<duration>"),
    (re.compile(r"(CPU times: )user [^\n]*"), r"\1<durations>"),
    (
        re.compile(
            rf"{_DURATION} {_PLUS_MINUS} {_DURATION} per loop \(mean {_PLUS_MINUS} std\. dev\."
            r" of [\d,]+ runs?, [\d,]+ loops? each\)"
        ),
        "<timeit>",
    ),
    (re.compile(r"\b[\d,]+ loops?, best of \d+: [\d.]+ \S+ per loop"), "<timeit>"),
    (re.compile(r"(The slowest run took )[\d.]+( times longer)"), r"\1<n>\2"),
    (
        re.compile(r"\[\d+(?::\d\d){1,2}(?:<(?:\d+(?::\d\d){1,2}|\?))?, *[^,\]\s]*/[^,\]\s]*"),
        "[<elapsed>, <rate>",
    ),
    (re.compile(r"ipykernel_\d+[/\\]\d+\.py"), "ipykernel_<pid>/<cell>.py"),
    # tempfile's names: "tmp" and 8 characters of its alphabet.
    (re.compile(r"\btmp[a-z0-9_]{8}\b"), "tmp<random>"),
    (re.compile(r"\b(artifacts?[ /:=]+)[0-9a-fA-F]{16,}\b"), r"\1<artifact>"),
    # pandas' Styler names its table's CSS ids after a random uuid: T_<5 hex>_row0_col1.
    (re.compile(r"\bT_[0-9a-f]{5}(?=_|\b)"), "T_<styler>"),
]
#: ipywidgets' view of a widget names its model by a random id.
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])")

_SVG_IDS = re.compile(r'\s(id|clip-path|xlink:href|href)="[^"]*"|url\(#[^)]*\)')
_SVG_METADATA = re.compile(r"<metadata>.*?</metadata>", re.DOTALL)


#: ``id()`` of a CPython object on 64-bit Linux: a heap or mmap address, 8-byte aligned.
_ADDRESS_RANGE = (0x550000000000, 0x7FFFFFFFFFFF)
_BARE_INT = re.compile(r"(?<![\w.])\d{14,15}(?![\w.])")

#: A date and time of day, as ``datetime``, pandas, ``logging`` and ISO 8601 print them.
_TIMESTAMP = re.compile(
    r"(?<![\w.])(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d{2}:?\d{2})?(?![\w.])"
)
#: A time of day with fractional seconds (``datetime.now().time()``).
_TIME_OF_DAY = re.compile(r"(?<![\w.:])(\d{1,2}:\d{2}:\d{2})[.,](\d{1,9})(?![\w.:])")
#: A UUID; only a version-1 one (time-based) can be shown to come from the clock.
_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-1[0-9a-fA-F]{3}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_UUID_EPOCH = datetime(1582, 10, 15, tzinfo=UTC)


def _mask_address(match: re.Match[str]) -> str:
    value = int(match.group())
    low, high = _ADDRESS_RANGE
    return "<id>" if low <= value <= high and value % 8 == 0 else match.group()


def _in_window(moment: datetime, ran: RunWindow) -> bool:
    """Whether ``moment`` falls within the run, give or take :data:`CLOCK_SLACK_S`. A naive
    time is the kernel's local time, in an unknown time zone: any offset that is a whole
    number of quarter hours between -12 h and +14 h is tried."""
    slack = timedelta(seconds=CLOCK_SLACK_S)
    start, end = ran[0] - slack, ran[1] + slack
    if moment.tzinfo is not None:
        return start <= moment <= end
    naive = moment.replace(tzinfo=UTC)
    return any(
        start <= naive - timedelta(minutes=15 * quarter) <= end for quarter in range(-56, 49)
    )


def _fraction(digits: str | None) -> int:
    return int((digits or "0")[:6].ljust(6, "0"))


def _mask_timestamp(ran: RunWindow) -> Callable[[re.Match[str]], str]:
    def mask(match: re.Match[str]) -> str:
        day, clock, fraction, zone = match.groups()
        try:
            moment = datetime.fromisoformat(f"{day}T{clock}").replace(
                microsecond=_fraction(fraction)
            )
            if zone:
                moment = moment.replace(
                    tzinfo=datetime.fromisoformat(f"2000-01-01T00:00:00{zone}").tzinfo
                )
        except ValueError:
            return match.group()
        return "<now>" if _in_window(moment, ran) else match.group()

    return mask


def _mask_time_of_day(ran: RunWindow) -> Callable[[re.Match[str]], str]:
    def mask(match: re.Match[str]) -> str:
        try:
            clock = time.fromisoformat(match.group(1).zfill(8))
        except ValueError:
            return match.group()
        clock = clock.replace(microsecond=_fraction(match.group(2)))
        days = {ran[0].date() + timedelta(days=n) for n in (-1, 0, 1)} | {ran[1].date()}
        hit = any(_in_window(datetime.combine(day, clock), ran) for day in days)
        return "<now>" if hit else match.group()

    return mask


def _mask_uuid1(ran: RunWindow) -> Callable[[re.Match[str]], str]:
    def mask(match: re.Match[str]) -> str:
        made = uuid.UUID(match.group())
        moment = _UUID_EPOCH + timedelta(microseconds=made.time // 10)
        return "<uuid1>" if _in_window(moment, ran) else match.group()

    return mask


def normalize_text(text: str, extra_ids: tuple[str, ...] = (), ran: RunWindow | None = None) -> str:
    """Mask what legitimately changes between runs; see the module docstring. Readings of
    the clock are masked only when ``ran``, when the cell ran, is known and they fall in it."""
    for ident in extra_ids:
        if ident:
            text = text.replace(ident, "<session>")
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    if ran is not None:
        text = _TIMESTAMP.sub(_mask_timestamp(ran), text)
        text = _TIME_OF_DAY.sub(_mask_time_of_day(ran), text)
        text = _UUID.sub(_mask_uuid1(ran), text)
    text = _BARE_INT.sub(_mask_address, text)
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    return "\n".join(lines).strip("\n")


def normalize_svg(svg: str) -> str:
    """SVG text without generated ids, references to them, and its metadata block."""
    return normalize_text(_SVG_IDS.sub("", _SVG_METADATA.sub("", svg)))


def _float_text(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def normalize_json(
    value: Any, extra_ids: tuple[str, ...] = (), ran: RunWindow | None = None
) -> Any:
    """JSON with strings normalised as text (numbers are kept; see :func:`numbers_match`)."""
    if isinstance(value, dict):
        return {k: normalize_json(v, extra_ids, ran) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize_json(v, extra_ids, ran) for v in value]
    if isinstance(value, str):
        return normalize_text(value, extra_ids, ran)
    if isinstance(value, float):
        return _float_text(value)
    return value


def numbers_match(a: str, b: str) -> bool:
    """Two numbers as printed: integers exactly, floats within REL_TOL (zero only matches
    zero)."""
    a_float = any(c in a for c in ".eE")
    b_float = any(c in b for c in ".eE")
    if not a_float and not b_float:
        return a.lstrip("+") == b.lstrip("+")
    if a_float != b_float:
        return False
    return math.isclose(float(a), float(b), rel_tol=REL_TOL)


def texts_match(a: str, b: str) -> bool:
    """Two normalised texts are the same apart from floats within tolerance."""
    if a == b:
        return True
    if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
        return False
    return all(
        numbers_match(x, y) for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True)
    )


# ------------------------------------------------------------------------ comparisons


def first_difference(recorded: str, replayed: str) -> str:
    """Where two texts first differ, as 'line N: recorded ... / replayed ...'."""
    a, b = recorded.split("\n"), replayed.split("\n")
    for n, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        if not texts_match(x, y):
            return f"line {n}: recorded {x[:80]!r}, replayed {y[:80]!r}"
    if len(a) != len(b):
        return f"recorded {len(a)} lines, replayed {len(b)}"
    return "texts differ"  # pragma: no cover - only reached for equal texts


def compare_text(
    what: str,
    recorded: str,
    replayed: str,
    extra_ids: tuple[str, ...] = (),
    *,
    recorded_ran: RunWindow | None = None,
    replayed_ran: RunWindow | None = None,
) -> str | None:
    """None if the texts match once normalised, else a description of the difference.
    ``recorded_ran`` and ``replayed_ran`` say when each run happened, for readings of the
    clock; without them no timestamp is masked."""
    a = normalize_text(recorded, extra_ids, recorded_ran)
    b = normalize_text(replayed, extra_ids, replayed_ran)
    if texts_match(a, b):
        return None
    return f"{what} differs: {first_difference(a, b)}"


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json_difference(a: Any, b: Any, path: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key not in b:
                return f"{path}.{key} missing in replay"
            if key not in a:
                return f"{path}.{key} only in replay"
            found = _json_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items recorded, {len(b)} replayed"
        for n, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _json_difference(x, y, f"{path}[{n}]")
            if found:
                return found
        return None
    if _is_number(a) and _is_number(b):
        if isinstance(a, int) and isinstance(b, int):
            same = a == b
        else:
            same = math.isclose(a, b, rel_tol=REL_TOL)
        return None if same else f"{path}: recorded {json.dumps(a)}, replayed {json.dumps(b)}"
    if isinstance(a, str) and isinstance(b, str) and texts_match(a, b):
        return None
    if a != b:
        return f"{path}: recorded {json.dumps(a)[:60]}, replayed {json.dumps(b)[:60]}"
    return None


def compare_json(
    what: str,
    recorded: Any,
    replayed: Any,
    extra_ids: tuple[str, ...] = (),
    *,
    recorded_ran: RunWindow | None = None,
    replayed_ran: RunWindow | None = None,
) -> str | None:
    """None if two JSON values match once normalised, else where they differ."""
    found = _json_difference(
        normalize_json(recorded, extra_ids, recorded_ran),
        normalize_json(replayed, extra_ids, replayed_ran),
        "$",
    )
    return f"{what} differs at {found}" if found else None


def image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height read from a PNG, GIF or JPEG header (no Pillow needed)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if data[:2] == b"\xff\xd8":
        pos = 2
        while pos + 9 < len(data):
            if data[pos] != 0xFF:
                return None
            marker = data[pos + 1]
            length = struct.unpack(">H", data[pos + 2 : pos + 4])[0]
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
                return int(width), int(height)
            pos += 2 + length
    return None


def pixel_difference(a: bytes, b: bytes) -> tuple[float, float] | None:
    """(mean difference, share of strongly changed pixels), both 0..1, of two images
    scaled to 128x128 on a white background; None without Pillow."""
    try:
        from PIL import Image, ImageChops
    except ImportError:
        return None

    def thumb(data: bytes) -> Any:
        with Image.open(io.BytesIO(data)) as img:
            rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return (
            Image.alpha_composite(background, rgba)
            .convert("L")
            .resize((128, 128), Image.Resampling.BILINEAR)
        )

    diff = ImageChops.difference(thumb(a), thumb(b))
    histogram = diff.histogram()
    total = sum(histogram)
    mean = sum(level * count for level, count in enumerate(histogram)) / total / 255
    strong = sum(histogram[64:]) / total
    return mean, strong


def compare_images(
    what: str, recorded: bytes, replayed: bytes, tolerance: float = 0.02
) -> str | None:
    """None if two raster images look the same: equal decoded size and, pixel-wise, a mean
    difference within ``tolerance`` with at most 1% of pixels strongly changed."""
    if recorded == replayed:
        return None
    try:
        from PIL import Image

        with Image.open(io.BytesIO(recorded)) as a, Image.open(io.BytesIO(replayed)) as b:
            size_a: tuple[int, int] | None = a.size
            size_b: tuple[int, int] | None = b.size
    except ImportError:
        size_a, size_b = image_size(recorded), image_size(replayed)
    except OSError as exc:
        return f"{what}: cannot decode ({exc})"
    if size_a != size_b:
        return f"{what} size differs: recorded {size_a}, replayed {size_b}"
    measured = pixel_difference(recorded, replayed)
    if measured is None:
        return None  # same size, and pixels cannot be compared without Pillow
    mean, strong = measured
    if mean > tolerance or strong > 0.01:
        return (
            f"{what} pixels differ: mean {mean:.2%} (tolerance {tolerance:.2%}), "
            f"{strong:.2%} strongly changed"
        )
    return None


def _decode_b64(value: Any) -> bytes | None:
    try:
        return base64.b64decode(bundle_text(value), validate=False)
    except (binascii.Error, ValueError):
        return None


def compare_value(
    mime: str,
    recorded: Any,
    replayed: Any,
    *,
    image_tolerance: float = 0.02,
    extra_ids: tuple[str, ...] = (),
    recorded_ran: RunWindow | None = None,
    replayed_ran: RunWindow | None = None,
) -> str | None:
    """Compare one MIME-bundle value of a recorded and a replayed output."""
    ran = {"recorded_ran": recorded_ran, "replayed_ran": replayed_ran}
    if mime in RASTER_MIMES:
        a, b = _decode_b64(recorded), _decode_b64(replayed)
        if a is None or b is None:
            return f"{mime}: not valid base64"
        return compare_images(mime, a, b, image_tolerance)
    if mime == SVG_MIME:
        a_svg, b_svg = normalize_svg(bundle_text(recorded)), normalize_svg(bundle_text(replayed))
        return None if a_svg == b_svg else f"{mime} differs: {first_difference(a_svg, b_svg)}"
    if mime == WIDGET_VIEW_MIME and isinstance(recorded, dict) and isinstance(replayed, dict):
        recorded = {k: v for k, v in recorded.items() if k != "model_id"}
        replayed = {k: v for k, v in replayed.items() if k != "model_id"}
    if mime.endswith("json") and not isinstance(recorded, str | list):
        return compare_json(mime, recorded, replayed, extra_ids, **ran)
    if isinstance(recorded, str | list) and isinstance(replayed, str | list):
        return compare_text(mime, bundle_text(recorded), bundle_text(replayed), extra_ids, **ran)
    return None if recorded == replayed else f"{mime} differs"


# ------------------------------------------------------------------- canonical outputs


@dataclass
class CellOutputs:
    """What a cell produced, in the form replay compares."""

    stdout: str = ""
    stderr: str = ""
    rich: list[dict[str, Any]] = field(default_factory=list)
    error: tuple[str, str] | None = None
    ran: RunWindow | None = None
    #: By position in ``rich``: MIME types the recording kept only as artifacts (its
    #: notebook's output budget), so without a value to compare.
    set_aside: dict[int, list[str]] = field(default_factory=dict)


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def recorded_window(cell: dict[str, Any]) -> RunWindow | None:
    """When a recorded cell ran: the span of JupyterLab's ``metadata.execution`` message
    times and of the service's own start time and duration, or None if none is recorded."""
    meta = cell.get("metadata") or {}
    timing = meta.get("execution") or {}
    moments = [m for m in map(_moment, timing.values()) if m is not None]
    own = meta.get("interp") or {}
    started = _moment(own.get("started_at"))
    if started is not None:
        moments.append(started)
        duration = own.get("duration_ms")
        if isinstance(duration, int | float):
            moments.append(started + timedelta(milliseconds=duration))
    return (min(moments), max(moments)) if moments else None


def outputs_from_cell(cell: dict[str, Any]) -> CellOutputs:
    """The recorded outputs of an nbformat code cell."""
    result = CellOutputs(ran=recorded_window(cell))
    for output in cell.get("outputs") or []:
        kind = output.get("output_type")
        if kind == "stream":
            text = bundle_text(output.get("text", ""))
            if output.get("name") == "stderr":
                result.stderr += text
            else:
                result.stdout += text
        elif kind in ("display_data", "execute_result"):
            data, aside = recorded_form(output)
            if aside:
                result.set_aside[len(result.rich)] = aside
            result.rich.append(data)
        elif kind == "error":
            result.error = (str(output.get("ename", "")), str(output.get("evalue", "")))
    return result


def outputs_from_execution(
    execution: Execution, fetch: Callable[[ArtifactRef], bytes]
) -> CellOutputs:
    """The outputs of a replayed execution; values kept as artifacts are fetched."""
    rich = []
    for output in execution.outputs:
        data = dict(output.data)
        for ref in output.artifacts:
            if ref.mime in data:
                continue
            raw = fetch(ref)
            if ref.mime in RASTER_MIMES or ref.mime == PDF_MIME:
                data[ref.mime] = base64.b64encode(raw).decode("ascii")
            elif ref.mime.endswith("json"):
                data[ref.mime] = json.loads(raw)
            else:
                data[ref.mime] = raw.decode("utf-8", errors="replace")
        rich.append(data)
    error = (execution.error.ename, execution.error.evalue) if execution.error else None
    ran: RunWindow | None = None
    if execution.started_at is not None:
        started = execution.started_at
        if started.tzinfo is None:
            started = started.replace(tzinfo=UTC)
        ran = (started, started + timedelta(milliseconds=execution.duration_ms or 0))
    return CellOutputs(execution.stdout, execution.stderr, rich, error, ran)


def compare_outputs(
    recorded: CellOutputs,
    replayed: CellOutputs,
    *,
    image_tolerance: float = 0.02,
    extra_ids: tuple[str, ...] = (),
) -> list[str]:
    """Every difference between a cell's recorded and replayed outputs (empty: match)."""
    diffs: list[str] = []
    ran = {"recorded_ran": recorded.ran, "replayed_ran": replayed.ran}
    rec_err, rep_err = recorded.error, replayed.error
    if rec_err is not None and rep_err is None:
        diffs.append(f"recorded error {rec_err[0]}: {rec_err[1]}, replay raised nothing")
    elif rec_err is None and rep_err is not None:
        diffs.append(f"replay raised {rep_err[0]}: {rep_err[1]}")
    elif (
        rec_err is not None
        and rep_err is not None
        and compare_text("error", ": ".join(rec_err), ": ".join(rep_err), extra_ids, **ran)
    ):
        diffs.append(
            f"error differs: recorded {rec_err[0]}: {rec_err[1]}, "
            f"replayed {rep_err[0]}: {rep_err[1]}"
        )
    for what, a, b in (
        ("stdout", recorded.stdout, replayed.stdout),
        ("stderr", recorded.stderr, replayed.stderr),
    ):
        found = compare_text(what, a, b, extra_ids, **ran)
        if found:
            diffs.append(found)
    if len(recorded.rich) != len(replayed.rich):
        diffs.append(f"{len(recorded.rich)} rich outputs recorded, {len(replayed.rich)} replayed")
    for n, (a_data, b_data) in enumerate(zip(recorded.rich, replayed.rich, strict=False), start=1):
        for mime in recorded.set_aside.get(n - 1, []):
            if mime not in b_data:
                diffs.append(f"output {n}: {mime} missing in replay")
        for mime, value in a_data.items():
            if mime not in b_data:
                diffs.append(f"output {n}: {mime} missing in replay")
                continue
            found = compare_value(
                mime,
                value,
                b_data[mime],
                image_tolerance=image_tolerance,
                extra_ids=extra_ids,
                **ran,
            )
            if found:
                diffs.append(f"output {n}: {found}")
    return diffs
