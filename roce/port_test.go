package roce_test

import (
	"testing"

	"github.com/sroce/sroce/verbs"
)

func TestPortDownAndUp(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, _ := b.pairQPs(rcOpts{})
	a := b.nodes[0]
	if s := a.dev.QueryPort().State; s != verbs.PortActive {
		t.Fatalf("port state %v before PortDown", s)
	}
	if moved := a.dev.PortDown(); moved != 1 {
		t.Fatalf("PortDown moved %d QPs, want 1", moved)
	}
	if s := a.dev.QueryPort().State; s != verbs.PortDown {
		t.Fatalf("port state %v after PortDown", s)
	}
	if a.dev.Counters()["link_downed"] != 1 {
		t.Fatalf("link_downed = %d", a.dev.Counters()["link_downed"])
	}
	if attr, _ := qa.Query(); attr.State != verbs.QPStateErr {
		t.Fatalf("QP state %v after PortDown", attr.State)
	}
	a.dev.PortUp()
	if s := a.dev.QueryPort().State; s != verbs.PortActive {
		t.Fatalf("port state %v after PortUp", s)
	}
}
