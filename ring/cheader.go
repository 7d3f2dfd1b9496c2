package ring

import _ "embed"

// CHeader is sroce_ring.h, the rings' layout for C, for the C code the
// project builds (the drop-in libibverbs of package shim).
//
//go:embed sroce_ring.h
var CHeader []byte
