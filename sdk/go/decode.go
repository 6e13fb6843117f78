package seqsvr

import (
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Scheme is an id scheme, by its name in the cluster config (`scheme = "..."` of an
// `[ids.schemes.NAME]` table). The layouts are the Rust decoder's
// (crates/seqsvr-core/src/idscheme.rs), bit for bit; most significant bits first:
//
//   - snowflake: 1 sign + 41-bit ms + 10-bit worker + 12-bit sequence, from 2010-11-04T01:42:54.657Z.
//   - uid-generator (Baidu): 1 sign + 28-bit seconds + 22-bit worker + 13-bit sequence from
//     2016-05-20 by default, widths and epoch configurable (its default ran out on 2024-11-20).
//   - weibo: 1 sign + 41-bit ms + 5-bit server (the worker) + 5-bit business + 12-bit sequence,
//     from 2021-11-12.
//   - rongcloud: 80 bits = 42-bit Unix ms + 12-bit sequence + 4-bit session type + 22-bit session
//     hash, written XXXX-XXXX-XXXX-XXXX in a base-32 alphabet without 0, 1, I and O.
//   - uuidv7 (RFC 9562): 48-bit Unix ms + version 7 + 12-bit counter + variant 0b10 + 62-bit
//     rand_b whose top 16 bits are the worker id.
//   - js53: 53 bits = 41-bit ms + 5-bit worker + 7-bit sequence from 2025-01-01 by default
//     (widths summing to 53, unit and epoch configurable): never above 2^53 - 1.
type Scheme string

// The six schemes.
const (
	Snowflake    Scheme = "snowflake"
	UIDGenerator Scheme = "uid-generator"
	Weibo        Scheme = "weibo"
	RongCloud    Scheme = "rongcloud"
	UUIDv7       Scheme = "uuidv7"
	JS53         Scheme = "js53"
)

// Epochs (ms since the Unix epoch) of the schemes' defaults.
const (
	TwitterEpochMs      uint64 = 1_288_834_974_657
	UIDGeneratorEpochMs uint64 = 1_463_702_400_000
	WeiboEpochMs        uint64 = 1_636_675_200_000
	JS53EpochMs         uint64 = 1_735_689_600_000
	// JSMaxSafeInteger is 2^53 - 1, JavaScript's Number.MAX_SAFE_INTEGER: every js53 id is at
	// most this.
	JSMaxSafeInteger uint64 = 1<<53 - 1
)

// idBits is how many bits an id of the scheme has (0 for an unknown scheme).
func (s Scheme) idBits() uint {
	switch s {
	case Snowflake, UIDGenerator, Weibo:
		return 64
	case JS53:
		return 53
	case RongCloud:
		return 80
	case UUIDv7:
		return 128
	}
	return 0
}

// TimeUnit is the unit of a layout's time field: "ms" or "s".
type TimeUnit string

// The two units.
const (
	Millis  TimeUnit = "ms"
	Seconds TimeUnit = "s"
)

func (u TimeUnit) ms() uint64 {
	if u == Seconds {
		return 1000
	}
	return 1
}

// Part is one bit field of a layout; sign, version and variant hold constants.
type Part string

// The parts, by the names the Rust decoder gives them (in layout texts and errors).
const (
	PartSign        Part = "sign"
	PartTime        Part = "time"
	PartWorker      Part = "worker"
	PartBusiness    Part = "business"
	PartSessionType Part = "session type"
	PartSessionHash Part = "session hash"
	PartSequence    Part = "sequence"
	PartVersion     Part = "version"
	PartVariant     Part = "variant"
	PartRand        Part = "rand_b"
)

func (p Part) constant() (uint64, bool) {
	switch p {
	case PartSign:
		return 0, true
	case PartVersion:
		return 7, true
	case PartVariant:
		return 0b10, true
	}
	return 0, false
}

// Fields are the variable parts of one id (0 for a part the scheme does not have).
type Fields struct {
	// Time is in the layout's units since its epoch.
	Time uint64
	// Worker is the worker id (weibo: the server number).
	Worker uint64
	// Business is weibo's business number.
	Business uint64
	// SessionType and SessionHash are rongcloud's session fields.
	SessionType uint64
	SessionHash uint64
	Sequence    uint64
	// Rand is uuidv7's 62-bit rand_b.
	Rand uint64
}

func (f *Fields) get(p Part) uint64 {
	switch p {
	case PartTime:
		return f.Time
	case PartWorker:
		return f.Worker
	case PartBusiness:
		return f.Business
	case PartSessionType:
		return f.SessionType
	case PartSessionHash:
		return f.SessionHash
	case PartSequence:
		return f.Sequence
	case PartRand:
		return f.Rand
	}
	return 0
}

func (f *Fields) set(p Part, v uint64) {
	switch p {
	case PartTime:
		f.Time = v
	case PartWorker:
		f.Worker = v
	case PartBusiness:
		f.Business = v
	case PartSessionType:
		f.SessionType = v
	case PartSessionHash:
		f.SessionHash = v
	case PartSequence:
		f.Sequence = v
	case PartRand:
		f.Rand = v
	}
}

var fieldParts = []Part{PartTime, PartWorker, PartBusiness, PartSessionType, PartSessionHash, PartSequence, PartRand}

// LayoutSpec is a layout as the cluster config writes it (`[ids.schemes.NAME]`); nil and empty
// fields take the scheme's defaults. Only uid-generator and js53 take widths; uuidv7 takes no
// epoch or unit.
type LayoutSpec struct {
	Scheme     Scheme
	EpochMs    *uint64
	Unit       TimeUnit
	TimeBits   *uint32
	WorkerBits *uint32
	SeqBits    *uint32
}

// SpecOf is scheme with all its defaults.
func SpecOf(scheme Scheme) LayoutSpec { return LayoutSpec{Scheme: scheme} }

type partWidth struct {
	part  Part
	width uint
}

// Layout is a validated layout: a scheme, its epoch and time unit, and its bit fields.
type Layout struct {
	scheme  Scheme
	epochMs uint64
	unit    TimeUnit
	parts   []partWidth
}

// Load fills in the defaults and validates the layout at nowMs (ms since the Unix epoch), as
// the AllocSvrs load it: widths summing to the id's size, time and sequence at least one bit,
// the epoch not in the future and the time field not run out.
func (s LayoutSpec) Load(nowMs uint64) (*Layout, error) {
	l, err := s.build()
	if err != nil {
		return nil, err
	}
	if err := l.check(nowMs); err != nil {
		return nil, err
	}
	return l, nil
}

// LoadShape validates everything but the time range (a layout that ran out still decodes).
func (s LayoutSpec) LoadShape() (*Layout, error) {
	l, err := s.build()
	if err != nil {
		return nil, err
	}
	if err := l.check(l.epochMs); err != nil {
		return nil, err
	}
	return l, nil
}

func widthOr(w *uint32, def uint) uint {
	if w == nil {
		return def
	}
	return uint(*w)
}

func (s LayoutSpec) build() (*Layout, error) {
	custom := s.TimeBits != nil || s.WorkerBits != nil || s.SeqBits != nil
	takesWidths := s.Scheme == UIDGenerator || s.Scheme == JS53
	if s.Scheme.idBits() == 0 {
		return nil, fmt.Errorf("unknown id scheme %q: expected one of snowflake, uid-generator, weibo, rongcloud, uuidv7, js53", string(s.Scheme))
	}
	if custom && !takesWidths {
		return nil, fmt.Errorf("%s's widths are fixed; only uid-generator and js53 take time_bits, worker_bits and seq_bits", s.Scheme)
	}
	if s.Unit != "" && s.Unit != Millis && s.Unit != Seconds {
		return nil, fmt.Errorf("unknown time unit %q: ms or s", string(s.Unit))
	}
	var epoch uint64
	unit := Millis
	var parts []partWidth
	switch s.Scheme {
	case Snowflake:
		epoch = TwitterEpochMs
		parts = []partWidth{{PartSign, 1}, {PartTime, 41}, {PartWorker, 10}, {PartSequence, 12}}
	case UIDGenerator:
		epoch, unit = UIDGeneratorEpochMs, Seconds
		parts = []partWidth{{PartSign, 1}, {PartTime, widthOr(s.TimeBits, 28)},
			{PartWorker, widthOr(s.WorkerBits, 22)}, {PartSequence, widthOr(s.SeqBits, 13)}}
	case JS53:
		epoch = JS53EpochMs
		parts = []partWidth{{PartTime, widthOr(s.TimeBits, 41)},
			{PartWorker, widthOr(s.WorkerBits, 5)}, {PartSequence, widthOr(s.SeqBits, 7)}}
	case Weibo:
		epoch = WeiboEpochMs
		parts = []partWidth{{PartSign, 1}, {PartTime, 41}, {PartWorker, 5}, {PartBusiness, 5}, {PartSequence, 12}}
	case RongCloud:
		parts = []partWidth{{PartTime, 42}, {PartSequence, 12}, {PartSessionType, 4}, {PartSessionHash, 22}}
	case UUIDv7:
		if (s.EpochMs != nil && *s.EpochMs != 0) || (s.Unit != "" && s.Unit != Millis) {
			return nil, fmt.Errorf("uuidv7's epoch (the Unix epoch) and unit (ms) are fixed by RFC 9562 §5.7")
		}
		parts = []partWidth{{PartTime, 48}, {PartVersion, 4}, {PartSequence, 12}, {PartVariant, 2}, {PartRand, 62}}
	}
	if s.EpochMs != nil {
		epoch = *s.EpochMs
	}
	if s.Unit != "" {
		unit = s.Unit
	}
	return &Layout{scheme: s.Scheme, epochMs: epoch, unit: unit, parts: parts}, nil
}

func (l *Layout) widthsText() string {
	texts := make([]string, len(l.parts))
	for i, p := range l.parts {
		texts[i] = fmt.Sprintf("%s %d", p.part, p.width)
	}
	return strings.Join(texts, " + ")
}

func (l *Layout) check(nowMs uint64) error {
	var sum uint64
	for _, p := range l.parts {
		sum += uint64(p.width)
	}
	if sum != uint64(l.scheme.idBits()) {
		if l.scheme == JS53 {
			return fmt.Errorf("js53: the widths (%s) sum to %d bits, but its ids have exactly 53 so that none ever exceeds 2^53 - 1 = 9007199254740991 (JavaScript's Number.MAX_SAFE_INTEGER) in the layout's whole life; choose time_bits + worker_bits + seq_bits = 53", l.widthsText(), sum)
		}
		return fmt.Errorf("%s: the widths (%s) sum to %d bits, but its ids have %d", l.scheme, l.widthsText(), sum, l.scheme.idBits())
	}
	for _, p := range []Part{PartTime, PartSequence} {
		if l.Width(p) == 0 {
			return fmt.Errorf("%s: the %s field needs at least 1 bit", l.scheme, p)
		}
	}
	if l.epochMs > nowMs {
		return fmt.Errorf("%s: the epoch %s is in the future (now is %s)", l.scheme, RFC3339Ms(l.epochMs), RFC3339Ms(nowMs))
	}
	if nowMs >= l.RunsOutAtMs() {
		return fmt.Errorf("%s: %d bits of %s from %s last %.1f years and ran out at %s (now is %s); choose a later epoch or more time bits",
			l.scheme, l.Width(PartTime), l.unit, RFC3339Ms(l.epochMs), l.LifetimeYears(), RFC3339Ms(l.RunsOutAtMs()), RFC3339Ms(nowMs))
	}
	return nil
}

// Scheme is the layout's scheme.
func (l *Layout) Scheme() Scheme { return l.scheme }

// EpochMs is the layout's epoch, ms since the Unix epoch.
func (l *Layout) EpochMs() uint64 { return l.epochMs }

// Unit is the layout's time unit.
func (l *Layout) Unit() TimeUnit { return l.unit }

// Parts are the layout's bit fields, most significant first.
func (l *Layout) Parts() []Part {
	out := make([]Part, len(l.parts))
	for i, p := range l.parts {
		out[i] = p.part
	}
	return out
}

// Width is the width of part (0 if the scheme has none).
func (l *Layout) Width(part Part) uint {
	for _, p := range l.parts {
		if p.part == part {
			return p.width
		}
	}
	return 0
}

func maxOf(width uint) uint64 {
	if width >= 64 {
		return math.MaxUint64
	}
	return 1<<width - 1
}

// MaxTime is the last time unit the layout can hold.
func (l *Layout) MaxTime() uint64 { return maxOf(l.Width(PartTime)) }

// UnixMs is the Unix ms at which time unit `units` begins (saturating).
func (l *Layout) UnixMs(units uint64) uint64 {
	hi, lo := bits.Mul64(units, l.unit.ms())
	if hi != 0 {
		return math.MaxUint64
	}
	sum, carry := bits.Add64(lo, l.epochMs, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return sum
}

// RunsOutAtMs is the first Unix ms the time field cannot hold (MaxUint64 if beyond it).
func (l *Layout) RunsOutAtMs() uint64 {
	// (max_time + 1) * unit + epoch, in 128 bits.
	t := l.MaxTime()
	hi, lo := bits.Mul64(t, l.unit.ms())
	lo, c := bits.Add64(lo, l.unit.ms(), 0)
	hi += c
	lo, c = bits.Add64(lo, l.epochMs, 0)
	hi += c
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

const msPerYear = 365.2425 * 86_400_000.0

// LifetimeYears is how many years the time field lasts from the epoch.
func (l *Layout) LifetimeYears() float64 {
	return (float64(l.MaxTime()) + 1.0) * float64(l.unit.ms()) / msPerYear
}

// DescribeRange is e.g. "lasts 69.7 years from 2010-11-04T01:42:54.657Z, until
// 2080-07-10T17:30:30.209Z".
func (l *Layout) DescribeRange() string {
	return fmt.Sprintf("lasts %.1f years from %s, until %s", l.LifetimeYears(), RFC3339Ms(l.epochMs), RFC3339Ms(l.RunsOutAtMs()))
}

// Bits is the bit fields in one line, e.g. "sign 1 + time 41 + worker 10 + sequence 12".
func (l *Layout) Bits() string { return l.widthsText() }

// Encode packs fields into an id; a part the layout lacks must be 0 and each must fit.
func (l *Layout) Encode(f Fields) (U128, error) {
	for _, p := range fieldParts {
		v, w := f.get(p), l.Width(p)
		if w == 0 && v != 0 {
			return U128{}, fmt.Errorf("%s has no %s field, but it was given as %d (must be 0)", l.scheme, p, v)
		}
		if v > maxOf(w) {
			return U128{}, fmt.Errorf("%s: %s %d does not fit in %d bits (at most %d)", l.scheme, p, v, w, maxOf(w))
		}
	}
	var id U128
	for _, p := range l.parts {
		v, ok := p.part.constant()
		if !ok {
			v = f.get(p.part)
		}
		id = id.shl(p.width).or(U128From(v))
	}
	return id, nil
}

// DecodeFields unpacks an id, checking its width and its constant bits (sign, UUID version and
// variant).
func (l *Layout) DecodeFields(id U128) (Fields, error) {
	width := l.scheme.idBits()
	if width < 128 && !id.shr(width).IsZero() {
		return Fields{}, fmt.Errorf("%s: %s has more than %d bits", l.scheme, hexOf(id), width)
	}
	var f Fields
	rest := id
	for i := len(l.parts) - 1; i >= 0; i-- {
		p := l.parts[i]
		v := rest.Lo & maxOf(p.width)
		rest = rest.shr(p.width)
		if expected, ok := p.part.constant(); ok {
			if v != expected {
				return Fields{}, fmt.Errorf("%s: the %s bits are %#b, expected %#b", l.scheme, p.part, v, expected)
			}
			continue
		}
		f.set(p.part, v)
	}
	return f, nil
}

func hexOf(id U128) string {
	if id.Hi == 0 {
		return fmt.Sprintf("%#x", id.Lo)
	}
	return fmt.Sprintf("0x%x%016x", id.Hi, id.Lo)
}

// RongCloudAlphabet is rongcloud's base-32 alphabet: 2-9 and A-Z without I and O, in index
// (and ASCII) order.
const RongCloudAlphabet = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"

// Format is an id's text form: decimal for the schemes held in 64 bits, the canonical
// 8-4-4-4-12 lowercase form for uuidv7, XXXX-XXXX-XXXX-XXXX for rongcloud. Checks the id as
// DecodeFields does.
func (l *Layout) Format(id U128) (string, error) {
	if _, err := l.DecodeFields(id); err != nil {
		return "", err
	}
	switch l.scheme {
	case RongCloud:
		var b strings.Builder
		for i := uint(0); i < 16; i++ {
			if i > 0 && i%4 == 0 {
				b.WriteByte('-')
			}
			b.WriteByte(RongCloudAlphabet[id.shr(75-5*i).Lo&0x1f])
		}
		return b.String(), nil
	case UUIDv7:
		hex := fmt.Sprintf("%016x%016x", id.Hi, id.Lo)
		return hex[0:8] + "-" + hex[8:12] + "-" + hex[12:16] + "-" + hex[16:20] + "-" + hex[20:32], nil
	}
	return id.String(), nil
}

// Parse reads Format's text (rongcloud and UUID letters in either case) and checks the id.
func (l *Layout) Parse(text string) (U128, error) {
	var id U128
	var why string
	switch l.scheme {
	case RongCloud:
		id, why = parseRongCloud(text)
	case UUIDv7:
		id, why = parseUUID(text)
	default:
		var v uint64
		v, why = parseU64(text)
		id = U128From(v)
	}
	if why != "" {
		return U128{}, fmt.Errorf("%s: cannot parse %q: %s", l.scheme, text, why)
	}
	if _, err := l.DecodeFields(id); err != nil {
		return U128{}, err
	}
	return id, nil
}

// parseU64 reads a decimal u64 as Rust's str::parse does (an optional '+', digits only),
// with its reasons.
func parseU64(text string) (uint64, string) {
	digits := text
	if strings.HasPrefix(digits, "+") && len(digits) > 1 {
		digits = digits[1:]
	}
	if text == "" {
		return 0, "not a decimal u64 (cannot parse integer from empty string)"
	}
	for _, c := range []byte(digits) {
		if c < '0' || c > '9' {
			return 0, "not a decimal u64 (invalid digit found in string)"
		}
	}
	v, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, "not a decimal u64 (number too large to fit in target type)"
	}
	return v, ""
}

func parseRongCloud(text string) (U128, string) {
	if len(text) != 19 {
		return U128{}, fmt.Sprintf("expected 19 characters (4 groups of 4 joined by '-'), got %d", len([]rune(text)))
	}
	var id U128
	for i := 0; i < 19; i++ {
		b := text[i]
		if i%5 == 4 {
			if b != '-' {
				return U128{}, fmt.Sprintf("expected '-' at position %d", i+1)
			}
			continue
		}
		upper := b
		if upper >= 'a' && upper <= 'z' {
			upper -= 'a' - 'A'
		}
		index := strings.IndexByte(RongCloudAlphabet, upper)
		if index < 0 {
			return U128{}, fmt.Sprintf("%q at position %d is not one of %s (0, 1, I and O are left out)", rune(b), i+1, RongCloudAlphabet)
		}
		id = id.shl(5).or(U128From(uint64(index)))
	}
	return id, ""
}

func parseUUID(text string) (U128, string) {
	if len(text) != 36 {
		return U128{}, fmt.Sprintf("expected 36 characters (8-4-4-4-12 hex digits), got %d", len([]rune(text)))
	}
	var id U128
	for i := 0; i < 36; i++ {
		b := text[i]
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if b != '-' {
				return U128{}, fmt.Sprintf("expected '-' at position %d", i+1)
			}
			continue
		}
		var d byte
		switch {
		case b >= '0' && b <= '9':
			d = b - '0'
		case b >= 'a' && b <= 'f':
			d = b - 'a' + 10
		case b >= 'A' && b <= 'F':
			d = b - 'A' + 10
		default:
			return U128{}, fmt.Sprintf("%q at position %d is not a hex digit", rune(b), i+1)
		}
		id = id.shl(4).or(U128From(uint64(d)))
	}
	return id, ""
}

// UUIDRandomBits is how many low bits of a uuidv7 rand_b are random: the top 16 of its 62
// carry the worker id.
const UUIDRandomBits = 46

// Decoded is an id decoded without a server (Decode).
type Decoded struct {
	Scheme Scheme
	// ID is the id as a number.
	ID U128
	// Fields are the raw fields (0 for a part the scheme lacks: see Has).
	Fields Fields
	Unit   TimeUnit
	// UnixMs is the Unix ms the id's time unit starts at; TimeRFC3339 the same as text.
	UnixMs      uint64
	TimeRFC3339 string
	// Worker is the worker id the id carries (uuidv7: the top 16 bits of rand_b); nil for
	// rongcloud, which has none.
	Worker *uint64
	// Text is the canonical text form.
	Text string
	// Bits is the bit fields, e.g. "sign 1 + time 41 + worker 10 + sequence 12".
	Bits string
	// EpochRFC3339 is the layout's epoch.
	EpochRFC3339 string
	// Range is how long the layout's time field lasts (Layout.DescribeRange).
	Range string
	parts []Part
}

// Has reports whether the id's scheme has part.
func (d *Decoded) Has(part Part) bool {
	for _, p := range d.parts {
		if p == part {
			return true
		}
	}
	return false
}

// LayoutText is the layout in one line, as the Decode RPC gives it: bits, unit and epoch,
// range.
func (d *Decoded) LayoutText() string {
	return fmt.Sprintf("%s; %s since %s; %s", d.Bits, d.Unit, d.EpochRFC3339, d.Range)
}

// Decode decodes textOrID in layout without a server: the id's text form (decimal for the
// schemes held in 64 bits, 8-4-4-4-12 hex for uuidv7, XXXX-XXXX-XXXX-XXXX for rongcloud) or,
// for the wider schemes, the id as a decimal number. Pure: it reads no clock and dials nothing.
// Errors say why the text is not one of the layout's ids.
func Decode(layout *Layout, textOrID string) (*Decoded, error) {
	text := strings.TrimSpace(textOrID)
	id, err := layout.Parse(text)
	if err != nil {
		decimal := layout.scheme.idBits() > 64 && text != ""
		for _, c := range []byte(text) {
			decimal = decimal && c >= '0' && c <= '9'
		}
		n, perr := ParseU128(text)
		if !decimal || perr != nil {
			return nil, err
		}
		id = n
	}
	return DecodeID(layout, id)
}

// DecodeID decodes the id `id` in layout (checking its width and constant bits).
func DecodeID(layout *Layout, id U128) (*Decoded, error) {
	f, err := layout.DecodeFields(id)
	if err != nil {
		return nil, err
	}
	text, err := layout.Format(id)
	if err != nil {
		return nil, err
	}
	unixMs := layout.UnixMs(f.Time)
	d := &Decoded{
		Scheme: layout.scheme, ID: id, Fields: f, Unit: layout.unit, UnixMs: unixMs,
		TimeRFC3339: RFC3339Ms(unixMs), Text: text, Bits: layout.Bits(),
		EpochRFC3339: RFC3339Ms(layout.epochMs), Range: layout.DescribeRange(), parts: layout.Parts(),
	}
	switch layout.scheme {
	case UUIDv7:
		w := f.Rand >> UUIDRandomBits
		d.Worker = &w
	case RongCloud:
	default:
		w := f.Worker
		d.Worker = &w
	}
	return d, nil
}

// SessionHashOf is the 22-bit session hash of a rongcloud session id: the low 22 bits of Java's
// String.hashCode() of it (over its UTF-16 code units), as the AllocSvrs compute it.
func SessionHashOf(sessionID string) uint64 {
	var h int32
	for _, unit := range utf16.Encode([]rune(sessionID)) {
		h = h*31 + int32(unit)
	}
	return uint64(uint32(h)) & (SessionHashes - 1)
}

// Rongcloud session types (4 bits) and hashes (22 bits).
const (
	SessionTypes  uint64 = 1 << 4
	SessionHashes uint64 = 1 << 22
	// SessionKeys is the number of (type, hash) keys: the default session uid range.
	SessionKeys uint64 = 1 << 26
)

const msPerDay = 86_400_000

// RFC3339Ms is unixMs as RFC 3339 UTC with milliseconds, e.g. 2024-11-20T21:24:16.000Z (years
// past 9999 with more digits), as the Rust decoder writes it.
func RFC3339Ms(unixMs uint64) string {
	days, ms := unixMs/msPerDay, unixMs%msPerDay
	y, m, d := civilFromDays(days)
	return fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", y, m, d, ms/3_600_000, ms/60_000%60, ms/1000%60, ms%1000)
}

// civilFromDays is (year, month, day) of a day count since 1970-01-01 (H. Hinnant's
// civil_from_days).
func civilFromDays(days uint64) (uint64, uint64, uint64) {
	z := days + 719_468
	era := z / 146_097
	doe := z % 146_097
	yoe := (doe - doe/1460 + doe/36_524 - doe/146_096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	y := yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m, d
}
