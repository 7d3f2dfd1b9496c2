package ring

import _ "embed"

// The Go mirror of sroce_ring.h (header_gen.go, and the layout table of
// its test) is generated from the header; after editing the header run
//
//	go generate ./ring
//
//go:generate go run github.com/sroce/sroce/internal/cmirror/gen ring

// CHeader is sroce_ring.h, the rings' layout for C, for the C code the
// project builds (the drop-in libibverbs of package shim).
//
//go:embed sroce_ring.h
var CHeader []byte
