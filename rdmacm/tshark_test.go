package rdmacm_test

import (
	"bytes"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/internal/capturetest"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// TestTsharkDecodesExchange captures the frames of a connect, a data
// exchange and a disconnect, and checks that Wireshark decodes the CM
// MADs among them as REQ, REP, RTU, DREQ, DREP with the fields the IDs
// agreed on.
func TestTsharkDecodesExchange(t *testing.T) {
	path, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed: Wireshark's decoding of the CM exchange is not checked (apt-get install tshark)")
	}
	p, act, pas, caught := captureExchange(t)
	file := capturetest.WriteFile(t, "rdmacm.pcap", capturetest.Pcap(t, layers.LinkTypeEthernet, capturetest.Records(caught)))
	fields := []string{"infiniband.bth.destqp", "infiniband.mad.attributeid", "infiniband.mad.classversion",
		"infiniband.cm.req.serviceid", "infiniband.cm.req.localqpn", "infiniband.cm.req.pppmtu",
		"infiniband.cm.req.prim_hoplim", "infiniband.cm.req.prim_locallid", "infiniband.cm.req.ip_cm.sport",
		"infiniband.cm.req.ip_cm.sip4", "infiniband.cm.req.ip_cm.dip4", "infiniband.cm.req.maxcmretr",
		"infiniband.cm.req.remoteresptout", "infiniband.cm.rep.localqpn", "infiniband.cm.rep.tgtackdelay", "infiniband.cm.rtu.remotecommid",
		"infiniband.cm.rtu.localcommid", "infiniband.cm.dreq.remotecommid", "infiniband.cm.drsp.localcommid"}
	args := []string{"-r", file, "-Y", "infiniband.mad", "-T", "fields", "-E", "separator=\t"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	cmd := exec.CommandContext(t.Context(), path, args...)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v: %s", err, stderr.String())
	}
	var rows []map[string]string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		vals := strings.Split(l, "\t")
		m := map[string]string{}
		for i, f := range fields {
			if i < len(vals) {
				m[f] = vals[i]
			}
		}
		rows = append(rows, m)
	}
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("tshark printed %q for a number", s)
		}
		return v
	}
	var attrs []uint64
	for _, r := range rows {
		attrs = append(attrs, num(r["infiniband.mad.attributeid"]))
		if num(r["infiniband.bth.destqp"]) != 1 || num(r["infiniband.mad.classversion"]) != 2 {
			t.Errorf("a MAD not to QP1 or not class version 2: %v", r)
		}
	}
	if want := []uint64{0x10, 0x13, 0x14, 0x15, 0x16}; !slices.Equal(attrs, want) {
		t.Fatalf("tshark saw MADs %#x, want REQ, REP, RTU, DREQ, DREP", attrs)
	}
	req, rep := rows[0], rows[1]
	checks := []struct {
		field string
		got   uint64
		want  uint64
	}{
		{"req.serviceid", num(req["infiniband.cm.req.serviceid"]), 0x0106<<16 | 7174},
		{"req.localqpn", num(req["infiniband.cm.req.localqpn"]), uint64(act.QP().QPN())},
		{"req.pppmtu", num(req["infiniband.cm.req.pppmtu"]), uint64(act.PathMTU())},
		{"req.prim_hoplim", num(req["infiniband.cm.req.prim_hoplim"]), 64},
		{"req.prim_locallid", num(req["infiniband.cm.req.prim_locallid"]), 0xffff},
		{"req.ip_cm.sport", num(req["infiniband.cm.req.ip_cm.sport"]), uint64(act.LocalAddr().Port())},
		{"req.maxcmretr", num(req["infiniband.cm.req.maxcmretr"]), 15},
		{"req.remoteresptout", num(req["infiniband.cm.req.remoteresptout"]), 20},
		{"rep.localqpn", num(rep["infiniband.cm.rep.localqpn"]), uint64(pas.QP().QPN())},
		{"rep.tgtackdelay", num(rep["infiniband.cm.rep.tgtackdelay"]), 15},
		{"dreq.remotecommid (the RTU's)", num(rows[3]["infiniband.cm.dreq.remotecommid"]), num(rows[2]["infiniband.cm.rtu.remotecommid"])},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: tshark decodes %#x, want %#x", c.field, c.got, c.want)
		}
	}
	if a := req["infiniband.cm.req.ip_cm.sip4"]; netip.MustParseAddr(a) != p.a.addr {
		t.Errorf("IP CM source %s", a)
	}
	if a := req["infiniband.cm.req.ip_cm.dip4"]; netip.MustParseAddr(a) != p.b.addr {
		t.Errorf("IP CM destination %s", a)
	}
}

// captureExchange runs connect, a ping, and a disconnect by the active
// side between two hosts, and returns every frame the link carried.
func captureExchange(t *testing.T) (p *pair, act, pas *rdmacm.ID, frames [][]byte) {
	t.Helper()
	p = newPair(t, memlink.Impairments{}, rdmacm.Config{})
	var mu sync.Mutex
	p.router.SetTap(func(_ *memlink.Port, f []byte) {
		mu.Lock()
		frames = append(frames, append([]byte(nil), f...))
		mu.Unlock()
	})
	act, pas = connect(t, p, 7174)
	sendRecv(t, act, pas, []byte("ping"))
	must(t, act.Disconnect())
	expect(t, p.a.ch, rdmacm.EventDisconnected)
	expect(t, p.b.ch, rdmacm.EventDisconnected)
	mu.Lock()
	defer mu.Unlock()
	return p, act, pas, append([][]byte(nil), frames...)
}

// TestWireMatchesRxe compares the REQ, REP and DREQ sroce sends with those
// of rdma_rxe's rping (Linux 6.1; cm/testdata/rxe-rping.pcap): every field
// that does not depend on the run (IDs, PSNs, GUIDs, addresses) has rxe's
// value, and the flow label is rdma_cm's function of the two ports.
func TestWireMatchesRxe(t *testing.T) {
	_, act, pas, frames := captureExchange(t)
	var msgs []cm.Message
	for _, f := range frames {
		const off = 14 + 20 + 8 + 12 + 8 // Ethernet, IPv4, UDP, BTH, DETH
		if len(f) < off+cm.MADLen || f[off+1] != cm.MgmtClassCM {
			continue
		}
		_, m, err := cm.Unmarshal(f[off : off+cm.MADLen])
		must(t, err)
		msgs = append(msgs, m)
	}
	if len(msgs) != 5 {
		t.Fatalf("%d CM MADs", len(msgs))
	}
	req, rep, dreq := msgs[0].(*cm.REQ), msgs[1].(*cm.REP), msgs[3].(*cm.DREQ)
	sport := act.LocalAddr().Port()
	got := cm.REQ{
		RemoteCMResponseTimeout: req.RemoteCMResponseTimeout, LocalCMResponseTimeout: req.LocalCMResponseTimeout,
		Transport: req.Transport, EndToEndFlowControl: req.EndToEndFlowControl, LocalQKey: req.LocalQKey,
		RetryCount: req.RetryCount, PKey: req.PKey, PathMTU: req.PathMTU, RNRRetryCount: req.RNRRetryCount,
		MaxCMRetries: req.MaxCMRetries, ResponderResources: req.ResponderResources, InitiatorDepth: req.InitiatorDepth,
		Primary: cm.Path{LocalLID: req.Primary.LocalLID, RemoteLID: req.Primary.RemoteLID, FlowLabel: req.Primary.FlowLabel,
			PacketRate: req.Primary.PacketRate, TrafficClass: req.Primary.TrafficClass, HopLimit: req.Primary.HopLimit,
			SL: req.Primary.SL, SubnetLocal: req.Primary.SubnetLocal, LocalACKTimeout: req.Primary.LocalACKTimeout},
	}
	// rxe's rping REQ, with rping's parameters (1, 1, retries 7).
	want := cm.REQ{
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, Transport: cm.TransportRC, RetryCount: 7,
		PKey: 0xffff, PathMTU: verbs.MTU1024, RNRRetryCount: 7, MaxCMRetries: 15, ResponderResources: 1, InitiatorDepth: 1,
		Primary: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, FlowLabel: (uint32(sport)*31 + 7174) & 0xfffff,
			HopLimit: 64, LocalACKTimeout: 19},
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("REQ\n got %+v\nwant %+v", got, want)
	}
	if req.LocalQPN != act.QP().QPN() || req.Alternate != (cm.Path{}) || req.ServiceID != cm.ServiceID(cm.PortSpaceTCP, 7174) {
		t.Errorf("REQ QPN %v, alternate path %+v, service ID %#x", req.LocalQPN, req.Alternate, req.ServiceID)
	}
	if rep.TargetACKDelay != 15 || rep.FailoverAccepted != 0 || rep.LocalQKey != 0 || rep.LocalQPN != pas.QP().QPN() ||
		rep.ResponderResources != 1 || rep.InitiatorDepth != 1 || rep.RNRRetryCount != 7 || rep.LocalCAGUID == 0 {
		t.Errorf("REP %+v", rep)
	}
	if dreq.RemoteQPN != pas.QP().QPN() {
		t.Errorf("DREQ names QP %v, want the peer's %v", dreq.RemoteQPN, pas.QP().QPN())
	}
}
