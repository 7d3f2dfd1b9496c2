package ctl

import _ "embed"

// CHeader is sroce_ctl.h, the protocol for C, for the C code the project
// builds (the drop-in libibverbs of package shim).
//
//go:embed sroce_ctl.h
var CHeader []byte
