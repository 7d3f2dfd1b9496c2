package roce_test

import (
	"bytes"
	"testing"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

func TestRCWriteSmoke(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, _ := b.PairQPs(rcOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	src, sbuf := a.Reg(t, 10000, 0, 1)
	dst, dbuf := c.Reg(t, 10000, 0, 2)
	err := qa.PostSend(&verbs.SendWR{WRID: 7, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL: []mr.SGE{src.SGE(0, 10000)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	if err != nil {
		t.Fatal(err)
	}
	wcs := b.WaitWCs(a, 1)
	if wcs[0].Status != verbs.WCSuccess || wcs[0].WRID != 7 || wcs[0].ByteLen != 10000 {
		t.Fatalf("wc %+v", wcs[0])
	}
	if !bytes.Equal(sbuf, dbuf) {
		t.Fatal("data differs")
	}
	t.Logf("counters a %v", a.Dev.Counters())
}
