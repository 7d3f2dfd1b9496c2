package daemon

import (
	"testing"

	"github.com/sroce/sroce/verbs"
)

// The engine resolves a UD send's address handle as it takes the WQE: the
// lookup answers only the handles of the QP's protection domain, forgets
// a destroyed one, and allocates nothing (handles past 255 are the
// common case: a connection numbers all its objects from one counter).
func TestResolveAH(t *testing.T) {
	b := &bridge{}
	ah := &verbs.AH{}
	b.setAH(1000, &ahObj{ah: ah, pd: 7})
	mine, other := b.resolveAH(&qpObj{pd: 7}), b.resolveAH(&qpObj{pd: 8})
	if got := mine(1000); got != ah {
		t.Fatalf("handle 1000 resolved to %p, want %p", got, ah)
	}
	if got := other(1000); got != nil {
		t.Errorf("a QP of another PD resolved handle 1000 to %p", got)
	}
	if got := mine(1001); got != nil {
		t.Errorf("an unknown handle resolved to %p", got)
	}
	if n := testing.AllocsPerRun(1000, func() { mine(1000) }); n != 0 {
		t.Errorf("a lookup allocates %v times", n)
	}
	b.setAH(1000, nil)
	if got := mine(1000); got != nil {
		t.Errorf("a destroyed handle resolved to %p", got)
	}
}
