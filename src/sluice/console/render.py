"""Pure presentation helpers for the templates: message values, sizes, times, the lag chart."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from markupsafe import Markup, escape

# A value bigger than this is shown cut, with its full size named: a browser table is no place for 1 MB.
MAX_SHOWN_BYTES = 16 * 1024
_HEX_SHOWN_BYTES = 512


@dataclass
class Rendered:
    kind: str  # "json", "text", "hex", "null", or "avro" / "protobuf" / "json-schema" when decoded
    text: str
    size: int
    cut: bool
    preview: str = ""  # one line for the table; `text` is shown when the row is opened
    # Registry-framed data the console decoded: the schema id and the subject(s) registering it.
    schema_id: int | None = None
    subject: str | None = None
    note: str = ""  # why framed-looking data was not decoded


def _one_line(text: str, limit: int = 140) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def render_bytes(data: bytes | None) -> Rendered:
    """JSON pretty-printed when it parses as an object or array, text when it is printable UTF-8, else hex."""
    if data is None:
        return Rendered("null", "", 0, False)
    size = len(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _hex(data)
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") and size <= 4 * MAX_SHOWN_BYTES:
        try:
            parsed = json.loads(text)
        except ValueError:
            pass
        else:
            pretty = json.dumps(parsed, indent=2, ensure_ascii=False)
            compact = json.dumps(parsed, ensure_ascii=False, separators=(", ", ": "))
            return Rendered(
                "json", pretty[:MAX_SHOWN_BYTES], size, len(pretty) > MAX_SHOWN_BYTES, _one_line(compact)
            )
    if all(c.isprintable() or c in "\n\r\t" for c in text[:MAX_SHOWN_BYTES]):
        return Rendered("text", text[:MAX_SHOWN_BYTES], size, size > MAX_SHOWN_BYTES, _one_line(text))
    return _hex(data)


def _hex(data: bytes) -> Rendered:
    shown = data[:_HEX_SHOWN_BYTES]
    lines = []
    for at in range(0, len(shown), 16):
        chunk = shown[at : at + 16]
        hexpart = " ".join(f"{b:02x}" for b in chunk)
        ascii_part = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {hexpart:<47}  {ascii_part}")
    preview = " ".join(f"{b:02x}" for b in data[:24]) + (" …" if len(data) > 24 else "")
    return Rendered("hex", "\n".join(lines), len(data), len(data) > _HEX_SHOWN_BYTES, preview)


def short_bytes(data: bytes | None, limit: int = 80) -> str:
    """A one-line preview of a key or header value."""
    if data is None:
        return ""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data[: limit // 2].hex() + ("…" if len(data) > limit // 2 else "")
    if not text.isprintable():
        return "0x" + data[: limit // 2].hex() + ("…" if len(data) > limit // 2 else "")
    return text if len(text) <= limit else text[:limit] + "…"


def human_bytes(n: int | None) -> str:
    if n is None:
        return "—"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def number(n: int | float | None) -> str:
    if n is None:
        return "—"
    if isinstance(n, float):
        return f"{n:,.1f}"
    return f"{n:,}"


def timestamp(ms: int | None) -> str:
    if ms is None:
        return "—"
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def _tick(value: float) -> str:
    return number(int(value)) if value == int(value) else f"{value:,.1f}"


def lag_chart(points: list[tuple[float, int]], now: float, *, width: int = 1160, height: int = 200) -> Markup:
    """An inline SVG line of (epoch seconds, lag) over the last hour, drawn server-side."""
    pad_l, pad_r, pad_t, pad_b = 56, 12, 12, 24
    span = 3600.0
    inner_w, inner_h = width - pad_l - pad_r, height - pad_t - pad_b
    recent = [(t, v) for t, v in points if t >= now - span]
    top = max([v for _, v in recent] + [4])
    # A round top for the axis: 1, 2 or 5 times a power of ten.
    scale = 1
    while scale * 10 <= top:
        scale *= 10
    axis_top = next(m * scale for m in (1, 2, 5, 10) if m * scale >= top)

    def x(t: float) -> float:
        return pad_l + (t - (now - span)) / span * inner_w

    def y(v: float) -> float:
        return pad_t + inner_h - v / axis_top * inner_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        'role="img" aria-label="consumer lag over the last hour">'
    ]
    for frac in (0, 0.5, 1):
        gy = y(axis_top * frac)
        parts.append(f'<line class="grid" x1="{pad_l}" x2="{width - pad_r}" y1="{gy:.1f}" y2="{gy:.1f}"/>')
        parts.append(
            f'<text class="axis" x="{pad_l - 6}" y="{gy + 4:.1f}" text-anchor="end">{_tick(axis_top * frac)}</text>'
        )
    for minutes in (60, 45, 30, 15, 0):
        gx = x(now - minutes * 60)
        label = "now" if minutes == 0 else f"-{minutes} min"
        parts.append(
            f'<text class="axis" x="{gx:.1f}" y="{height - 6}" text-anchor="middle">{escape(label)}</text>'
        )
    if recent:
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in recent)
        parts.append(f'<polyline class="line" points="{path}"/>')
        lx, ly = x(recent[-1][0]), y(recent[-1][1])
        parts.append(f'<circle class="dot" cx="{lx:.1f}" cy="{ly:.1f}" r="3"/>')
    else:
        parts.append(
            f'<text class="empty" x="{width / 2}" y="{height / 2}" text-anchor="middle">'
            "no samples yet: the console samples lag while it runs</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
