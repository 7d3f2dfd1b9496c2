package roce_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/linkcap"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// headerLossyLink hands up frames whose IPv4 Identification was lost on the
// way, as a UDP socket does (it cannot see the IP header), so their ICRC no
// longer matches. blind says whether the link admits it (linkcap.ICRCBlind).
type headerLossyLink struct {
	*memlink.Port
	blind bool
}

func (l headerLossyLink) ReadBatch(bufs [][]byte, sizes []int, timeout time.Duration) (int, error) {
	n, err := l.Port.ReadBatch(bufs, sizes, timeout)
	for i := 0; i < n; i++ {
		f := bufs[i][:sizes[i]]
		if len(f) > bth.EthernetLen+6 {
			f[bth.EthernetLen+4], f[bth.EthernetLen+5] = 0, 0
		}
	}
	return n, err
}

func (l headerLossyLink) Caps() linkcap.Caps {
	if l.blind {
		return l.Port.Caps() | linkcap.ICRCBlind
	}
	return l.Port.Caps()
}

func TestICRCOnLinksThatCannotSeeTheIPHeader(t *testing.T) {
	for _, blind := range []bool{true, false} {
		b := newBed(t, bedOpts{Link: func(i int, p *memlink.Port) roce.Link {
			if i == 1 {
				return headerLossyLink{p, blind}
			}
			return p
		}})
		qa, _ := b.PairQPs(rcOpts{})
		a, c := b.Nodes[0], b.Nodes[1]
		src, sbuf := a.Reg(t, 3000, 0, 1)
		dst, dbuf := c.Reg(t, 3000, 0, 2)
		if err := qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
			SGL: []mr.SGE{src.SGE(0, 3000)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}); err != nil {
			t.Fatal(err)
		}
		b.Sim.RunFor(50 * time.Millisecond)
		a.Poll()
		cnt := c.Dev.Counters()
		if blind {
			// Accepted and counted, not hidden.
			if len(a.WCs) != 1 || a.WCs[0].Status != verbs.WCSuccess || !bytes.Equal(sbuf, dbuf) {
				t.Fatalf("blind link: WRITE did not complete: %+v", a.WCs)
			}
			if cnt["icrc_unchecked"] == 0 || cnt["icrc_error"] != 0 {
				t.Fatalf("blind link counters: icrc_unchecked=%d icrc_error=%d", cnt["icrc_unchecked"], cnt["icrc_error"])
			}
		} else {
			// A link that claims to verify drops every such frame.
			if cnt["icrc_error"] == 0 || cnt["icrc_unchecked"] != 0 || cnt["rcvd_pkts"] != 0 {
				t.Fatalf("verifying link counters: %v", cnt)
			}
		}
	}
}
