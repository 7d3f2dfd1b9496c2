package cm

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/capturetest"
)

// udFrame returns a RoCEv2 UD SEND ONLY frame to QP1 carrying mad, as a CM
// MAD travels: DETH with the GSI Q_Key, source QP 1, default P_Key.
func udFrame(t *testing.T, mad []byte, psn bth.PSN, ipv6 bool) []byte {
	t.Helper()
	e := bth.Encap{
		DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
		TTL: 64, SrcPort: 0xc000 + uint16(psn), DF: true,
	}
	if ipv6 {
		e.Src, e.Dst = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	}
	h := bth.Headers{
		BTH:  bth.BTHFields{Opcode: bth.UDSendOnly, PKey: 0xffff, DestQP: GSIQPN, PSN: psn},
		DETH: bth.DETHFields{QKey: GSIQKey, SrcQP: GSIQPN},
	}
	frame := make([]byte, e.Len()+h.TransportLen(len(mad)))
	n, err := bth.Build(frame, &e, &h, mad)
	if err != nil {
		t.Fatal(err)
	}
	return frame[:n]
}

// tsharkFields runs tshark on the frames and returns, for each frame, every
// requested field's values (several occurrences joined by ",").
func tsharkFields(t *testing.T, frames [][]byte, fields []string) []map[string]string {
	t.Helper()
	path, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed: Wireshark's decoding of the CM MADs is not checked (apt-get install tshark)")
	}
	file := capturetest.WriteFile(t, "cm.pcap", capturetest.Pcap(t, layers.LinkTypeEthernet, capturetest.Records(frames)))
	args := []string{"-r", file, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	ctx := t.Context()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark on %s: %v: %s", filepath.Base(file), err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(frames) {
		t.Fatalf("tshark printed %d lines for %d frames:\n%s", len(lines), len(frames), out)
	}
	var res []map[string]string
	for _, l := range lines {
		vals := strings.Split(l, "\t")
		m := map[string]string{}
		for i, f := range fields {
			if i < len(vals) {
				m[f] = vals[i]
			}
		}
		res = append(res, m)
	}
	return res
}

// wsCase is one MAD and what Wireshark must decode from it: field name to a
// number (compared as a number, whatever base tshark prints), a []byte
// (compared as hex) or a string (compared as printed).
type wsCase struct {
	name string
	msg  Message
	want map[string]any
}

// rdmaREQ returns an RDMA CM REQ as rdma_connect sends it on RoCEv2: TCP
// port space service ID, GIDs that are the IP addresses, the IP CM header
// and the application's private data.
func rdmaREQ(t *testing.T, src, dst netip.Addr) *REQ {
	pd, err := IPPrivateData(IPHeader{SrcPort: 0xd431, Src: src, Dst: dst}, []byte("sroce app data"), REQPrivateLen)
	if err != nil {
		t.Fatal(err)
	}
	return &REQ{
		LocalCommID: 0x5a5b5c5d, ServiceID: ServiceID(PortSpaceTCP, 7471), LocalCAGUID: 0x020000fffe000001,
		LocalQPN: 0x000011, ResponderResources: 4, InitiatorDepth: 3, RemoteCMResponseTimeout: 20,
		Transport: TransportRC, StartingPSN: 0x3c4d5e, LocalCMResponseTimeout: 20, RetryCount: 7,
		PKey: 0xffff, PathMTU: 3, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: Path{
			LocalGID: bth.GIDFromAddr(src), RemoteGID: bth.GIDFromAddr(dst),
			PacketRate: 3, TrafficClass: 0x68, HopLimit: 64, LocalACKTimeout: 18,
		},
		PrivateData: pd,
	}
}

// TestTshark builds each message into a real RoCEv2 UD SEND ONLY frame to
// QP1, writes a pcap and checks that Wireshark's infiniband dissector
// decodes the fields we encoded.
//
// Wireshark 4.0 is not compared on three REQ fields it decodes from the
// wrong bytes: the primary and alternate flow labels (it reads the 20-bit
// field from fewer than the 4 bytes its mask needs) and the alternate
// packet rate; TestKnownPositions pins those to the IBTA's positions. It
// does not decode MRA, SIDR_REQ, SIDR_REP or the CM class's ClassPortInfo
// field by field: for those the MAD header and the data bytes are compared.
func TestTshark(t *testing.T) {
	s := samples()
	req, mra, rej, rep, rtu, dreq, drep, sidrReq, sidrRep, cpi := s[0].(*REQ), s[1], s[2].(*REJ), s[3].(*REP), s[4].(*RTU), s[5].(*DREQ), s[6].(*DREP), s[7], s[8], s[9]
	req.ServiceID = 0x1234567890abcdef // not an IP CM service: Wireshark shows the private data as is
	v4 := rdmaREQ(t, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"))
	v6 := rdmaREQ(t, netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"))
	appData := append([]byte("sroce app data"), make([]byte, REQAppPrivateLen-14)...)
	cases := []wsCase{
		{"REQ", req, map[string]any{
			"infiniband.cm.req": req.LocalCommID, "infiniband.cm.req.serviceid": req.ServiceID,
			"infiniband.cm.req.localcaguid": req.LocalCAGUID, "infiniband.cm.req.localqkey": req.LocalQKey,
			"infiniband.cm.req.localqpn": req.LocalQPN, "infiniband.cm.req.responderres": req.ResponderResources,
			"infiniband.cm.req.localeecn": req.LocalEECN, "infiniband.cm.req.initdepth": req.InitiatorDepth,
			"infiniband.cm.req.remoteeecn": req.RemoteEECN, "infiniband.cm.req.remoteresptout": req.RemoteCMResponseTimeout,
			"infiniband.cm.req.transpsvctype": req.Transport, "infiniband.cm.req.e2eflowctrl": 1,
			"infiniband.cm.req.startpsn": req.StartingPSN, "infiniband.cm.req.localresptout": req.LocalCMResponseTimeout,
			"infiniband.cm.req.retrcount": req.RetryCount, "infiniband.cm.req.pkey": req.PKey,
			"infiniband.cm.req.pppmtu": req.PathMTU, "infiniband.cm.req.rdcexist": 1,
			"infiniband.cm.req.rnrretrcount": req.RNRRetryCount, "infiniband.cm.req.maxcmretr": req.MaxCMRetries,
			"infiniband.cm.req.srq": 1, "infiniband.cm.req.ext_transport": req.ExtendedTransport,
			"infiniband.cm.req.prim_locallid": req.Primary.LocalLID, "infiniband.cm.req.prim_remotelid": req.Primary.RemoteLID,
			"infiniband.cm.req.prim_pktrate": req.Primary.PacketRate, "infiniband.cm.req.prim_tfcclass": req.Primary.TrafficClass,
			"infiniband.cm.req.prim_hoplim": req.Primary.HopLimit, "infiniband.cm.req.prim_sl": req.Primary.SL,
			"infiniband.cm.req.prim_subnetlocal": 1, "infiniband.cm.req.prim_localacktout": req.Primary.LocalACKTimeout,
			"infiniband.cm.req.alt_locallid": req.Alternate.LocalLID, "infiniband.cm.req.alt_remotelid": req.Alternate.RemoteLID,
			"infiniband.cm.req.alt_localgid": req.Alternate.LocalGID[:], "infiniband.cm.req.alt_remotegid": req.Alternate.RemoteGID[:],
			"infiniband.cm.req.alt_tfcclass": req.Alternate.TrafficClass, "infiniband.cm.req.alt_hoplim": req.Alternate.HopLimit,
			"infiniband.cm.req.alt_sl": req.Alternate.SL, "infiniband.cm.req.alt_subnetlocal": 1,
			"infiniband.cm.req.alt_localacktout": req.Alternate.LocalACKTimeout,
			"infiniband.cm.req.private":          req.PrivateData,
		}},
		{"RDMA CM REQ over IPv4", v4, map[string]any{
			"infiniband.cm.req": v4.LocalCommID, "infiniband.cm.req.serviceid.protocol": 0x06,
			"infiniband.cm.req.serviceid.dport": 7471, "infiniband.cm.req.localqpn": v4.LocalQPN,
			"infiniband.cm.req.startpsn": v4.StartingPSN, "infiniband.cm.req.transpsvctype": 0,
			"infiniband.cm.req.prim_localgid_ipv4": "10.0.0.1", "infiniband.cm.req.prim_remotegid_ipv4": "10.0.0.2",
			"infiniband.cm.req.ip_cm.majv": 0, "infiniband.cm.req.ip_cm.minv": 0, "infiniband.cm.req.ip_cm.ipv": 4,
			"infiniband.cm.req.ip_cm.sport": 0xd431, "infiniband.cm.req.ip_cm.sip4": "10.0.0.1",
			"infiniband.cm.req.ip_cm.dip4": "10.0.0.2", "infiniband.cm.req.ip_cm.private": appData,
		}},
		{"RDMA CM REQ over IPv6", v6, map[string]any{
			"infiniband.cm.req.serviceid.dport": 7471, "infiniband.cm.req.prim_localgid": "fd00::1",
			"infiniband.cm.req.prim_remotegid": "fd00::2", "infiniband.cm.req.ip_cm.ipv": 6,
			"infiniband.cm.req.ip_cm.sport": 0xd431, "infiniband.cm.req.ip_cm.sip6": "fd00::1",
			"infiniband.cm.req.ip_cm.dip6": "fd00::2", "infiniband.cm.req.ip_cm.private": appData,
		}},
		{"MRA", mra, nil},
		{"REJ", rej, map[string]any{
			"infiniband.cm.rej.localcommid": rej.LocalCommID, "infiniband.cm.rej.remotecommid": rej.RemoteCommID,
			"infiniband.cm.rej.msgrej": rej.MessageRejected, "infiniband.cm.rej.rejinfolen": rej.RejectedInfoLen,
			"infiniband.cm.rej.reason": rej.Reason, "infiniband.cm.rej.ari": rej.ARI,
			"infiniband.cm.rej.private": rej.PrivateData,
		}},
		{"REP", rep, map[string]any{
			"infiniband.cm.rep": rep.LocalCommID, "infiniband.cm.rep.remotecommid": rep.RemoteCommID,
			"infiniband.cm.rep.localqkey": rep.LocalQKey, "infiniband.cm.rep.localqpn": rep.LocalQPN,
			"infiniband.cm.rep.localeecn": rep.LocalEECN, "infiniband.cm.rep.startpsn": rep.StartingPSN,
			"infiniband.cm.rep.respres": rep.ResponderResources, "infiniband.cm.rep.initdepth": rep.InitiatorDepth,
			"infiniband.cm.rep.tgtackdelay": rep.TargetACKDelay, "infiniband.cm.rep.failoveracc": rep.FailoverAccepted,
			"infiniband.cm.rep.e2eflowctrl": 1, "infiniband.cm.rep.rnrretrcount": rep.RNRRetryCount,
			"infiniband.cm.rep.srq": 1, "infiniband.cm.rep.localcaguid": rep.LocalCAGUID,
			"infiniband.cm.rep.private": rep.PrivateData,
		}},
		{"RTU", rtu, map[string]any{
			"infiniband.cm.rtu.localcommid": rtu.LocalCommID, "infiniband.cm.rtu.remotecommid": rtu.RemoteCommID,
			"infiniband.cm.rtu.private": rtu.PrivateData,
		}},
		{"DREQ", dreq, map[string]any{
			"infiniband.cm.dreq.localcommid": dreq.LocalCommID, "infiniband.cm.dreq.remotecommid": dreq.RemoteCommID,
			"infiniband.cm.req.remoteqpneecn": dreq.RemoteQPN, "infiniband.cm.dreq.private": dreq.PrivateData,
		}},
		{"DREP", drep, map[string]any{
			"infiniband.cm.drsp.localcommid": drep.LocalCommID, "infiniband.cm.drsp.remotecommid": drep.RemoteCommID,
			"infiniband.cm.drsp.private": drep.PrivateData,
		}},
		{"SIDR_REQ", sidrReq, nil},
		{"SIDR_REP", sidrRep, nil},
		{"ClassPortInfo", cpi, nil},
	}
	fieldSet := map[string]bool{}
	var fields []string
	add := func(f string) {
		if !fieldSet[f] {
			fieldSet[f] = true
			fields = append(fields, f)
		}
	}
	for _, f := range []string{
		"infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.deth.q_key", "infiniband.deth.srcqp",
		"infiniband.mad.baseversion", "infiniband.mad.mgmtclass", "infiniband.mad.classversion",
		"infiniband.mad.method", "infiniband.mad.transactionid", "infiniband.mad.attributeid", "infiniband.mad.data",
	} {
		add(f)
	}
	var frames [][]byte
	var mads [][]byte
	for i, c := range cases {
		for f := range c.want {
			add(f)
		}
		h := CMHeader(MethodSend, 0x1111000000000000+uint64(i), c.msg.Attr())
		if c.msg.Attr() == AttrClassPortInfo {
			h.Method = MethodGetResp
		}
		mad := make([]byte, MADLen)
		if err := Marshal(mad, h, c.msg); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		mads = append(mads, mad)
		frames = append(frames, udFrame(t, mad, bth.PSN(i), c.name == "RDMA CM REQ over IPv6"))
	}
	got := tsharkFields(t, frames, fields)
	for i, c := range cases {
		want := map[string]any{
			"infiniband.bth.opcode": bth.UDSendOnly, "infiniband.bth.destqp": GSIQPN,
			"infiniband.deth.q_key": GSIQKey, "infiniband.deth.srcqp": GSIQPN,
			"infiniband.mad.baseversion": 1, "infiniband.mad.mgmtclass": 7, "infiniband.mad.classversion": 2,
			"infiniband.mad.method": MethodSend, "infiniband.mad.transactionid": 0x1111000000000000 + uint64(i),
			"infiniband.mad.attributeid": c.msg.Attr(), "infiniband.mad.data": mads[i][MADHeaderLen:],
		}
		if c.msg.Attr() == AttrClassPortInfo {
			want["infiniband.mad.method"] = MethodGetResp
		}
		for f, v := range c.want {
			want[f] = v
		}
		for f, w := range want {
			if msg := compareField(got[i][f], w); msg != "" {
				t.Errorf("%s: %s: %s", c.name, f, msg)
			}
		}
	}
}

// compareField compares tshark's text for a field with what was encoded
// and returns what differs, or "".
func compareField(got string, want any) string {
	if got == "" {
		return "not decoded by tshark"
	}
	switch w := want.(type) {
	case string:
		if got != w {
			return "tshark " + got + ", encoded " + w
		}
		return ""
	case []byte:
		g := strings.ReplaceAll(got, ":", "")
		if g != hex.EncodeToString(w) {
			return "tshark " + g + ", encoded " + hex.EncodeToString(w)
		}
		return ""
	}
	wv := reflect.ValueOf(want)
	var n uint64
	switch wv.Kind() {
	case reflect.Int, reflect.Int64:
		n = uint64(wv.Int())
	default:
		n = wv.Uint()
	}
	g, err := strconv.ParseUint(got, 0, 64)
	if err != nil {
		return "tshark printed " + strconv.Quote(got) + ", not a number"
	}
	if g != n {
		return "tshark " + got + ", encoded " + strconv.FormatUint(n, 10) + " (0x" + strconv.FormatUint(n, 16) + ")"
	}
	return ""
}
