"""Pure decoding of seqsvr's ids, without a server: the Rust decoder's layouts
(crates/seqsvr-core/src/idscheme.rs) bit for bit, as the Go SDK's decode.go has them.

Layouts, most significant bits first:

- snowflake: 1 sign + 41-bit ms + 10-bit worker + 12-bit sequence, from 2010-11-04T01:42:54.657Z.
- uid-generator (Baidu): 1 sign + 28-bit seconds + 22-bit worker + 13-bit sequence from
  2016-05-20 by default, widths and epoch configurable (its default ran out on 2024-11-20).
- weibo: 1 sign + 41-bit ms + 5-bit server (the worker) + 5-bit business + 12-bit sequence,
  from 2021-11-12.
- rongcloud: 80 bits = 42-bit Unix ms + 12-bit sequence + 4-bit session type + 22-bit session
  hash, written XXXX-XXXX-XXXX-XXXX in a base-32 alphabet without 0, 1, I and O.
- uuidv7 (RFC 9562): 48-bit Unix ms + version 7 + 12-bit counter + variant 0b10 + 62-bit
  rand_b whose top 16 bits are the worker id.
- js53: 53 bits = 41-bit ms + 5-bit worker + 7-bit sequence from 2025-01-01 by default (widths
  summing to 53, unit and epoch configurable): never above 2^53 - 1.

Everything here is pure: no clock is read (``load`` takes "now" as an argument) and nothing is
dialled. Errors are :class:`DecodeError` (a ValueError) with the Rust decoder's messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, Union

__all__ = [
    "DecodeError", "LayoutSpec", "Layout", "Fields", "Decoded", "decode", "decode_id",
    "spec_of", "session_hash_of", "rfc3339_ms", "SCHEMES", "RONGCLOUD_ALPHABET",
    "TWITTER_EPOCH_MS", "UID_GENERATOR_EPOCH_MS", "WEIBO_EPOCH_MS", "JS53_EPOCH_MS",
    "JS_MAX_SAFE_INTEGER", "UUID_RANDOM_BITS", "SESSION_TYPES", "SESSION_HASHES", "SESSION_KEYS",
]

SNOWFLAKE, UID_GENERATOR, WEIBO, RONGCLOUD, UUIDV7, JS53 = (
    "snowflake", "uid-generator", "weibo", "rongcloud", "uuidv7", "js53")
#: The six schemes, by their names in the cluster config (``scheme = "..."``).
SCHEMES = (SNOWFLAKE, UID_GENERATOR, WEIBO, RONGCLOUD, UUIDV7, JS53)

TWITTER_EPOCH_MS = 1_288_834_974_657
UID_GENERATOR_EPOCH_MS = 1_463_702_400_000
WEIBO_EPOCH_MS = 1_636_675_200_000
JS53_EPOCH_MS = 1_735_689_600_000
#: 2^53 - 1, JavaScript's Number.MAX_SAFE_INTEGER: every js53 id is at most this.
JS_MAX_SAFE_INTEGER = (1 << 53) - 1
#: How many low bits of a uuidv7 rand_b are random: the top 16 of its 62 carry the worker id.
UUID_RANDOM_BITS = 46
SESSION_TYPES = 1 << 4
SESSION_HASHES = 1 << 22
#: The number of rongcloud (type, hash) keys: the default session uid range.
SESSION_KEYS = 1 << 26
#: rongcloud's base-32 alphabet: 2-9 and A-Z without I and O, in index (and ASCII) order.
RONGCLOUD_ALPHABET = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"

_ID_BITS = {SNOWFLAKE: 64, UID_GENERATOR: 64, WEIBO: 64, JS53: 53, RONGCLOUD: 80, UUIDV7: 128}
_U64_MAX = (1 << 64) - 1

# Parts, by the names the Rust decoder gives them; sign, version and variant are constants.
SIGN, TIME, WORKER, BUSINESS = "sign", "time", "worker", "business"
SESSION_TYPE, SESSION_HASH, SEQUENCE = "session type", "session hash", "sequence"
VERSION, VARIANT, RAND = "version", "variant", "rand_b"
_CONSTANTS = {SIGN: 0, VERSION: 7, VARIANT: 0b10}
_FIELD_PARTS = (TIME, WORKER, BUSINESS, SESSION_TYPE, SESSION_HASH, SEQUENCE, RAND)
_FIELD_NAMES = {TIME: "time", WORKER: "worker", BUSINESS: "business", SESSION_TYPE: "session_type",
                SESSION_HASH: "session_hash", SEQUENCE: "sequence", RAND: "rand"}


class DecodeError(ValueError):
    """An id or text that is not one of the layout's ids, or a layout that does not load."""


@dataclass
class Fields:
    """The variable parts of one id (0 for a part the scheme lacks). ``time`` is in the
    layout's units since its epoch; ``worker`` is weibo's server number for weibo; ``rand`` is
    uuidv7's 62-bit rand_b."""

    time: int = 0
    worker: int = 0
    business: int = 0
    session_type: int = 0
    session_hash: int = 0
    sequence: int = 0
    rand: int = 0

    def get(self, part: str) -> int:
        return getattr(self, _FIELD_NAMES[part])

    def set(self, part: str, value: int) -> None:
        setattr(self, _FIELD_NAMES[part], value)


@dataclass(frozen=True)
class LayoutSpec:
    """A layout as the cluster config writes it (``[ids.schemes.NAME]``); None fields take the
    scheme's defaults. Only uid-generator and js53 take widths; uuidv7 takes no epoch or unit."""

    scheme: str
    epoch_ms: Optional[int] = None
    unit: str = ""
    time_bits: Optional[int] = None
    worker_bits: Optional[int] = None
    seq_bits: Optional[int] = None

    @classmethod
    def from_mapping(cls, m: Dict) -> "LayoutSpec":
        """From a mapping with the cluster file's keys (scheme, epoch_ms, unit, time_bits,
        worker_bits, seq_bits); other keys are ignored."""
        return cls(scheme=str(m.get("scheme", "")), epoch_ms=m.get("epoch_ms"), unit=m.get("unit") or "",
                   time_bits=m.get("time_bits"), worker_bits=m.get("worker_bits"), seq_bits=m.get("seq_bits"))

    def load(self, now_ms: int) -> "Layout":
        """Fills in the defaults and validates the layout at ``now_ms`` (ms since the Unix epoch),
        as the AllocSvrs load it: widths summing to the id's size, time and sequence at least one
        bit, the epoch not in the future and the time field not run out."""
        layout = self._build()
        layout._check(now_ms)
        return layout

    def load_shape(self) -> "Layout":
        """Validates everything but the time range (a layout that ran out still decodes)."""
        layout = self._build()
        layout._check(layout.epoch_ms)
        return layout

    def _build(self) -> "Layout":
        s = self.scheme
        custom = self.time_bits is not None or self.worker_bits is not None or self.seq_bits is not None
        takes_widths = s in (UID_GENERATOR, JS53)
        if s not in _ID_BITS:
            raise DecodeError(f'unknown id scheme {_go_quote(s)}: expected one of snowflake, uid-generator, weibo, rongcloud, uuidv7, js53')
        if custom and not takes_widths:
            raise DecodeError(f"{s}'s widths are fixed; only uid-generator and js53 take time_bits, worker_bits and seq_bits")
        if self.unit not in ("", "ms", "s"):
            raise DecodeError(f"unknown time unit {_go_quote(self.unit)}: ms or s")

        def w(v, default):
            return default if v is None else int(v)

        epoch, unit = 0, "ms"
        if s == SNOWFLAKE:
            epoch = TWITTER_EPOCH_MS
            parts = [(SIGN, 1), (TIME, 41), (WORKER, 10), (SEQUENCE, 12)]
        elif s == UID_GENERATOR:
            epoch, unit = UID_GENERATOR_EPOCH_MS, "s"
            parts = [(SIGN, 1), (TIME, w(self.time_bits, 28)), (WORKER, w(self.worker_bits, 22)),
                     (SEQUENCE, w(self.seq_bits, 13))]
        elif s == JS53:
            epoch = JS53_EPOCH_MS
            parts = [(TIME, w(self.time_bits, 41)), (WORKER, w(self.worker_bits, 5)), (SEQUENCE, w(self.seq_bits, 7))]
        elif s == WEIBO:
            epoch = WEIBO_EPOCH_MS
            parts = [(SIGN, 1), (TIME, 41), (WORKER, 5), (BUSINESS, 5), (SEQUENCE, 12)]
        elif s == RONGCLOUD:
            parts = [(TIME, 42), (SEQUENCE, 12), (SESSION_TYPE, 4), (SESSION_HASH, 22)]
        else:  # uuidv7
            if (self.epoch_ms is not None and self.epoch_ms != 0) or self.unit not in ("", "ms"):
                raise DecodeError("uuidv7's epoch (the Unix epoch) and unit (ms) are fixed by RFC 9562 §5.7")
            parts = [(TIME, 48), (VERSION, 4), (SEQUENCE, 12), (VARIANT, 2), (RAND, 62)]
        if self.epoch_ms is not None:
            epoch = int(self.epoch_ms)
        if self.unit:
            unit = self.unit
        return Layout(s, epoch, unit, parts)


def spec_of(scheme: str) -> LayoutSpec:
    """The scheme with all its defaults."""
    return LayoutSpec(scheme)


def _max_of(width: int) -> int:
    return _U64_MAX if width >= 64 else (1 << width) - 1


_MS_PER_YEAR = 365.2425 * 86_400_000.0


class Layout:
    """A validated layout: a scheme, its epoch (``epoch_ms``) and time unit (``unit``: "ms" or
    "s"), and its bit fields (``parts``: (name, width) pairs, most significant first). Made by
    :meth:`LayoutSpec.load`."""

    def __init__(self, scheme: str, epoch_ms: int, unit: str, parts: List[Tuple[str, int]]):
        self.scheme = scheme
        self.epoch_ms = epoch_ms
        self.unit = unit
        self.parts = parts

    def __repr__(self) -> str:
        return f"Layout({self.scheme}: {self.bits}; {self.unit} since {rfc3339_ms(self.epoch_ms)})"

    @property
    def id_bits(self) -> int:
        """How many bits the scheme's ids have."""
        return _ID_BITS[self.scheme]

    def width(self, part: str) -> int:
        """The width of ``part`` (0 if the scheme has none)."""
        for p, w in self.parts:
            if p == part:
                return w
        return 0

    def has(self, part: str) -> bool:
        return any(p == part for p, _ in self.parts)

    @property
    def bits(self) -> str:
        """The bit fields in one line, e.g. "sign 1 + time 41 + worker 10 + sequence 12"."""
        return " + ".join(f"{p} {w}" for p, w in self.parts)

    def _check(self, now_ms: int) -> None:
        total = sum(w for _, w in self.parts)
        if total != self.id_bits:
            if self.scheme == JS53:
                raise DecodeError(
                    f"js53: the widths ({self.bits}) sum to {total} bits, but its ids have exactly 53 so that none ever exceeds "
                    "2^53 - 1 = 9007199254740991 (JavaScript's Number.MAX_SAFE_INTEGER) in the layout's whole life; "
                    "choose time_bits + worker_bits + seq_bits = 53")
            raise DecodeError(f"{self.scheme}: the widths ({self.bits}) sum to {total} bits, but its ids have {self.id_bits}")
        for p in (TIME, SEQUENCE):
            if self.width(p) == 0:
                raise DecodeError(f"{self.scheme}: the {p} field needs at least 1 bit")
        if self.epoch_ms > now_ms:
            raise DecodeError(f"{self.scheme}: the epoch {rfc3339_ms(self.epoch_ms)} is in the future (now is {rfc3339_ms(now_ms)})")
        if now_ms >= self.runs_out_at_ms:
            raise DecodeError(
                f"{self.scheme}: {self.width(TIME)} bits of {self.unit} from {rfc3339_ms(self.epoch_ms)} last "
                f"{self.lifetime_years:.1f} years and ran out at {rfc3339_ms(self.runs_out_at_ms)} (now is {rfc3339_ms(now_ms)}); "
                "choose a later epoch or more time bits")

    @property
    def unit_ms(self) -> int:
        return 1000 if self.unit == "s" else 1

    @property
    def max_time(self) -> int:
        """The last time unit the layout can hold."""
        return _max_of(self.width(TIME))

    def unix_ms(self, units: int) -> int:
        """The Unix ms at which time unit ``units`` begins (saturating at 2^64 - 1)."""
        return min(units * self.unit_ms + self.epoch_ms, _U64_MAX)

    @property
    def runs_out_at_ms(self) -> int:
        """The first Unix ms the time field cannot hold (2^64 - 1 if beyond it)."""
        return min((self.max_time + 1) * self.unit_ms + self.epoch_ms, _U64_MAX)

    @property
    def lifetime_years(self) -> float:
        """How many years the time field lasts from the epoch."""
        return (float(self.max_time) + 1.0) * float(self.unit_ms) / _MS_PER_YEAR

    def describe_range(self) -> str:
        """E.g. "lasts 69.7 years from 2010-11-04T01:42:54.657Z, until 2080-07-10T17:30:30.209Z"."""
        return (f"lasts {self.lifetime_years:.1f} years from {rfc3339_ms(self.epoch_ms)}, "
                f"until {rfc3339_ms(self.runs_out_at_ms)}")

    def encode(self, f: Fields) -> int:
        """Packs fields into an id; a part the layout lacks must be 0 and each must fit."""
        for p in _FIELD_PARTS:
            v, w = f.get(p), self.width(p)
            if w == 0 and v != 0:
                raise DecodeError(f"{self.scheme} has no {p} field, but it was given as {v} (must be 0)")
            if v < 0 or v > _max_of(w):
                raise DecodeError(f"{self.scheme}: {p} {v} does not fit in {w} bits (at most {_max_of(w)})")
        out = 0
        for p, w in self.parts:
            v = _CONSTANTS[p] if p in _CONSTANTS else f.get(p)
            out = (out << w) | v
        return out

    def decode_fields(self, id_: int) -> Fields:
        """Unpacks an id, checking its width and its constant bits (sign, UUID version and variant)."""
        if id_ < 0 or id_ >> 128:
            raise DecodeError(f"{self.scheme}: {id_} is not an unsigned 128-bit number")
        width = self.id_bits
        if width < 128 and id_ >> width:
            raise DecodeError(f"{self.scheme}: {hex(id_)} has more than {width} bits")
        f = Fields()
        rest = id_
        for p, w in reversed(self.parts):
            v = rest & _max_of(w)
            rest >>= w
            if p in _CONSTANTS:
                if v != _CONSTANTS[p]:
                    raise DecodeError(f"{self.scheme}: the {p} bits are {bin(v)}, expected {bin(_CONSTANTS[p])}")
                continue
            f.set(p, v)
        return f

    def format(self, id_: int) -> str:
        """An id's text form: decimal for the 64-bit schemes, the canonical 8-4-4-4-12 lowercase
        form for uuidv7, XXXX-XXXX-XXXX-XXXX for rongcloud. Checks the id as decode_fields does."""
        self.decode_fields(id_)
        if self.scheme == RONGCLOUD:
            chars = []
            for i in range(16):
                if i > 0 and i % 4 == 0:
                    chars.append("-")
                chars.append(RONGCLOUD_ALPHABET[(id_ >> (75 - 5 * i)) & 0x1F])
            return "".join(chars)
        if self.scheme == UUIDV7:
            h = f"{id_:032x}"
            return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
        return str(id_)

    def parse(self, text: str) -> int:
        """Reads format's text (rongcloud and UUID letters in either case) and checks the id."""
        if self.scheme == RONGCLOUD:
            id_, why = _parse_rongcloud(text)
        elif self.scheme == UUIDV7:
            id_, why = _parse_uuid(text)
        else:
            id_, why = _parse_u64(text)
        if why:
            raise DecodeError(f"{self.scheme}: cannot parse {_go_quote(text)}: {why}")
        self.decode_fields(id_)
        return id_


def _go_quote(s: str) -> str:
    """Go's %q of a string (strconv.Quote) for the texts the decoder quotes."""
    out = ['"']
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) > 0xFF else f"\\x{ord(ch):02x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def _go_quote_byte(b: int) -> str:
    """Go's %q of rune(b) for a byte b."""
    ch = chr(b)
    if ch == "'":
        return "'\\''"
    if ch == "\\":
        return "'\\\\'"
    if ch.isprintable():
        return f"'{ch}'"
    return f"'\\x{b:02x}'"


def _parse_u64(text: str) -> Tuple[int, str]:
    """A decimal u64 as Rust's str::parse reads it (an optional '+', digits only), with its reasons."""
    digits = text[1:] if text.startswith("+") and len(text) > 1 else text
    if text == "":
        return 0, "not a decimal u64 (cannot parse integer from empty string)"
    if not all("0" <= c <= "9" for c in digits):
        return 0, "not a decimal u64 (invalid digit found in string)"
    v = int(digits)
    if v > _U64_MAX:
        return 0, "not a decimal u64 (number too large to fit in target type)"
    return v, ""


def _parse_rongcloud(text: str) -> Tuple[int, str]:
    raw = text.encode("utf-8")
    if len(raw) != 19:
        return 0, f"expected 19 characters (4 groups of 4 joined by '-'), got {len(text)}"
    id_ = 0
    for i, b in enumerate(raw):
        if i % 5 == 4:
            if b != ord("-"):
                return 0, f"expected '-' at position {i + 1}"
            continue
        upper = b - 32 if ord("a") <= b <= ord("z") else b
        index = RONGCLOUD_ALPHABET.find(chr(upper)) if upper < 128 else -1
        if index < 0:
            return 0, f"{_go_quote_byte(b)} at position {i + 1} is not one of {RONGCLOUD_ALPHABET} (0, 1, I and O are left out)"
        id_ = (id_ << 5) | index
    return id_, ""


def _parse_uuid(text: str) -> Tuple[int, str]:
    raw = text.encode("utf-8")
    if len(raw) != 36:
        return 0, f"expected 36 characters (8-4-4-4-12 hex digits), got {len(text)}"
    id_ = 0
    for i, b in enumerate(raw):
        if i in (8, 13, 18, 23):
            if b != ord("-"):
                return 0, f"expected '-' at position {i + 1}"
            continue
        c = chr(b)
        if "0" <= c <= "9":
            d = b - ord("0")
        elif "a" <= c <= "f":
            d = b - ord("a") + 10
        elif "A" <= c <= "F":
            d = b - ord("A") + 10
        else:
            return 0, f"{_go_quote_byte(b)} at position {i + 1} is not a hex digit"
        id_ = (id_ << 4) | d
    return id_, ""


def _parse_u128(text: str) -> Optional[int]:
    digits = text[1:] if text.startswith("+") else text
    if not digits or not all("0" <= c <= "9" for c in digits):
        return None
    v = int(digits)
    return v if v >> 128 == 0 else None


@dataclass
class Decoded:
    """An id decoded without a server (:func:`decode`).

    ``id``: the id as a number; ``fields``: the raw fields (0 for a part the scheme lacks: see
    :meth:`has`); ``unix_ms``/``time_rfc3339``: when the id's time unit starts; ``worker``: the
    worker id the id carries (uuidv7: the top 16 bits of rand_b; None for rongcloud, which has
    none); ``text``: the canonical text form; ``bits``: the bit fields in one line;
    ``epoch_rfc3339``: the layout's epoch; ``range``: how long the layout's time field lasts.
    """

    scheme: str
    id: int
    fields: Fields
    unit: str
    unix_ms: int
    time_rfc3339: str
    worker: Optional[int]
    text: str
    bits: str
    epoch_rfc3339: str
    range: str
    parts: Tuple[str, ...] = field(default=())

    def has(self, part: str) -> bool:
        """Whether the id's scheme has ``part`` ("business", "session type", "rand_b", ...)."""
        return part in self.parts

    @property
    def layout_text(self) -> str:
        """The layout in one line, as the Decode RPC gives it: bits, unit and epoch, range."""
        return f"{self.bits}; {self.unit} since {self.epoch_rfc3339}; {self.range}"

    def view(self) -> Dict[str, object]:
        """The decoded id as ``seqctl id decode --json`` shows it (less scheme and kind): ids and
        rand_b as decimal strings, None for a part the scheme lacks."""
        f = self.fields

        def opt(part, v):
            return v if self.has(part) else None

        return {
            "id": str(self.id), "text": self.text, "time": self.time_rfc3339, "time_units": f.time,
            "unit": self.unit, "epoch": self.epoch_rfc3339, "unix_ms": self.unix_ms, "worker": self.worker,
            "business": opt(BUSINESS, f.business), "session_type": opt(SESSION_TYPE, f.session_type),
            "session_hash": opt(SESSION_HASH, f.session_hash), "sequence": f.sequence,
            "rand": str(f.rand) if self.has(RAND) else None, "layout": self.bits, "range": self.range,
        }


def decode(layout: Layout, text_or_id: Union[str, int]) -> Decoded:
    """Decodes ``text_or_id`` in ``layout`` without a server: the id's text form (decimal for
    the 64-bit schemes, 8-4-4-4-12 hex for uuidv7, XXXX-XXXX-XXXX-XXXX for rongcloud) or, for the
    wider schemes, the id as a decimal number; an ``int`` is taken as the id itself. Pure: it
    reads no clock and dials nothing. Raises :class:`DecodeError` saying why the text is not one
    of the layout's ids."""
    if isinstance(text_or_id, int):
        return decode_id(layout, text_or_id)
    text = text_or_id.strip()
    try:
        id_ = layout.parse(text)
    except DecodeError:
        n = _parse_u128(text) if layout.id_bits > 64 and text and all("0" <= c <= "9" for c in text) else None
        if n is None:
            raise
        id_ = n
    return decode_id(layout, id_)


def decode_id(layout: Layout, id_: int) -> Decoded:
    """Decodes the id ``id_`` (a number) in ``layout``, checking its width and constant bits."""
    f = layout.decode_fields(id_)
    text = layout.format(id_)
    unix_ms = layout.unix_ms(f.time)
    if layout.scheme == UUIDV7:
        worker: Optional[int] = f.rand >> UUID_RANDOM_BITS
    elif layout.scheme == RONGCLOUD:
        worker = None
    else:
        worker = f.worker
    return Decoded(scheme=layout.scheme, id=id_, fields=f, unit=layout.unit, unix_ms=unix_ms,
                   time_rfc3339=rfc3339_ms(unix_ms), worker=worker, text=text, bits=layout.bits,
                   epoch_rfc3339=rfc3339_ms(layout.epoch_ms), range=layout.describe_range(),
                   parts=tuple(p for p, _ in layout.parts))


def session_hash_of(session_id: str) -> int:
    """The 22-bit session hash of a rongcloud session id: the low 22 bits of Java's
    String.hashCode() of it (over its UTF-16 code units), as the AllocSvrs compute it."""
    raw = session_id.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(raw), 2):
        h = (h * 31 + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h & (SESSION_HASHES - 1)


_MS_PER_DAY = 86_400_000


def rfc3339_ms(unix_ms: int) -> str:
    """``unix_ms`` as RFC 3339 UTC with milliseconds, e.g. 2024-11-20T21:24:16.000Z (years past
    9999 with more digits), as the Rust decoder writes it."""
    days, ms = divmod(unix_ms, _MS_PER_DAY)
    y, m, d = _civil_from_days(days)
    return (f"{y:04d}-{m:02d}-{d:02d}T{ms // 3_600_000:02d}:{ms // 60_000 % 60:02d}:"
            f"{ms // 1000 % 60:02d}.{ms % 1000:03d}Z")


def _civil_from_days(days: int) -> Tuple[int, int, int]:
    """(year, month, day) of a day count since 1970-01-01 (H. Hinnant's civil_from_days)."""
    z = days + 719_468
    era = z // 146_097
    doe = z % 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    y = yoe + era * 400
    if m <= 2:
        y += 1
    return y, m, d
