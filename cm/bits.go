package cm

// loc locates a field in a message: the value occupies width bits starting
// shift bits above the least significant bit of the n-byte big-endian word
// at byte off (off relative to the MAD data). IBTA numbers bits from the
// most significant end; shift counts from the least significant end, so a
// field in a byte's top 5 bits has shift 3.
type loc struct {
	off, n, shift, width uint8
}

func (l loc) mask() uint64 {
	if l.width >= 64 {
		return ^uint64(0)
	}
	return 1<<l.width - 1
}

// get reads the field at l from d. d must hold l.off+l.n bytes.
func get(d []byte, l loc) uint64 {
	var w uint64
	for _, c := range d[l.off : l.off+l.n] {
		w = w<<8 | uint64(c)
	}
	return w >> l.shift & l.mask()
}

// enc writes fields into a message's bytes and keeps the first error.
type enc struct {
	d   []byte
	msg string // message name, for errors
	err error
}

// put writes v into the field at l, leaving the other bits of the word as
// they are; a value wider than the field is an error naming field.
func (e *enc) put(l loc, v uint64, field string) {
	if v&^l.mask() != 0 {
		e.outOfRange(field)
		return
	}
	b := e.d[l.off : l.off+l.n]
	var w uint64
	for _, c := range b {
		w = w<<8 | uint64(c)
	}
	w = w&^(l.mask()<<l.shift) | v<<l.shift
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte(w)
		w >>= 8
	}
}

// outOfRange records that field's value does not fit.
func (e *enc) outOfRange(field string) {
	if e.err == nil {
		e.err = errAt(e.msg+" "+field, KindOutOfRange)
	}
}

func (e *enc) flag(l loc, v bool, field string) {
	var x uint64
	if v {
		x = 1
	}
	e.put(l, x, field)
}

// bytes copies src into the n bytes at off, zero-filling what src leaves; a
// src longer than n is an error.
func (e *enc) bytes(off, n int, src []byte, field string) {
	if len(src) > n {
		if e.err == nil {
			e.err = errAt(e.msg+" "+field, KindPrivateDataLen)
		}
		return
	}
	clear(e.d[off : off+n])
	copy(e.d[off:], src)
}

// Byte-aligned field locations.
func u8(off uint8) loc  { return loc{off, 1, 0, 8} }
func u16(off uint8) loc { return loc{off, 2, 0, 16} }
func u24(off uint8) loc { return loc{off, 4, 8, 24} } // top 24 bits of a 32-bit word
func u32(off uint8) loc { return loc{off, 4, 0, 32} }
func u64(off uint8) loc { return loc{off, 8, 0, 64} }

// bitsAt is a field of width bits within the byte at off, whose most
// significant bit is IBTA bit position pos of that byte (0 = MSB).
func bitsAt(off, pos, width uint8) loc { return loc{off, 1, 8 - pos - width, width} }

func getBool(d []byte, l loc) bool { return get(d, l) != 0 }

func cloneBytes(b []byte) []byte { return append([]byte(nil), b...) }
