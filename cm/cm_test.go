package cm

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
)

// pattern returns n bytes counting up from seed.
func pattern(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return b
}

func gid(seed byte) bth.GID { return bth.GID(pattern(seed, 16)) }

// samples returns one message of each kind with every field set, each to a
// value distinct from the others, and private data of the full size.
func samples() []Message {
	return []Message{
		&REQ{
			LocalCommID: 0x11223344, VendorID: 0x00c0ffee, ServiceID: 0x0000000001061d2f, LocalCAGUID: 0x0102030405060708,
			LocalQKey: 0x0a0b0c0d, LocalQPN: 0xabcdef, ResponderResources: 0x21, LocalEECN: 0x345678,
			InitiatorDepth: 0x22, RemoteEECN: 0x456789, RemoteCMResponseTimeout: 0x13,
			Transport: TransportUC, EndToEndFlowControl: true, StartingPSN: 0x987654,
			LocalCMResponseTimeout: 0x11, RetryCount: 6, PKey: 0x8001, PathMTU: verbs.MTU1024,
			RDCExists: true, RNRRetryCount: 5, MaxCMRetries: 14, SRQ: true, ExtendedTransport: 3,
			Primary: Path{
				LocalLID: 0x1001, RemoteLID: 0x1002, LocalGID: gid(0x30), RemoteGID: gid(0x50),
				FlowLabel: 0xabcde, PacketRate: 0x2b, TrafficClass: 0x61, HopLimit: 0x40, SL: 9,
				SubnetLocal: true, LocalACKTimeout: 0x12,
			},
			Alternate: Path{
				LocalLID: 0x2001, RemoteLID: 0x2002, LocalGID: gid(0x70), RemoteGID: gid(0x90),
				FlowLabel: 0x54321, PacketRate: 0x15, TrafficClass: 0x62, HopLimit: 0x41, SL: 7,
				SubnetLocal: true, LocalACKTimeout: 0x0e,
			},
			SAPSupported: true,
			PrivateData:  pattern(0xa0, REQPrivateLen),
		},
		&MRA{LocalCommID: 0x01020304, RemoteCommID: 0x05060708, MessageMRAed: MsgREP, ServiceTimeout: 0x17,
			PrivateData: pattern(0x10, MRAPrivateLen)},
		&REJ{LocalCommID: 0x11111112, RemoteCommID: 0x22222223, MessageRejected: MsgOther,
			RejectedInfoLen: REJARILen, Reason: RejConsumerDefined, ARI: pattern(0x40, REJARILen),
			PrivateData: pattern(0x80, REJPrivateLen)},
		&REP{LocalCommID: 0x31323334, RemoteCommID: 0x41424344, LocalQKey: 0x51525354, LocalQPN: 0x616263,
			LocalEECN: 0x717273, StartingPSN: 0x818283, ResponderResources: 0x91, InitiatorDepth: 0x92,
			TargetACKDelay: 0x1d, FailoverAccepted: 2, EndToEndFlowControl: true, RNRRetryCount: 6,
			SRQ: true, LocalCAGUID: 0xa1a2a3a4a5a6a7a8, VendorID: 0xb1b2b3, PrivateData: pattern(0x20, REPPrivateLen)},
		&RTU{LocalCommID: 0xb1b2b3b4, RemoteCommID: 0xc1c2c3c4, PrivateData: pattern(0x33, RTUPrivateLen)},
		&DREQ{LocalCommID: 0xd1d2d3d4, RemoteCommID: 0xe1e2e3e4, RemoteQPN: 0xf1f2f3, PrivateData: pattern(0x44, DREQPrivateLen)},
		&DREP{LocalCommID: 0x0f0e0d0c, RemoteCommID: 0x0b0a0908, PrivateData: pattern(0x55, DREPPrivateLen)},
		&SIDRREQ{RequestID: 0x12345678, PKey: 0xfffe, ServiceID: 0x0000000001114e21, PrivateData: pattern(0x66, SIDRREQPrivateLen)},
		&SIDRREP{RequestID: 0x87654321, Status: SIDRRedirect, InfoLen: 40, QPN: 0x0a0b0c, ServiceID: 0x0000000001114e22,
			QKey: 0x01234567, VendorID: 0xc1c2c3, Info: pattern(0x77, 40), PrivateData: pattern(0x88, SIDRREPPrivateLen)},
		&ClassPortInfo{
			BaseVersion: 1, ClassVersion: 2, CapabilityMask: 0x0102, CapabilityMask2: 0x5abcdef, RespTimeValue: 0x13,
			RedirectGID: gid(0x01), RedirectTC: 0x21, RedirectSL: 0xa, RedirectFL: 0xf1234, RedirectLID: 0x3031,
			RedirectPKey: 0x4041, RedirectQP: 0x505152, RedirectQKey: 0x60616263,
			TrapGID: gid(0x81), TrapTC: 0x22, TrapSL: 0x5, TrapFL: 0xe5678, TrapLID: 0x7071,
			TrapPKey: 0x8081, TrapHL: 0x3f, TrapQP: 0x909192, TrapQKey: 0xa0a1a2a3,
		},
	}
}

func TestRoundTrip(t *testing.T) {
	for i, msg := range samples() {
		mad, err := Send(uint64(0x1000+i), msg)
		if err != nil {
			t.Fatalf("%v: %v", msg.Attr(), err)
		}
		if len(mad) != MADLen {
			t.Fatalf("%v: MAD of %d bytes", msg.Attr(), len(mad))
		}
		h, got, err := Unmarshal(mad)
		if err != nil {
			t.Fatalf("%v: %v", msg.Attr(), err)
		}
		want := CMHeader(MethodSend, uint64(0x1000+i), msg.Attr())
		if h != want {
			t.Errorf("%v: header %+v, want %+v", msg.Attr(), h, want)
		}
		if !reflect.DeepEqual(got, msg) {
			t.Errorf("%v: decoded\n%+v\nwant\n%+v", msg.Attr(), got, msg)
		}
		// Encoding again gives the same bytes.
		again, err := Send(uint64(0x1000+i), got)
		if err != nil || !bytes.Equal(again, mad) {
			t.Errorf("%v: re-encoding differs (%v)", msg.Attr(), err)
		}
	}
}

// TestFieldsApart sets one field at a time to its all-ones value and checks
// that decoding finds that field only: no two fields share a bit.
func TestFieldsApart(t *testing.T) {
	for _, msg := range samples() {
		typ := reflect.TypeOf(msg).Elem()
		var walk func(prefix []int, tt reflect.Type)
		walk = func(prefix []int, tt reflect.Type) {
			for i := 0; i < tt.NumField(); i++ {
				idx := append(append([]int(nil), prefix...), i)
				f := tt.Field(i)
				if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(bth.GID{}) {
					walk(idx, f.Type)
					continue
				}
				one := reflect.New(typ)
				if !setMax(t, one.Elem().FieldByIndex(idx), one.Interface().(Message), idx) {
					continue
				}
				m := one.Interface().(Message)
				data := make([]byte, DataLen)
				if err := m.Encode(data); err != nil {
					t.Fatalf("%v.%s: %v", m.Attr(), f.Name, err)
				}
				back := reflect.New(typ).Interface().(Message)
				if err := back.Decode(data); err != nil {
					t.Fatal(err)
				}
				// Compare without the slices, which decode at full size.
				zeroSlices(reflect.ValueOf(back).Elem())
				zeroSlices(reflect.ValueOf(m).Elem())
				if !reflect.DeepEqual(back, m) {
					t.Errorf("%v: field %s alone decodes as %+v", m.Attr(), f.Name, back)
				}
			}
		}
		walk(nil, typ)
	}
}

// setMax sets v to the largest value its field takes: it tries all-ones
// and shifts right until Encode accepts it. It reports false for slices.
func setMax(t *testing.T, v reflect.Value, m Message, idx []int) bool {
	data := make([]byte, DataLen)
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(true)
		return true
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			v.Index(i).SetUint(0xff)
		}
		return true
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		for x := uint64(1)<<(v.Type().Size()*8) - 1 | ^uint64(0)*boolU(v.Type().Size() == 8); x != 0; x >>= 1 {
			v.SetUint(x)
			if m.Encode(data) == nil {
				return true
			}
		}
		t.Fatalf("%v field %v: no value encodes", m.Attr(), idx)
	}
	return false
}

func boolU(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func zeroSlices(v reflect.Value) {
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).Kind() == reflect.Slice {
			v.Field(i).SetZero()
		}
	}
}

// TestKnownPositions pins fields to the byte positions of the IBTA's tables
// (offsets within the MAD data).
func TestKnownPositions(t *testing.T) {
	data := make([]byte, DataLen)
	r := &REQ{LocalQPN: 0x123456, ResponderResources: 0x78, RemoteCMResponseTimeout: 0x1f,
		Transport: TransportUC, StartingPSN: 0xabcdef, LocalCMResponseTimeout: 0x10, RetryCount: 7,
		PKey: 0xffff, PathMTU: verbs.MTU4096, RNRRetryCount: 7, MaxCMRetries: 15,
		Primary: Path{FlowLabel: 0xfffff, PacketRate: 0x3f, SL: 0xf, SubnetLocal: true, LocalACKTimeout: 0x1f}}
	if err := r.Encode(data); err != nil {
		t.Fatal(err)
	}
	want := map[int]byte{
		32: 0x12, 33: 0x34, 34: 0x56, 35: 0x78, 43: 0xfa, 44: 0xab, 45: 0xcd, 46: 0xef, 47: 0x87,
		48: 0xff, 49: 0xff, 50: 0x57, 51: 0xf0, 88: 0xff, 89: 0xff, 90: 0xf0, 91: 0x3f, 94: 0xf8, 95: 0xf8,
	}
	for i, c := range data {
		if c != want[i] {
			t.Errorf("REQ data byte %d = %#02x, want %#02x", i, c, want[i])
		}
	}
}

// TestVendorIDPositions pins the ECE vendor IDs, which share words with
// other fields or are split over several bytes.
func TestVendorIDPositions(t *testing.T) {
	for _, c := range []struct {
		msg  Message
		want map[int]byte
	}{
		{&REQ{VendorID: 0x123456}, map[int]byte{5: 0x12, 6: 0x34, 7: 0x56}},
		{&REP{VendorID: 0x123456}, map[int]byte{15: 0x12, 19: 0x34, 23: 0x56}},
		{&SIDRREP{VendorID: 0x123456}, map[int]byte{6: 0x12, 7: 0x34, 11: 0x56}},
	} {
		data := make([]byte, DataLen)
		if err := c.msg.Encode(data); err != nil {
			t.Fatal(err)
		}
		for i, b := range data {
			if b != c.want[i] {
				t.Errorf("%v: data byte %d = %#02x, want %#02x", c.msg.Attr(), i, b, c.want[i])
			}
		}
	}
}

func TestOutOfRange(t *testing.T) {
	cases := []Message{
		&REQ{LocalQPN: 1 << 24},
		&REQ{RemoteCMResponseTimeout: 32},
		&REQ{Transport: 4},
		&REQ{StartingPSN: 1 << 24},
		&REQ{RetryCount: 8},
		&REQ{PathMTU: 16},
		&REQ{Primary: Path{FlowLabel: 1 << 20}},
		&REQ{Alternate: Path{SL: 16}},
		&MRA{MessageMRAed: 4},
		&REJ{RejectedInfoLen: 128},
		&REP{RNRRetryCount: 8},
		&REP{VendorID: 1 << 24},
		&REQ{VendorID: 1 << 24},
		&SIDRREP{VendorID: 1 << 24},
		&DREQ{RemoteQPN: 1 << 24},
		&SIDRREP{QPN: 1 << 24},
		&ClassPortInfo{CapabilityMask2: 1 << 27},
	}
	for _, m := range cases {
		err := m.Encode(make([]byte, DataLen))
		var e *Error
		if !errors.Is(err, ErrOutOfRange) || !errors.As(err, &e) || e.Where == "" {
			t.Errorf("%v %+v: %v, want an out-of-range error naming the field", m.Attr(), m, err)
		}
	}
}

func TestPrivateDataTooLong(t *testing.T) {
	for _, m := range samples() {
		v := reflect.ValueOf(m).Elem().FieldByName("PrivateData")
		if !v.IsValid() {
			continue
		}
		v.SetBytes(make([]byte, v.Len()+1))
		if err := m.Encode(make([]byte, DataLen)); !errors.Is(err, ErrPrivateDataLen) {
			t.Errorf("%v: %v, want %v", m.Attr(), err, ErrPrivateDataLen)
		}
		// Shorter private data is padded with zeros.
		v.SetBytes([]byte{1, 2, 3})
		data := bytes.Repeat([]byte{0xee}, DataLen)
		if err := m.Encode(data); err != nil {
			t.Fatal(err)
		}
		back := New(m.Attr())
		if err := back.Decode(data); err != nil {
			t.Fatal(err)
		}
		pd := reflect.ValueOf(back).Elem().FieldByName("PrivateData").Bytes()
		if !bytes.Equal(pd[:3], []byte{1, 2, 3}) || bytes.Count(pd[3:], []byte{0}) != len(pd)-3 {
			t.Errorf("%v: private data % x", m.Attr(), pd)
		}
	}
}

func TestShortInput(t *testing.T) {
	for _, m := range samples() {
		need := DataLen
		if m.Attr() == AttrClassPortInfo {
			need = ClassPortInfoLen
		}
		for n := 0; n < need; n++ {
			if err := m.Encode(make([]byte, n)); !errors.Is(err, ErrTooShort) {
				t.Fatalf("%v: Encode into %d bytes: %v", m.Attr(), n, err)
			}
			if err := New(m.Attr()).Decode(make([]byte, n)); !errors.Is(err, ErrTooShort) {
				t.Fatalf("%v: Decode of %d bytes: %v", m.Attr(), n, err)
			}
		}
	}
	mad, _ := Send(1, &RTU{})
	for n := 0; n < MADLen; n++ {
		if _, _, err := Unmarshal(mad[:n]); !errors.Is(err, ErrTooShort) {
			t.Fatalf("Unmarshal of %d bytes: %v", n, err)
		}
	}
	if err := Marshal(make([]byte, MADLen-1), Header{}, &RTU{}); !errors.Is(err, ErrTooShort) {
		t.Errorf("Marshal into a short buffer: %v", err)
	}
	// A longer buffer (a padded UD payload) is fine.
	if _, _, err := Unmarshal(append(mad, 0, 0, 0)); err != nil {
		t.Errorf("Unmarshal of a padded MAD: %v", err)
	}
}

func TestParseMAD(t *testing.T) {
	good, _ := Send(7, &DREP{})
	for _, c := range []struct {
		off  int
		val  byte
		want error
	}{
		{madBaseVersion, 2, ErrBadVersion},
		{madMgmtClass, 0x01, ErrNotCM},
		{madClassVersion, 1, ErrBadVersion},
		{madAttrID + 1, 0x19, ErrUnknownAttr}, // LAP: not decoded
		{madAttrID + 1, 0x7f, ErrUnknownAttr},
	} {
		b := bytes.Clone(good)
		b[c.off] = c.val
		if _, _, err := Unmarshal(b); !errors.Is(err, c.want) {
			t.Errorf("byte %d = %#x: %v, want %v", c.off, c.val, err, c.want)
		}
	}
	m := MAD(good)
	h := m.Header()
	if h.TID != 7 || m.TID() != 7 || m.AttrID() != AttrDREP || m.Method() != MethodSend {
		t.Errorf("header %+v", h)
	}
	h2 := Header{BaseVersion: 1, MgmtClass: 7, ClassVersion: 2, Method: MethodGetResp, Status: 0x1234,
		ClassSpecific: 0x5678, TID: 0x0102030405060708, AttrID: AttrClassPortInfo, AttrMod: 0x9abcdef0}
	b := make([]byte, MADLen)
	if err := h2.Encode(b); err != nil || MAD(b).Header() != h2 {
		t.Errorf("header round trip: %+v %v", MAD(b).Header(), err)
	}
	if err := h2.Encode(b[:MADHeaderLen-1]); !errors.Is(err, ErrTooShort) {
		t.Errorf("short header: %v", err)
	}
}

func TestREJARILength(t *testing.T) {
	data := make([]byte, DataLen)
	r := &REJ{Reason: RejTimeout, RejectedInfoLen: 8, ARI: pattern(1, 8)}
	if err := r.Encode(data); err != nil {
		t.Fatal(err)
	}
	data[9] = 0x7f << 1 // 127: more than the ARI field holds
	var back REJ
	if err := back.Decode(data); err != nil || len(back.ARI) != REJARILen || back.RejectedInfoLen != 127 {
		t.Errorf("REJ with info length 127: %+v %v", back, err)
	}
}

func TestNames(t *testing.T) {
	if RejConsumerDefined.String() != "consumer reject" || RejReason(34).String() != "reject reason 34" {
		t.Errorf("reasons: %q %q", RejConsumerDefined, RejReason(34))
	}
	for r := RejNoQP; r <= RejVendorOptionNotSupported; r++ {
		if r != 34 && rejText[r] == "" {
			t.Errorf("reason %d has no name", r)
		}
	}
	if AttrSIDRREP.String() != "SIDR_REP" || AttrID(0x99).String() != "attribute 0x99" {
		t.Errorf("attrs: %v %v", AttrSIDRREP, AttrID(0x99))
	}
	if MsgREP.String() != "REP" || SIDRNoQP.String() != "no QP available" || MethodGetResp.String() != "GetResp" {
		t.Error("names")
	}
	e := &Error{Kind: KindOutOfRange, Where: "REQ local QPN"}
	if e.Error() != "cm: REQ local QPN: value out of range" {
		t.Errorf("error text %q", e)
	}
}

func TestServiceID(t *testing.T) {
	if id := ServiceID(PortSpaceTCP, 7471); id != 0x0000000001061d2f {
		t.Errorf("TCP 7471: %#x", id)
	}
	if id := ServiceID(PortSpaceUDP, 1); id != 0x0000000001110001 {
		t.Errorf("UDP 1: %#x", id)
	}
	ps, port, ok := ParseServiceID(0x0000000001064e20)
	if !ok || ps != PortSpaceTCP || port != 20000 {
		t.Errorf("parse: %v %d %v", ps, port, ok)
	}
	for _, id := range []uint64{0x1000000001060001, 0x01070001, 0} {
		if _, _, ok := ParseServiceID(id); ok {
			t.Errorf("%#x parsed as an IP service ID", id)
		}
	}
}

func TestIPHeader(t *testing.T) {
	for _, h := range []IPHeader{
		{SrcPort: 0x8001, Src: netip.MustParseAddr("10.1.2.3"), Dst: netip.MustParseAddr("192.168.7.9")},
		{SrcPort: 65535, Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fe80::aa:bb")},
	} {
		pd, err := IPPrivateData(h, []byte("hello"), REQPrivateLen)
		if err != nil {
			t.Fatal(err)
		}
		if len(pd) != IPHeaderLen+5 || pd[0] != 0 || pd[2] != byte(h.SrcPort>>8) || pd[3] != byte(h.SrcPort) {
			t.Errorf("% x", pd)
		}
		if h.Src.Is4() {
			if pd[1] != 0x40 || !bytes.Equal(pd[4:16], make([]byte, 12)) || !bytes.Equal(pd[16:20], []byte{10, 1, 2, 3}) ||
				!bytes.Equal(pd[32:36], []byte{192, 168, 7, 9}) {
				t.Errorf("IPv4 header % x", pd)
			}
		} else if pd[1] != 0x60 {
			t.Errorf("IPv6 header % x", pd)
		}
		got, app, err := SplitIPPrivateData(pd)
		if err != nil || got != h || string(app) != "hello" {
			t.Errorf("split: %+v %q %v", got, app, err)
		}
	}
	mapped := IPHeader{Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}
	if pd, err := IPPrivateData(mapped, nil, REQPrivateLen); err != nil || pd[1] != 0x40 {
		t.Errorf("mapped IPv4: % x %v", pd, err)
	}
	mixed := IPHeader{Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: netip.MustParseAddr("fd00::2")}
	if pd, err := IPPrivateData(mixed, nil, REQPrivateLen); err != nil || pd[1] != 0x60 || pd[14] != 0xff {
		t.Errorf("IPv6 with a mapped address: % x %v", pd, err)
	} else if got, _, _ := SplitIPPrivateData(pd); got != mixed {
		t.Errorf("IPv6 with a mapped address decodes as %+v", got)
	}
	bad := []IPHeader{
		{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("fd00::2")},
		{Src: netip.MustParseAddr("10.0.0.1")},
	}
	for _, h := range bad {
		if _, err := IPPrivateData(h, nil, REQPrivateLen); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("%+v: %v", h, err)
		}
	}
	if _, err := IPPrivateData(IPHeader{Src: netip.IPv4Unspecified(), Dst: netip.IPv4Unspecified()}, make([]byte, REQAppPrivateLen+1), REQPrivateLen); !errors.Is(err, ErrPrivateDataLen) {
		t.Errorf("too much application data: %v", err)
	}
	pd, _ := IPPrivateData(IPHeader{Src: netip.IPv4Unspecified(), Dst: netip.IPv4Unspecified()}, nil, REQPrivateLen)
	for n := 0; n < IPHeaderLen; n++ {
		if _, _, err := SplitIPPrivateData(pd[:n]); !errors.Is(err, ErrTooShort) {
			t.Errorf("%d bytes: %v", n, err)
		}
	}
	for _, c := range []struct{ off, val int }{{0, 0x10}, {1, 0x50}, {1, 0x00}} {
		b := bytes.Clone(pd)
		b[c.off] = byte(c.val)
		if _, _, err := SplitIPPrivateData(b); !errors.Is(err, ErrBadIPHeader) {
			t.Errorf("byte %d = %#x: %v", c.off, c.val, err)
		}
	}
}

// TestSIDRWithIPHeader resolves a UDP port space service as rdma_cm does:
// a SIDR_REQ whose private data starts with the IP CM header.
func TestSIDRWithIPHeader(t *testing.T) {
	h := IPHeader{SrcPort: 40000, Src: netip.MustParseAddr("10.9.8.7"), Dst: netip.MustParseAddr("10.9.8.6")}
	app := pattern(1, SIDRAppPrivateLen)
	pd, err := IPPrivateData(h, app, SIDRREQPrivateLen)
	if err != nil {
		t.Fatal(err)
	}
	mad, err := Send(9, &SIDRREQ{RequestID: 5, PKey: 0xffff, ServiceID: ServiceID(PortSpaceUDP, 4791), PrivateData: pd})
	if err != nil {
		t.Fatal(err)
	}
	_, msg, err := Unmarshal(mad)
	if err != nil {
		t.Fatal(err)
	}
	req := msg.(*SIDRREQ)
	ps, port, ok := ParseServiceID(req.ServiceID)
	got, gotApp, err := SplitIPPrivateData(req.PrivateData)
	if !ok || ps != PortSpaceUDP || port != 4791 || err != nil || got != h || !bytes.Equal(gotApp, app) {
		t.Errorf("SIDR_REQ: %v %d %v %+v %v", ps, port, ok, got, err)
	}
	if _, err := IPPrivateData(h, append(app, 0), SIDRREQPrivateLen); !errors.Is(err, ErrPrivateDataLen) {
		t.Errorf("one byte too many: %v", err)
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, m := range samples() {
		b, _ := Send(1, m)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, msg, err := Unmarshal(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		// What decodes encodes to the same data, apart from reserved bits;
		// and decoding that gives the same message.
		again := make([]byte, MADLen)
		if err := Marshal(again, h, msg); err != nil {
			t.Fatalf("re-encoding %v: %v", h.AttrID, err)
		}
		h2, msg2, err := Unmarshal(again)
		if err != nil || h2 != h || !reflect.DeepEqual(msg, msg2) {
			t.Fatalf("unstable: %+v %+v %v", msg, msg2, err)
		}
	})
}

func FuzzIPHeader(f *testing.F) {
	pd, _ := IPPrivateData(IPHeader{SrcPort: 1, Src: netip.MustParseAddr("1.2.3.4"), Dst: netip.MustParseAddr("5.6.7.8")}, []byte("x"), REQPrivateLen)
	f.Add(pd)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, app, err := SplitIPPrivateData(b)
		if err != nil {
			return
		}
		pd, err := IPPrivateData(h, app[:min(len(app), SIDRAppPrivateLen)], SIDRREQPrivateLen)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", h, err)
		}
		// An IPv6 header whose two addresses are IPv4-mapped encodes again
		// as an IPv4 header: the same addresses.
		h2, _, err := SplitIPPrivateData(pd)
		if err != nil || h2.SrcPort != h.SrcPort || h2.Src.Unmap() != h.Src.Unmap() || h2.Dst.Unmap() != h.Dst.Unmap() {
			t.Fatalf("unstable: %+v %+v %v", h, h2, err)
		}
	})
}
