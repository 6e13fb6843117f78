package seqsvr

import (
	"errors"
	"fmt"
	"math/big"
)

// U128 is an unsigned 128-bit number: an id of any scheme (the 64-bit ones in Lo with Hi 0,
// rongcloud's 80 bits, uuidv7's 128). Ordered as numbers compare (Cmp).
type U128 struct {
	Hi, Lo uint64
}

// U128From is the 64-bit id v as a U128.
func U128From(v uint64) U128 { return U128{Lo: v} }

// U128FromBytes reads 16 big-endian bytes (the RFC 9562 byte order of the wire's 128-bit ids).
func U128FromBytes(b []byte) (U128, error) {
	if len(b) != 16 {
		return U128{}, fmt.Errorf("%d bytes, not 16", len(b))
	}
	var id U128
	for i := 0; i < 8; i++ {
		id.Hi = id.Hi<<8 | uint64(b[i])
		id.Lo = id.Lo<<8 | uint64(b[8+i])
	}
	return id, nil
}

// Bytes is the id as 16 big-endian bytes.
func (u U128) Bytes() [16]byte {
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[7-i] = byte(u.Hi >> (8 * i))
		b[15-i] = byte(u.Lo >> (8 * i))
	}
	return b
}

// Cmp is -1, 0 or +1 as u is below, equal to or above v.
func (u U128) Cmp(v U128) int {
	switch {
	case u.Hi < v.Hi || (u.Hi == v.Hi && u.Lo < v.Lo):
		return -1
	case u == v:
		return 0
	}
	return 1
}

// IsZero reports whether u is 0.
func (u U128) IsZero() bool { return u.Hi == 0 && u.Lo == 0 }

// shr is u >> n (n < 128).
func (u U128) shr(n uint) U128 {
	switch {
	case n == 0:
		return u
	case n >= 128:
		return U128{}
	case n >= 64:
		return U128{Lo: u.Hi >> (n - 64)}
	}
	return U128{Hi: u.Hi >> n, Lo: u.Lo>>n | u.Hi<<(64-n)}
}

// shl is u << n (n < 128).
func (u U128) shl(n uint) U128 {
	switch {
	case n == 0:
		return u
	case n >= 128:
		return U128{}
	case n >= 64:
		return U128{Hi: u.Lo << (n - 64)}
	}
	return U128{Hi: u.Hi<<n | u.Lo>>(64-n), Lo: u.Lo << n}
}

func (u U128) or(v U128) U128 { return U128{Hi: u.Hi | v.Hi, Lo: u.Lo | v.Lo} }

// big is u as a big.Int.
func (u U128) big() *big.Int {
	hi := new(big.Int).SetUint64(u.Hi)
	return hi.Lsh(hi, 64).Or(hi, new(big.Int).SetUint64(u.Lo))
}

// String is u in decimal.
func (u U128) String() string {
	if u.Hi == 0 {
		return fmt.Sprintf("%d", u.Lo)
	}
	return u.big().String()
}

var errNotU128 = errors.New("not a decimal number below 2^128")

// ParseU128 reads a decimal number below 2^128 (digits only, as Rust's u128 parse takes them,
// with an optional leading '+').
func ParseU128(text string) (U128, error) {
	digits := text
	if len(digits) > 0 && digits[0] == '+' {
		digits = digits[1:]
	}
	if digits == "" {
		return U128{}, errNotU128
	}
	for _, c := range []byte(digits) {
		if c < '0' || c > '9' {
			return U128{}, errNotU128
		}
	}
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok || n.BitLen() > 128 {
		return U128{}, errNotU128
	}
	lo := new(big.Int).And(n, new(big.Int).SetUint64(^uint64(0))).Uint64()
	hi := new(big.Int).Rsh(n, 64).Uint64()
	return U128{Hi: hi, Lo: lo}, nil
}
