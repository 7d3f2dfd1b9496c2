package tracesock

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// openDev opens a device on an in-memory link.
func openDev(t *testing.T) *roce.Device {
	t.Helper()
	clock := new(memlink.VirtualClock)
	r := memlink.NewRouter(clock, 1, memlink.Impairments{})
	port := r.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 1}, 1500)
	d, err := roce.Open(port, &roce.Options{Name: "sroce_test", Clock: clock,
		GIDs: []bth.GID{bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 0, 0, 1}))}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestServeAndEnd attaches a client, sees the QP state changes a modify
// makes, and gets the end record when the device closes; the socket is
// then gone.
func TestServeAndEnd(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir())
	d := openDev(t)
	srv, err := Serve(d)
	if err != nil {
		t.Fatal(err)
	}
	cands, err := List()
	if err != nil || len(cands) != 1 || cands[0].Device != "sroce_test" || cands[0].PID != os.Getpid() {
		t.Fatalf("List = %v, %v; want this process's sroce_test", cands, err)
	}
	cl, err := Dial(srv.Path(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if cl.Device() != "sroce_test" || cl.PID() != os.Getpid() {
		t.Errorf("hello: %s pid %d", cl.Device(), cl.PID())
	}
	// The client is attached once the server subscribed: wait for that
	// by making events until one arrives.
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16, nil)
	cl.SetDeadline(time.Now().Add(5 * time.Second))
	got := make(chan roce.TraceEvent, 1)
	go func() {
		ev, err := cl.Next()
		if err == nil {
			got <- ev
		}
		close(got)
	}()
	var ev roce.TraceEvent
	for ok := false; !ok; {
		q, err := pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		q.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
		select {
		case ev, ok = <-got:
			if !ok {
				t.Fatal("the client read no event within 5s")
			}
		case <-time.After(20 * time.Millisecond):
		}
	}
	if ev.Kind != roce.TraceQPState || ev.ToState != verbs.QPStateInit {
		t.Errorf("first event %v to %v, want a QP state change to INIT", ev.Kind, ev.ToState)
	}
	if w := cl.Wall(ev.Time); time.Since(w) > time.Minute || time.Until(w) > time.Minute {
		t.Errorf("event wall time %v is not now", w)
	}
	d.Close()
	cl.SetDeadline(time.Now().Add(5 * time.Second))
	for {
		_, err := cl.Next()
		var end *EndError
		if errors.As(err, &end) {
			if end.Reason != "the device closed" {
				t.Errorf("end reason %q", end.Reason)
			}
			break
		}
		if err != nil {
			t.Fatalf("after the device closed: %v, want the end record", err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(srv.Path()); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the socket is still there 5s after its device closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStuckClient: a client that connects and never reads is
// disconnected, and the device goes on; more than MaxClients are refused
// with a sentence.
func TestStuckClient(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir())
	d := openDev(t)
	defer d.Close()
	srv, err := Serve(d)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for i := 0; i < MaxClients; i++ {
		c, err := net.Dial("unix", srv.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	time.Sleep(100 * time.Millisecond)
	cl, err := Dial(srv.Path(), 5*time.Second)
	var end *EndError
	if !errors.As(err, &end) || !strings.Contains(end.Reason, "trace clients") {
		t.Fatalf("client beyond MaxClients: %v, %v; want refused with a sentence", cl, err)
	}
	// Flood events at the stuck clients: the device never waits.
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16, nil)
	start := time.Now()
	for i := 0; i < 2000; i++ {
		q, err := pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		q.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
		q.Destroy()
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("2000 QP creations took %v with stuck trace clients", el)
	}
	// The stuck clients are dropped after WriteTimeout at most once
	// their socket is full; reading now gives what was sent, then the
	// end of the connection or more events, never a hang.
	conns[0].SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.Copy(io.Discard, io.LimitReader(conns[0], 1<<20)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Logf("stuck client read: %v", err)
	}
}

// TestParseEventMalformed: short and inconsistent records are errors,
// never panics; a record survives the round trip.
func TestParseEventMalformed(t *testing.T) {
	ev := roce.TraceEvent{Kind: roce.TraceTx, Time: 123, QPN: 0x11, Frame: []byte{1, 2, 3}, FrameLen: 60, Dropped: true, Lost: 7}
	b := AppendEvent(nil, &ev)
	got, err := ParseEvent(b[5:])
	if err != nil || got.Kind != ev.Kind || got.Time != ev.Time || got.QPN != ev.QPN || got.FrameLen != 60 ||
		!got.Dropped || got.Lost != 7 || string(got.Frame) != string(ev.Frame) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for n := 0; n < len(b)-5; n++ {
		ParseEvent(b[5 : 5+n])
	}
	bad := append([]byte(nil), b[5:]...)
	bad[0] = 200
	if _, err := ParseEvent(bad); err == nil {
		t.Error("an unknown kind was accepted")
	}
	if _, err := ParseEvent(b[5:20]); err == nil {
		t.Error("a short record was accepted")
	}
}
