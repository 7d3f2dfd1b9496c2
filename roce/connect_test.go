package roce_test

import (
	"errors"
	"testing"

	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

func TestConnectNamesTheRefusedState(t *testing.T) {
	b := newBed(t, bedOpts{})
	o := rcOpts{}
	o.Defaults()
	a, c := b.Nodes[0], b.Nodes[1]
	q := b.CreateQP(a, o, nil)
	// Path MTU 0 is refused at RTR.
	err := q.Connect(&roce.ConnectAttr{AH: a.AHTo(c), DestQPN: 5, Timeout: 14, RetryCnt: 7, RNRRetry: 7})
	var ce *roce.ConnectError
	if !errors.As(err, &ce) || ce.State != verbs.QPStateRTR || q.State() != verbs.QPStateInit {
		t.Fatalf("%v (QP %v)", err, q.State())
	}
	// StayRTR stops at RTR.
	q2 := b.CreateQP(a, o, nil)
	if err := q2.Connect(&roce.ConnectAttr{AH: a.AHTo(c), PathMTU: verbs.MTU1024, DestQPN: 5, StayRTR: true}); err != nil {
		t.Fatal(err)
	}
	if q2.State() != verbs.QPStateRTR {
		t.Fatalf("state %v after StayRTR", q2.State())
	}
	// UD takes its Q_Key and none of the path.
	u := b.CreateQP(a, rcOpts{QPType: verbs.QPTypeUD, MaxWR: 4, MaxSGE: 1}, nil)
	if err := u.Connect(&roce.ConnectAttr{QKey: 0x11111111, SQPSN: 3}); err != nil {
		t.Fatal(err)
	}
	if attr, _ := u.Query(); u.State() != verbs.QPStateRTS || attr.QKey != 0x11111111 {
		t.Fatalf("UD QP %v qkey %#x", u.State(), attr.QKey)
	}
}
