package oob

import (
	"context"
	"errors"
	"github.com/sroce/sroce/bth"
	"strings"
	"testing"
	"time"
)

// The client's message in testdata/real-rc_pingpong.txt.
const realRCClientMsg = "0000:000011:0d079a:00000000000000000000ffffc0000202\x00"

func TestDestMarshalGolden(t *testing.T) {
	d := Dest{LID: 0, QPN: 0x11, PSN: 0x0d079a, GID: bth.GID{10: 0xff, 11: 0xff, 12: 0xc0, 13: 0, 14: 2, 15: 2}}
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != realRCClientMsg || len(b) != DestMsgSize {
		t.Fatalf("Marshal = %q, want %q", b, realRCClientMsg)
	}
	back, err := ParseDest(b)
	if err != nil || back != d {
		t.Fatalf("ParseDest = %+v, %v", back, err)
	}
	// "%04x:%06x:%06x:%s" with the largest values.
	d = Dest{LID: 0xffff, QPN: 0xffffff, PSN: 0xabcdef, GID: bth.GID{0xfe, 0x80, 15: 0xff}}
	b, _ = d.Marshal()
	if want := "ffff:ffffff:abcdef:fe8000000000000000000000000000ff\x00"; string(b) != want {
		t.Fatalf("Marshal = %q, want %q", b, want)
	}
	if _, err := (Dest{QPN: 1 << 24}).Marshal(); err == nil {
		t.Error("QPN of 25 bits accepted")
	}
	if _, err := (Dest{PSN: 1 << 24}).Marshal(); err == nil {
		t.Error("PSN of 25 bits accepted")
	}
	// Upper-case hex, which sscanf would take, is accepted.
	if got, err := ParseDest([]byte(strings.ToUpper(realRCClientMsg))); err != nil || got.PSN != 0x0d079a {
		t.Errorf("upper case: %+v, %v", got, err)
	}
}

func TestParseDestMalformed(t *testing.T) {
	good := []byte(realRCClientMsg)
	for n := 0; n < len(good); n++ {
		if _, err := ParseDest(good[:n]); !errors.Is(err, ErrMalformed) {
			t.Errorf("prefix of %d bytes: %v", n, err)
		}
	}
	for _, bad := range []string{
		"0000:000011:0d079a:00000000000000000000ffffc0000202X",    // no NUL
		"0000-000011:0d079a:00000000000000000000ffffc0000202\x00", // separator
		"0000:000011:0d079a:0000000000000000000\x00ffffc0000202\x00",
		"000g:000011:0d079a:00000000000000000000ffffc0000202\x00",
		"0000:00001x:0d079a:00000000000000000000ffffc0000202\x00",
		"0000:000011:0d079z:00000000000000000000ffffc0000202\x00",
		"0000:000011:0d079a:00000000000000000000ffffc000020z\x00",
		"0000:000011:0d079a:00000000000000000000ffffc00002020",                                     // 53 bytes
		"6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00000000000000000000000000000000000000", // perftest's version
	} {
		_, err := ParseDest([]byte(bad))
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseDest(%q) = %v", bad, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "peer sent a malformed address message: ") {
			t.Errorf("message %q", err)
		}
	}
}

func TestPingpongLoopback(t *testing.T) {
	ctx := context.Background()
	srvDest := Dest{QPN: 0x12, PSN: 0xc26c06, GID: bth.GID{10: 0xff, 11: 0xff, 12: 192, 14: 2, 15: 1}}
	cliDest := Dest{QPN: 0x13, PSN: 0xe6354a, GID: bth.GID{10: 0xff, 11: 0xff, 12: 192, 14: 2, 15: 2}}
	ln, addr := loopback(t)
	type out struct {
		d   Dest
		err error
	}
	srvc := make(chan out, 1)
	var order []string
	orderc := make(chan string, 4)
	go func() {
		d, err := ServePingpong(ctx, ln, Timeouts{}, srvDest, func(remote Dest) error {
			orderc <- "server connect"
			return nil
		})
		srvc <- out{d, err}
	}()
	got, err := DialPingpong(ctx, addr, Timeouts{}, cliDest, func(remote Dest) error {
		orderc <- "client ready"
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s := <-srvc
	if s.err != nil {
		t.Fatal(s.err)
	}
	close(orderc)
	for o := range orderc {
		order = append(order, o)
	}
	if got != srvDest || s.d != cliDest {
		t.Errorf("client got %+v, server got %+v", got, s.d)
	}
	if strings.Join(order, ",") != "server connect,client ready" {
		t.Errorf("callbacks in order %v", order)
	}
}

// TestPingpongReplay plays the captured real exchanges against this
// package, in both roles.
func TestPingpongReplay(t *testing.T) {
	for _, name := range []string{"rc_pingpong", "ud_pingpong"} {
		segs := loadTranscript(t, name)
		if len(segs) != 3 || !segs[0].fromClient || segs[1].fromClient || !segs[2].fromClient {
			t.Fatalf("%s: unexpected transcript shape", name)
		}
		cli, err := ParseDest(segs[0].data)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := ParseDest(segs[1].data)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name+"/client", func(t *testing.T) {
			addr, errc := fakeServer(t, []step{{expect: segs[0].data}, {send: segs[1].data}, {expect: segs[2].data}, {eof: true}})
			got, err := DialPingpong(context.Background(), addr, Timeouts{}, cli, nil)
			if err != nil || got != srv {
				t.Fatalf("got %+v, %v", got, err)
			}
			waitPeer(t, errc)
		})
		t.Run(name+"/server", func(t *testing.T) {
			ln, addr := loopback(t)
			errc := fakeClient(addr, []step{{send: segs[0].data}, {expect: segs[1].data}, {send: segs[2].data}, {eof: true}})
			got, err := ServePingpong(context.Background(), ln, Timeouts{}, srv, nil)
			if err != nil || got != cli {
				t.Fatalf("got %+v, %v", got, err)
			}
			waitPeer(t, errc)
		})
	}
}

func TestPingpongClientErrors(t *testing.T) {
	local := Dest{QPN: 0x11, PSN: 1}
	reply, _ := Dest{QPN: 0x22, PSN: 2}.Marshal()
	msg, _ := local.Marshal()
	ctx := context.Background()

	t.Run("server closes before replying", func(t *testing.T) {
		addr, errc := fakeServer(t, []step{{expect: msg}, {close: true}})
		_, err := DialPingpong(ctx, addr, shortTimeouts, local, nil)
		wantKind(t, err, ErrPeerClosed)
		waitPeer(t, errc)
	})
	t.Run("server closes after half a reply", func(t *testing.T) {
		addr, errc := fakeServer(t, []step{{expect: msg}, {send: reply[:20]}, {close: true}})
		_, err := DialPingpong(ctx, addr, shortTimeouts, local, nil)
		wantKind(t, err, ErrPeerClosed)
		waitPeer(t, errc)
	})
	t.Run("server never answers", func(t *testing.T) {
		addr, errc := fakeServer(t, []step{{expect: msg}, {sleep: time.Second}})
		start := time.Now()
		_, err := DialPingpong(ctx, addr, shortTimeouts, local, nil)
		wantKind(t, err, ErrTimeout)
		if d := time.Since(start); d > 900*time.Millisecond {
			t.Errorf("took %v", d)
		}
		if !strings.HasPrefix(err.Error(), "exchange timed out after 300ms") {
			t.Errorf("message %q", err)
		}
		waitPeer(t, errc)
	})
	t.Run("malformed reply", func(t *testing.T) {
		bad := append([]byte(nil), reply...)
		bad[4] = '-'
		addr, errc := fakeServer(t, []step{{expect: msg}, {send: bad}, {eof: true}})
		_, err := DialPingpong(ctx, addr, shortTimeouts, local, nil)
		wantKind(t, err, ErrMalformed)
		waitPeer(t, errc)
	})
	t.Run("ready fails: no done", func(t *testing.T) {
		addr, errc := fakeServer(t, []step{{expect: msg}, {send: reply}, {eof: true}})
		boom := errors.New("cannot move QP to RTR")
		_, err := DialPingpong(ctx, addr, shortTimeouts, local, func(Dest) error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("got %v", err)
		}
		waitPeer(t, errc)
	})
	t.Run("nobody listening", func(t *testing.T) {
		ln, addr := loopback(t)
		ln.Close()
		_, err := DialPingpong(ctx, addr, shortTimeouts, local, nil)
		wantKind(t, err, ErrConnect)
	})
	t.Run("context deadline", func(t *testing.T) {
		addr, errc := fakeServer(t, []step{{expect: msg}, {sleep: time.Second}})
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := DialPingpong(cctx, addr, Timeouts{}, local, nil)
		wantKind(t, err, ErrTimeout)
		waitPeer(t, errc)
	})
	t.Run("context cancelled", func(t *testing.T) {
		addr, errc := fakeServer(t, []step{{expect: msg}, {sleep: time.Second}})
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := DialPingpong(cctx, addr, Timeouts{}, local, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
		waitPeer(t, errc)
	})
}

func TestPingpongServerErrors(t *testing.T) {
	local := Dest{QPN: 0x11, PSN: 1}
	msg, _ := local.Marshal()
	hello, _ := Dest{QPN: 0x22, PSN: 2}.Marshal()
	ctx := context.Background()
	serve := func(t *testing.T, steps []step) error {
		ln, addr := loopback(t)
		errc := fakeClient(addr, steps)
		_, err := ServePingpong(ctx, ln, shortTimeouts, local, nil)
		waitPeer(t, errc)
		return err
	}
	t.Run("client sends a short message and closes", func(t *testing.T) {
		wantKind(t, serve(t, []step{{send: hello[:30]}, {close: true}}), ErrPeerClosed)
	})
	t.Run("client sends nothing", func(t *testing.T) {
		wantKind(t, serve(t, []step{{sleep: time.Second}}), ErrTimeout)
	})
	t.Run("client sends garbage", func(t *testing.T) {
		garbage := []byte(strings.Repeat("x", DestMsgSize))
		wantKind(t, serve(t, []step{{send: garbage}, {eof: true}}), ErrMalformed)
	})
	t.Run("client never sends done", func(t *testing.T) {
		wantKind(t, serve(t, []step{{send: hello}, {expect: msg}, {sleep: time.Second}}), ErrTimeout)
	})
	t.Run("client closes instead of done", func(t *testing.T) {
		wantKind(t, serve(t, []step{{send: hello}, {expect: msg}, {close: true}}), ErrPeerClosed)
	})
	t.Run("client sends something else than done", func(t *testing.T) {
		wantKind(t, serve(t, []step{{send: hello}, {expect: msg}, {send: []byte("DONE\x00")}, {eof: true}}), ErrMalformed)
	})
	t.Run("no client before the deadline", func(t *testing.T) {
		ln, _ := loopback(t)
		cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := ServePingpong(cctx, ln, Timeouts{}, local, nil)
		wantKind(t, err, ErrTimeout)
	})
	t.Run("connect callback fails", func(t *testing.T) {
		ln, addr := loopback(t)
		errc := fakeClient(addr, []step{{send: hello}, {eof: true}})
		boom := errors.New("no such GID")
		_, err := ServePingpong(ctx, ln, shortTimeouts, local, func(Dest) error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("got %v", err)
		}
		waitPeer(t, errc)
	})
}

func TestParsePingpong(t *testing.T) {
	p, err := ParsePingpong(false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Port != 18515 || p.Size != 4096 || p.MTU != 1024 || p.RxDepth != 500 || p.Iters != 1000 || p.SL != 0 || p.GIDIndex != -1 || p.IBPort != 1 || p.ServerName != "" {
		t.Errorf("rc defaults %+v", p)
	}
	p, _ = ParsePingpong(true, nil)
	if p.Size != 1024 || p.MTU != 0 {
		t.Errorf("ud defaults %+v", p)
	}
	p, err = ParsePingpong(false, []string{"-g", "1", "10.0.0.1", "-n100", "--size=64", "--mtu", "4096", "-d", "eth0", "-ec"})
	if err != nil {
		t.Fatal(err)
	}
	if p.GIDIndex != 1 || p.ServerName != "10.0.0.1" || p.Iters != 100 || p.Size != 64 || p.MTU != 4096 || p.IBDev != "eth0" || !p.Events || !p.Check {
		t.Errorf("parsed %+v", p)
	}
	for _, ud := range []bool{false, true} {
		if p, err := ParsePingpong(ud, []string{"--queues", "4"}); err != nil || p.Queues != 4 {
			t.Errorf("ud %v, --queues 4: %d, %v", ud, p.Queues, err)
		}
		if _, err := ParsePingpong(ud, []string{"--queues=0"}); err == nil {
			t.Errorf("ud %v: --queues=0 accepted", ud)
		}
	}
	p, _ = ParsePingpong(false, []string{"--ts", "-N"})
	if strings.Join(p.Unsupported, ",") != "-t,-N" {
		t.Errorf("unsupported %v", p.Unsupported)
	}
	for _, bad := range [][]string{{"-m", "1000"}, {"-p", "70000"}, {"-i", "0"}, {"a", "b"}, {"-x"}, {"-n"}, {"--mtu=512", "-m"}, {"-m", "1024"}} {
		ud := bad[0] == "-m" && bad[len(bad)-1] == "1024"
		if _, err := ParsePingpong(ud, bad); err == nil {
			t.Errorf("ParsePingpong(%v) accepted", bad)
		}
	}
}
