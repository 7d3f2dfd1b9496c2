package roce_test

import (
	"net"
	"strings"
	"testing"

	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/linkcap"
	"github.com/sroce/sroce/roce/memlink"
)

// claimsLend forwards a memlink port and says it lends, without the
// methods: a wrapper that forwards Caps and drops the fast path.
type claimsLend struct{ *memlink.Port }

func (l claimsLend) Caps() linkcap.Caps { return l.Port.Caps() | linkcap.Lend }

// TestOpenRefusesCapsWithoutInterface checks that a device does not open
// on a link whose Caps name an interface it lacks, and says which.
func TestOpenRefusesCapsWithoutInterface(t *testing.T) {
	r := memlink.NewRouter(roce.SystemClock(), 1, memlink.Impairments{})
	port := r.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 1}, 1500)
	d, err := roce.Open(claimsLend{port}, nil)
	if err == nil {
		d.Close()
		t.Fatal("a device opened on a link that claims to lend without roce.Lender")
	}
	if !strings.Contains(err.Error(), "lend-rx|lend-tx") || !strings.Contains(err.Error(), "roce.Lender") {
		t.Errorf("error %q does not name the capability and the interface", err)
	}
	d, err = roce.Open(port, nil)
	if err != nil {
		t.Fatalf("the bare port: %v", err)
	}
	d.Close()
}
