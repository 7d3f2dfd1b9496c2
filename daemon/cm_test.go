package daemon_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/daemon/ctl"
)

// cmClient speaks the CM operations raw, as the drop-in librdmacm does.
type cmClient struct {
	t   *testing.T
	uc  *net.UnixConn
	seq uint32
}

func dialCM(t *testing.T, r *rig) *cmClient {
	t.Helper()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: r.socket, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	return helloOn(t, uc)
}

// helloOn says HELLO on connection uc, closed when the test ends.
func helloOn(t *testing.T, uc *net.UnixConn) *cmClient {
	t.Helper()
	c := &cmClient{t: t, uc: uc}
	t.Cleanup(func() { uc.Close() })
	hello := ctl.Hello{ABI: ctl.Version}
	if _, _, err := c.call(ctl.OpHello, ctl.Bytes(&hello)); err != nil {
		t.Fatalf("HELLO: %v", err)
	}
	return c
}

// call sends one request and returns the reply body and descriptors, or
// the daemon's errno.
func (c *cmClient) call(op ctl.Op, body []byte) ([]byte, []int, error) {
	c.t.Helper()
	return c.callFDs(op, body, nil)
}

// callFDs is call with descriptors passed along; an error that is not a
// unix.Errno means the connection ended.
func (c *cmClient) callFDs(op ctl.Op, body []byte, fds []int) ([]byte, []int, error) {
	c.seq++
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	if _, _, err := c.uc.WriteMsgUnix(ctl.Append(nil, ctl.Hdr{Op: op, Seq: c.seq, NFDs: uint32(len(fds))}, body), rights, nil); err != nil {
		return nil, nil, err
	}
	buf := make([]byte, ctl.MaxMsg)
	oob := make([]byte, unix.CmsgSpace(ctl.MaxFDs*4))
	c.uc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, oobn, _, _, err := c.uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, err
	}
	if n == 0 {
		return nil, nil, errors.New("the daemon closed the connection")
	}
	var rfds []int
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if r, err := unix.ParseUnixRights(&m); err == nil {
				rfds = append(rfds, r...)
			}
		}
	}
	h, b, err := ctl.Parse(buf[:n])
	if err != nil {
		return nil, rfds, err
	}
	if h.Err != 0 {
		return nil, rfds, unix.Errno(h.Err)
	}
	return b, rfds, nil
}

func (c *cmClient) channel() uint32 {
	c.t.Helper()
	b, fds, err := c.call(ctl.OpCMCreateChannel, nil)
	if err != nil || len(fds) != 1 {
		c.t.Fatalf("CM_CREATE_CHANNEL: %v, %d descriptors", err, len(fds))
	}
	c.t.Cleanup(func() { unix.Close(fds[0]) })
	h, _ := ctl.Get[ctl.Handle](b)
	return h.Handle
}

func (c *cmClient) createID(ch uint32) (uint32, error) {
	req := ctl.CMCreateID{Channel: ch, PS: 0x0106, QPType: 2}
	b, _, err := c.call(ctl.OpCMCreateID, ctl.Bytes(&req))
	if err != nil {
		return 0, err
	}
	h, _ := ctl.Get[ctl.Handle](b)
	return h.Handle, nil
}

func (c *cmClient) bind(id uint32, addr [4]byte, port uint16) (ctl.CMIDInfo, error) {
	req := ctl.CMAddrReq{ID: id, Src: ctl.CMAddr{Family: unix.AF_INET, Port: port}}
	copy(req.Src.Addr[:], addr[:])
	b, _, err := c.call(ctl.OpCMBind, ctl.Bytes(&req))
	if err != nil {
		return ctl.CMIDInfo{}, err
	}
	return ctl.Get[ctl.CMIDInfo](b)
}

// TestCMOperations drives the CM operations raw: IDs on a channel up to
// the client's limit, a bind that names the device, a listener that a
// departed client leaves behind released (its port can be bound again),
// and requests that break the protocol ending the connection.
func TestCMOperations(t *testing.T) {
	r := newRig(t, daemon.Options{Limits: daemon.Limits{CMIDs: 3}})
	addr := [4]byte{10, 0, 0, 1} // sroce_mem0's address

	a := dialCM(t, r)
	ch := a.channel()
	if _, err := a.createID(ch + 100); !errors.Is(err, unix.EINVAL) {
		t.Errorf("an ID on an unknown channel: %v, want EINVAL", err)
	}
	var ids []uint32
	for i := 0; i < 3; i++ {
		id, err := a.createID(ch)
		if err != nil {
			t.Fatalf("ID %d: %v", i, err)
		}
		ids = append(ids, id)
	}
	if _, err := a.createID(ch); !errors.Is(err, unix.ENOMEM) {
		t.Errorf("an ID past the limit: %v, want ENOMEM", err)
	}
	info, err := a.bind(ids[0], addr, 7000)
	if err != nil {
		t.Fatalf("CM_BIND: %v", err)
	}
	if ctl.Name(info.Device[:]) != "sroce_mem0" || info.Src.Port != 7000 || info.PortNum != 1 {
		t.Errorf("CM_BIND's reply: device %q, port %d, port_num %d", ctl.Name(info.Device[:]), info.Src.Port, info.PortNum)
	}
	listen := ctl.CMIDArg{ID: ids[0], Arg: 8}
	if _, _, err := a.call(ctl.OpCMListen, ctl.Bytes(&listen)); err != nil {
		t.Fatalf("CM_LISTEN: %v", err)
	}
	if _, err := a.bind(ids[1], addr, 7000); !errors.Is(err, unix.EADDRINUSE) {
		t.Errorf("binding a listened port again: %v, want EADDRINUSE", err)
	}
	destroy := ctl.CMIDArg{ID: ids[2]}
	if _, _, err := a.call(ctl.OpCMDestroyID, ctl.Bytes(&destroy)); err != nil {
		t.Errorf("CM_DESTROY_ID: %v", err)
	}
	if _, _, err := a.call(ctl.OpCMQuery, ctl.Bytes(&destroy)); !errors.Is(err, unix.ENOENT) {
		t.Errorf("querying a destroyed ID: %v, want ENOENT", err)
	}

	// QUERY_STATS shows the CM agent's counters beside the engine's.
	st, err := client.Stats(r.socket, "sroce_mem0")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range st.CM {
		names[c.Name] = true
	}
	if !names["cm_mads_sent"] || !names["cm_established"] || !names["cm_half_open"] {
		t.Errorf("QUERY_STATS's CM counters: %+v", st.CM)
	}

	// The client goes away: its listener is released.
	a.uc.Close()
	b := dialCM(t, r)
	bch := b.channel()
	id, err := b.createID(bch)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err = b.bind(id, addr, 7000)
		if err == nil || time.Now().After(deadline) {
			break
		}
		// wall clock: waits for the daemon goroutine that frees the port (no timer of the daemon)
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("binding the departed client's port: %v", err)
	}

	// As the kernel's rdma_cm when the channel's file is closed:
	// destroying a channel destroys the IDs on it, here a listener, whose
	// port is free at once.
	ch2 := b.channel()
	lid, err := b.createID(ch2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.bind(lid, addr, 7001); err != nil {
		t.Fatalf("CM_BIND: %v", err)
	}
	listen2 := ctl.CMIDArg{ID: lid, Arg: 8}
	if _, _, err := b.call(ctl.OpCMListen, ctl.Bytes(&listen2)); err != nil {
		t.Fatalf("CM_LISTEN: %v", err)
	}
	if _, _, err := b.call(ctl.OpCMDestroyChannel, ctl.Bytes(&ctl.Handle{Handle: ch2})); err != nil {
		t.Errorf("destroying a channel with a listener on it: %v", err)
	}
	if _, _, err := b.call(ctl.OpCMQuery, ctl.Bytes(&ctl.CMIDArg{ID: lid})); !errors.Is(err, unix.ENOENT) {
		t.Errorf("querying an ID of a destroyed channel: %v, want ENOENT", err)
	}
	id2, err := b.createID(bch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.bind(id2, addr, 7001); err != nil {
		t.Errorf("binding the port of a destroyed channel's listener: %v", err)
	}

	// A CM request shorter than its struct ends the connection.
	short := ctl.CMIDArg{ID: id}
	if _, _, err := b.call(ctl.OpCMConnect, ctl.Bytes(&short)); err == nil {
		t.Error("a CM_CONNECT of the wrong size was answered")
	}
	deadline = time.Now().Add(5 * time.Second)
	for !strings.Contains(r.logText(), "CM_CONNECT request: body of") && time.Now().Before(deadline) {
		// wall clock: waits for the daemon's connection goroutine to log
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(r.logText(), "CM_CONNECT request: body of "+strconv.Itoa(int(unsafe.Sizeof(short)))) {
		t.Errorf("the log does not say why the client was disconnected:\n%s", r.logText())
	}
}

// TestCMMulticastOperations drives CM_JOIN_MCAST and CM_LEAVE_MCAST raw: a
// join's MULTICAST_JOIN event names the client's join and the group, and
// the daemon refuses what the kernel's ucma refuses (unknown join flags,
// another port space, an unknown ID, a leave of no join).
func TestCMMulticastOperations(t *testing.T) {
	r := newRig(t, daemon.Options{})
	addr := [4]byte{10, 0, 0, 1} // sroce_mem0's address
	a := dialCM(t, r)
	b, fds, err := a.call(ctl.OpCMCreateChannel, nil)
	if err != nil || len(fds) != 1 {
		t.Fatalf("CM_CREATE_CHANNEL: %v, %d descriptors", err, len(fds))
	}
	t.Cleanup(func() { unix.Close(fds[0]) })
	h, _ := ctl.Get[ctl.Handle](b)
	tcp, err := a.createID(h.Handle)
	if err != nil {
		t.Fatal(err)
	}
	req := ctl.CMCreateID{Channel: h.Handle, PS: 0x0111, QPType: 4}
	b, _, err = a.call(ctl.OpCMCreateID, ctl.Bytes(&req))
	if err != nil {
		t.Fatal(err)
	}
	udp, _ := ctl.Get[ctl.Handle](b)
	for _, id := range []uint32{tcp, udp.Handle} {
		if _, err := a.bind(id, addr, 0); err != nil {
			t.Fatal(err)
		}
	}
	join := func(id, uid, flags uint32, group [4]byte) error {
		m := ctl.CMMcast{ID: id, UID: uid, JoinFlags: flags, Addr: ctl.CMAddr{Family: unix.AF_INET}}
		copy(m.Addr.Addr[:], group[:])
		_, _, err := a.call(ctl.OpCMJoinMcast, ctl.Bytes(&m))
		return err
	}
	leave := func(id uint32, group [4]byte) error {
		m := ctl.CMMcast{ID: id, Addr: ctl.CMAddr{Family: unix.AF_INET}}
		copy(m.Addr.Addr[:], group[:])
		_, _, err := a.call(ctl.OpCMLeaveMcast, ctl.Bytes(&m))
		return err
	}
	group := [4]byte{239, 2, 3, 4}
	for _, c := range []struct {
		what string
		err  error
		want unix.Errno
	}{
		{"a join in the TCP port space", join(tcp, 1, ctl.JoinFullMember, group), unix.EINVAL},
		{"a join with unknown flags", join(udp.Handle, 1, 2, group), unix.EINVAL},
		{"a join of 0.0.0.0", join(udp.Handle, 1, ctl.JoinFullMember, [4]byte{}), unix.EINVAL},
		{"a join on an unknown ID", join(udp.Handle+100, 1, ctl.JoinFullMember, group), unix.ENOENT},
		{"a leave of no join", leave(udp.Handle, group), unix.ENOENT},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
	}
	if err := join(udp.Handle, 77, ctl.JoinSendOnlyFullMember, group); err != nil {
		t.Fatalf("CM_JOIN_MCAST: %v", err)
	}
	ev := make([]byte, unsafe.Sizeof(ctl.CMEvent{}))
	unix.SetNonblock(fds[0], false)
	if n, err := unix.Read(fds[0], ev); err != nil || n != len(ev) {
		t.Fatalf("reading the event: %d bytes, %v", n, err)
	}
	e, _ := ctl.Get[ctl.CMEvent](ev)
	wantGID := [16]byte{10: 0xff, 11: 0xff, 12: 239, 13: 2, 14: 3, 15: 4}
	if e.Event != 12 || e.Status != 0 || e.McastUID != 77 || e.Info.Handle != udp.Handle ||
		e.Conn.QPNum != 0xffffff || e.Conn.QKey != 0x01234567 || e.AHAttr.DGID != wantGID || e.AHAttr.IsGlobal != 1 {
		t.Fatalf("the join's event: %+v", e)
	}
	if err := leave(udp.Handle, group); err != nil {
		t.Errorf("CM_LEAVE_MCAST: %v", err)
	}
}
