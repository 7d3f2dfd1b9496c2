package oob

// Helpers that print numbers the way C's printf does where Go's fmt
// differs: the alternate hex form ("%#06x" prints "0x0013" but "0000" for
// zero, and the 0x counts toward the width), and non-finite floats ("inf",
// "-nan" instead of "+Inf", "NaN"). The reference tools' output lines are
// built from these so that they match byte for byte.

import (
	"math"
	"strconv"
	"strings"
)

// cAltHex formats v like C's "%#0<width>x": zero is printed as width
// zeros without a prefix; any other value gets "0x" and is zero-padded so
// that prefix and digits fill at least width characters.
func cAltHex(v uint64, width int) string {
	digits := strconv.FormatUint(v, 16)
	if v == 0 {
		return pad0(digits, width)
	}
	return "0x" + pad0(digits, width-2)
}

// pad0 left-pads s with zeros to at least width characters.
func pad0(s string, width int) string {
	if len(s) >= width {
		return s
	}
	return strings.Repeat("0", width-len(s)) + s
}

// cFloat formats f like C's "%.<prec>f" with a minimum width; a negative
// width left-justifies like "%-<width>.<prec>f". Infinities print as
// "inf"/"-inf" and NaNs as "nan", or "-nan" when the sign bit is set (the
// NaN an x86 0.0/0.0 produces).
func cFloat(f float64, width, prec int) string {
	var s string
	switch {
	case math.IsInf(f, 1):
		s = "inf"
	case math.IsInf(f, -1):
		s = "-inf"
	case math.IsNaN(f):
		s = "nan"
		if math.Signbit(f) {
			s = "-nan"
		}
	default:
		s = strconv.FormatFloat(f, 'f', prec, 64)
	}
	return cPad(s, width)
}

// cG formats f like C's "%g" (six significant digits, trailing zeros
// removed, exponent form below 1e-4 or from 1e6 on).
func cG(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		if math.Signbit(f) {
			return "-nan"
		}
		return "nan"
	}
	return strconv.FormatFloat(f, 'g', 6, 64)
}

// cPad pads s with spaces to |width| characters: on the left for a
// positive width, on the right for a negative one (C's "-" flag).
func cPad(s string, width int) string {
	if width < 0 {
		if n := -width - len(s); n > 0 {
			return s + strings.Repeat(" ", n)
		}
		return s
	}
	if n := width - len(s); n > 0 {
		return strings.Repeat(" ", n) + s
	}
	return s
}

// cUint formats v like C's "%-<width>lu" (negative width) or "%<width>lu".
func cUint(v uint64, width int) string {
	return cPad(strconv.FormatUint(v, 10), width)
}
