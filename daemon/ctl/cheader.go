package ctl

import _ "embed"

// The Go mirror of sroce_ctl.h (header_gen.go, and the layout table of
// its test) is generated from the header; after editing the header run
//
//	go generate ./daemon/ctl
//
//go:generate go run github.com/sroce/sroce/internal/cmirror/gen ctl

// CHeader is sroce_ctl.h, the protocol for C, for the C code the project
// builds (the drop-in libibverbs of package shim).
//
//go:embed sroce_ctl.h
var CHeader []byte
