package roce_test

import (
	"testing"

	"github.com/sroce/sroce/verbs"
)

// TestPortDownAndUp: as rdma_rxe's rxe_port_down and rxe_port_up, the port
// moves DOWN and ACTIVE with EventPortErr and EventPortActive, counts
// link_downed once per fall, and leaves the QPs in their state.
func TestPortDownAndUp(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, _ := b.PairQPs(rcOpts{})
	a := b.Nodes[0]
	if s := a.Dev.QueryPort().State; s != verbs.PortActive {
		t.Fatalf("port state %v before PortDown", s)
	}
	a.Dev.PortDown()
	a.Dev.PortDown() // a second report of the same fall changes nothing
	if s := a.Dev.QueryPort().State; s != verbs.PortDown {
		t.Fatalf("port state %v after PortDown", s)
	}
	if a.Dev.Counters()["link_downed"] != 1 {
		t.Fatalf("link_downed = %d", a.Dev.Counters()["link_downed"])
	}
	if attr, _ := qa.Query(); attr.State != verbs.QPStateRTS {
		t.Fatalf("QP state %v after PortDown, want RTS as on rxe", attr.State)
	}
	a.Dev.PortUp()
	if s := a.Dev.QueryPort().State; s != verbs.PortActive {
		t.Fatalf("port state %v after PortUp", s)
	}
	a.Dev.GIDChanged()
	var got []verbs.EventType
	for {
		ev, ok := a.Dev.PollAsyncEvent()
		if !ok {
			break
		}
		got = append(got, ev.Type)
	}
	want := []verbs.EventType{verbs.EventPortErr, verbs.EventPortActive, verbs.EventGIDChange}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("asynchronous events %v, want %v", got, want)
	}
	if verbs.EventGIDChange != 18 || verbs.EventGIDChange.String() != "GID table change" {
		t.Errorf("EventGIDChange is %d %q, want libibverbs' 18 \"GID table change\"", verbs.EventGIDChange, verbs.EventGIDChange)
	}
}
