package rtnl

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestEncoderRoundTrip(t *testing.T) {
	var e Encoder
	e.Header(IfInfomsg{Family: unix.AF_UNSPEC, Index: 7, Flags: unix.IFF_UP, Change: unix.IFF_UP}.Encode())
	e.String(unix.IFLA_IFNAME, "veth0")
	e.Uint32(unix.IFLA_MTU, 9000)
	e.Uint8(unix.IFLA_OPERSTATE, OperUp)
	e.Nested(unix.IFLA_LINKINFO, func(e *Encoder) {
		e.String(unix.IFLA_INFO_KIND, "veth")
		e.Nested(unix.IFLA_INFO_DATA, func(e *Encoder) {
			e.Addr(1, netip.MustParseAddr("10.0.0.1"))
		})
	})
	b := e.Encode()
	if len(b)%4 != 0 {
		t.Fatalf("body length %d not aligned", len(b))
	}
	h, attrs, err := ParseIfInfomsg(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Index != 7 || h.Flags != unix.IFF_UP || h.Change != unix.IFF_UP {
		t.Errorf("header %+v", h)
	}
	if len(attrs) != 4 {
		t.Fatalf("%d attributes", len(attrs))
	}
	if attrs[0].String() != "veth0" || attrs[1].Uint32() != 9000 || attrs[2].Uint8() != OperUp {
		t.Errorf("attributes %v", attrs)
	}
	if attrs[3].Type != unix.IFLA_LINKINFO {
		t.Errorf("nested type %#x (flag not cleared?)", attrs[3].Type)
	}
	info, err := ParseAttrs(attrs[3].Data)
	if err != nil || len(info) != 2 || info[0].String() != "veth" {
		t.Fatalf("linkinfo %v %v", info, err)
	}
	data, err := ParseAttrs(info[1].Data)
	if err != nil || len(data) != 1 || data[0].Addr() != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("info data %v %v", data, err)
	}
	// Short values read as zero instead of panicking.
	if (Attr{}).Uint32() != 0 || (Attr{}).Uint8() != 0 || (Attr{}).Addr().IsValid() {
		t.Error("short attribute values")
	}
}

// TestParseTruncated feeds every prefix of valid input to the parsers.
func TestParseTruncated(t *testing.T) {
	var e Encoder
	e.Header(IfAddrmsg{Family: unix.AF_INET6, PrefixLen: 64, Index: 3}.Encode())
	e.Addr(unix.IFA_ADDRESS, netip.MustParseAddr("2001:db8::1"))
	e.Uint32(unix.IFA_FLAGS, unix.IFA_F_NODAD)
	body := e.Encode()
	msg := make([]byte, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg, uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], unix.RTM_NEWADDR)
	copy(msg[unix.SizeofNlMsghdr:], body)
	msgs, err := ParseMessages(msg)
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	a, err := ParseAddress(msgs[0])
	if err != nil || a.Prefix != netip.MustParsePrefix("2001:db8::1/64") || a.Flags != unix.IFA_F_NODAD || a.Index != 3 {
		t.Fatalf("address %+v %v", a, err)
	}
	for n := 0; n < len(msg); n++ {
		ms, err := ParseMessages(msg[:n])
		if n >= unix.SizeofNlMsghdr && err == nil {
			t.Errorf("prefix %d: no error", n)
		}
		for _, m := range ms {
			ParseAddress(m) // must not panic
		}
	}
	for n := 0; n < len(body); n++ {
		if _, _, err := ParseIfAddrmsg(body[:n]); n < unix.SizeofIfAddrmsg && err == nil {
			t.Errorf("header prefix %d accepted", n)
		}
		ParseAttrs(body[unix.SizeofIfAddrmsg:max(n, unix.SizeofIfAddrmsg)])
	}
	if _, err := ParseAttrs([]byte{3, 0, 1, 0}); err == nil {
		t.Error("attribute length 3 accepted")
	}
	if _, err := ParseAttrs([]byte{9, 0, 1, 0, 0}); err == nil {
		t.Error("attribute longer than the buffer accepted")
	}
}

func TestParseError(t *testing.T) {
	// NLMSG_ERROR with -EEXIST, a capped ACK and an extended ACK message.
	var tlv Encoder
	tlv.String(unix.NLMSGERR_ATTR_MSG, "File exists here")
	data := make([]byte, 4+unix.SizeofNlMsghdr)
	code := -int32(unix.EEXIST)
	binary.NativeEndian.PutUint32(data, uint32(code))
	binary.NativeEndian.PutUint32(data[4:], 64) // original length, not echoed
	data = append(data, tlv.Encode()...)
	err := parseError(unix.RTM_NEWLINK, Message{Type: unix.NLMSG_ERROR, Flags: unix.NLM_F_CAPPED | unix.NLM_F_ACK_TLVS, Data: data})
	var e *Errno
	if !errors.As(err, &e) || !errors.Is(err, unix.EEXIST) || e.Msg != "File exists here" {
		t.Fatalf("error %v", err)
	}
	if got := err.Error(); got != "netlink RTM_NEWLINK: file exists (File exists here)" {
		t.Errorf("message %q", got)
	}
	if err := parseError(unix.RTM_NEWLINK, Message{Data: make([]byte, 4+unix.SizeofNlMsghdr)}); err != nil {
		t.Errorf("ACK gave %v", err)
	}
}

// TestConn talks to the kernel in the test's own namespace; reading links
// needs no privileges.
func TestConn(t *testing.T) {
	c, err := Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lo, err := c.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if lo.Index == 0 || lo.Flags&unix.IFF_LOOPBACK == 0 || lo.MTU == 0 {
		t.Errorf("lo = %+v", lo)
	}
	byIndex, err := c.LinkByIndex(lo.Index)
	if err != nil || byIndex.Name != "lo" {
		t.Errorf("LinkByIndex = %+v, %v", byIndex, err)
	}
	links, err := c.Links()
	if err != nil || len(links) == 0 {
		t.Fatalf("Links = %v, %v", links, err)
	}
	addrs, err := c.Addrs(unix.AF_INET, lo.Index)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range addrs {
		found = found || a.Prefix == netip.MustParsePrefix("127.0.0.1/8")
	}
	if !found {
		t.Errorf("lo addresses %v lack 127.0.0.1/8", addrs)
	}
	_, err = c.LinkByName("no-such-link0")
	if !errors.Is(err, ErrNoLink) || !strings.Contains(err.Error(), "no-such-link0") {
		t.Errorf("missing link: %v", err)
	}
	// A kernel error is an *Errno with the request named.
	_, err = c.Request(unix.RTM_GETLINK, 0, IfInfomsg{Index: 1 << 30}.Encode())
	var e *Errno
	if !errors.As(err, &e) || e.Op != "RTM_GETLINK" {
		t.Errorf("bad index: %v", err)
	}
	same, err := SameNetns(openSelfNetns(t))
	if err != nil || !same {
		t.Errorf("SameNetns(self) = %v, %v", same, err)
	}
	c2, err := DialNetns(openSelfNetns(t))
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
}

func openSelfNetns(t *testing.T) int {
	f, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return int(f.Fd())
}

// TestReceiveDeadline checks that a multicast listener's Receive honours
// deadlines and Close.
func TestReceiveDeadline(t *testing.T) {
	c, err := Dial(unix.RTNLGRP_LINK)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Receive(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Receive with deadline: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Receive()
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Receive after Close returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Receive")
	}
}
