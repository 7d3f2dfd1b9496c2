package cm

import (
	"testing"
	"time"

	"github.com/sroce/sroce/monotime"
)

// FuzzManagerReceive feeds a passive and an active Manager (one with a
// connection of each kind under way) any bytes as a received MAD, then
// runs their timers: nothing panics, every MAD they send decodes, and the
// half-open count stays within its bound.
func FuzzManagerReceive(f *testing.F) {
	for _, m := range samples() {
		b, _ := Send(1, m)
		f.Add(b, uint8(0))
	}
	req := testREQ()
	b, _ := Send(7, &req)
	f.Add(b, uint8(3))
	f.Fuzz(func(t *testing.T, mad []byte, ticks uint8) {
		var now monotime.Time
		a, p := NewManager(Config{HoldRTU: ticks&1 == 1, MaxHalfOpen: 2}), NewManager(Config{MaxHalfOpen: 2})
		p.Listen(svc)
		p.Listen(ServiceID(PortSpaceUDP, 7))
		if _, err := a.Connect(now, addrP, testREQ()); err != nil {
			t.Fatal(err)
		}
		a.SIDRRequest(now, addrP, SIDRREQ{ServiceID: ServiceID(PortSpaceUDP, 7)}, 10, 2)
		out, _ := a.Take()
		for _, o := range out {
			p.Receive(now, addrA, o.MAD)
		}
		for _, m := range []*Manager{a, p} {
			for _, from := range []Addr{addrA, addrP} {
				m.Receive(now, from, mad)
			}
			for i := 0; i < int(ticks%8); i++ {
				now = now.Add(time.Second)
				m.Tick(now)
			}
			outs, _ := m.Take()
			for _, o := range outs {
				if _, _, err := Unmarshal(o.MAD); err != nil {
					t.Fatalf("the Manager sent a MAD that does not decode: %v", err)
				}
			}
			if m.HalfOpen() > 2 || m.HalfOpen() < 0 {
				t.Fatalf("half-open %d", m.HalfOpen())
			}
		}
	})
}
