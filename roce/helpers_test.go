package roce_test

// The engine's test bed lives in internal/testbed, shared with the
// daemon's conformance test; these names keep the tests' vocabulary and
// let them add methods of their own to the bed.

import (
	"testing"

	"github.com/sroce/sroce/bth"
	tb "github.com/sroce/sroce/internal/testbed"
)

type (
	node    = tb.Node
	bedOpts = tb.Options
	rcOpts  = tb.RC
)

// testbed is a bed of internal/testbed with the methods roce's tests add.
type testbed struct{ *tb.Bed }

func newBed(t testing.TB, o bedOpts) *testbed { return &testbed{tb.New(t, o)} }

const allAccess = tb.AllAccess

type (
	bthPSN = bth.PSN
	bthQPN = bth.QPN
)
