package daemon_test

import (
	"strings"
	"testing"

	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// newClientID runs open, which connects one client, and returns the id
// the daemon gave it.
func newClientID(t *testing.T, r *rig, open func()) uint64 {
	t.Helper()
	before := map[uint64]bool{}
	for _, c := range r.srv.Clients() {
		before[c.ID] = true
	}
	open()
	for _, c := range r.srv.Clients() {
		if !before[c.ID] {
			return c.ID
		}
	}
	t.Fatal("the new client is not among the daemon's clients")
	return 0
}

// gone waits until the daemon no longer lists client id.
func waitGone(t *testing.T, r *rig, id uint64, what string) {
	t.Helper()
	waitFor(t, what, func() bool {
		for _, c := range r.srv.Clients() {
			if c.ID == id {
				return false
			}
		}
		return true
	})
}

// sendRecv moves one message from a to b and checks it.
func sendRecv(t *testing.T, a, b *endpoint, msg string) {
	t.Helper()
	b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{{Addr: b.buf.Addr(0), Length: 64, LKey: b.mr.LKey()}}})
	a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Inline, InlineData: []byte(msg)})
	if wc := wait(t, b, "receive of "+msg); wc.Status != verbs.WCSuccess || string(b.buf.Buf[:len(msg)]) != msg {
		t.Fatalf("receive of %q: %+v, %q", msg, wc, b.buf.Buf[:len(msg)])
	}
}

// TestPanicContained makes one client's request handling panic, then the
// bridge's service of another client's rings: each time that
// client alone is disconnected, the panic is logged with its identity and
// the stack, and the daemon, its engine and the other clients go on.
func TestPanicContained(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a, b := pair(t, r, false)
	sendRecv(t, a, b, "before")
	t.Cleanup(func() { daemon.SetPanicHook(nil) })

	// A panic in a request's handling.
	var c *cmClient
	victim := newClientID(t, r, func() { c = dialOpen(t, r) })
	daemon.SetPanicHook(func(id uint64, where string) {
		if id == victim && where == "request" {
			panic("injected in a request")
		}
	})
	port := ctl.Port{PortNum: 1}
	if _, _, err := c.call(ctl.OpQueryPort, ctl.Bytes(&port)); !ended(err) {
		t.Fatalf("a request whose handling panicked: %v, want the connection ended", err)
	}
	waitGone(t, r, victim, "the panicking client to be gone")
	sendRecv(t, a, b, "after a request panicked")

	// A panic in the bridge, on its goroutine: h's doorbell names its QP.
	var h *endpoint
	daemon.SetPanicHook(nil)
	victim2 := newClientID(t, r, func() { h = newEndpoint(t, r, "sroce_mem0", false) })
	p := newEndpoint(t, r, "sroce_mem1", false)
	connect(t, h, p.qp.QPN(), r.gids[1])
	connect(t, p, h.qp.QPN(), r.gids[0])
	daemon.SetPanicHook(func(id uint64, where string) {
		if id == victim2 && where == "bridge" {
			panic("injected in the bridge")
		}
	})
	h.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, Flags: verbs.Signaled | verbs.Inline, InlineData: []byte("from the panicking client")})
	waitGone(t, r, victim2, "the client whose bridge panicked to be gone")
	sendRecv(t, a, b, "after a bridge panicked")
	sendRecv(t, b, a, "both ways")

	log := r.logText()
	for _, where := range []string{"request", "bridge"} {
		i := strings.Index(log, "in=\""+where+"\"")
		if i < 0 {
			i = strings.Index(log, "in="+where)
		}
		if i < 0 {
			t.Errorf("no panic logged in %s:\n%s", where, log)
			continue
		}
		line := log[strings.LastIndex(log[:i], "\n")+1:]
		line = line[:strings.Index(line, "\n")]
		for _, want := range []string{"level=ERROR", "pid=", "uid=", "comm=", "client=", "panic=\"injected", "stack=", "goroutine"} {
			if !strings.Contains(line, want) {
				t.Errorf("the panic in %s is logged without %q: %s", where, want, line)
			}
		}
	}
	if n := strings.Count(log, "connection panicked"); n != 2 {
		t.Errorf("%d panics logged, want 2", n)
	}
}
