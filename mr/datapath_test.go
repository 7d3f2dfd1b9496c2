package mr

import (
	"bytes"
	"testing"
)

// sgFixture is a message of 3 non-empty SGEs over two MRs, with an empty SGE
// in the middle:
//
//	SGE 0: 100 bytes of a at 0x1000+10
//	SGE 1: 0 bytes (bad key, never checked)
//	SGE 2: 50 bytes of b at 0x2000
//	SGE 3: 200 bytes of a at 0x1000+500
type sgFixture struct {
	pd   *PD
	a, b []byte
	ma   *MR
	mb   *MR
	sgl  []SGE
	want []byte // the message
}

func newSGFixture(t *testing.T, access Access) *sgFixture {
	t.Helper()
	f := &sgFixture{pd: newTestTable(t, 0).AllocPD(), a: make([]byte, 1024), b: make([]byte, 64)}
	for i := range f.a {
		f.a[i] = byte(i)
	}
	for i := range f.b {
		f.b[i] = byte(200 + i)
	}
	f.ma = mustReg(t, f.pd, f.a, 0x1000, access)
	f.mb = mustReg(t, f.pd, f.b, 0x2000, access)
	f.sgl = []SGE{
		{Addr: 0x1000 + 10, Length: 100, LKey: f.ma.LKey()},
		{Addr: 0, Length: 0, LKey: 0xdeadbeef},
		{Addr: 0x2000, Length: 50, LKey: f.mb.LKey()},
		{Addr: 0x1000 + 500, Length: 200, LKey: f.ma.LKey()},
	}
	f.want = append(append(append([]byte(nil), f.a[10:110]...), f.b[:50]...), f.a[500:700]...)
	return f
}

func TestGather(t *testing.T) {
	f := newSGFixture(t, 0)
	total, err := f.pd.CheckSGEs(f.sgl, 0)
	if err != nil || total != 350 {
		t.Fatalf("CheckSGEs = %d, %v; want 350", total, err)
	}
	for _, c := range []struct{ off, n int }{
		{0, 350}, {0, 1}, {0, 100}, {99, 2}, {100, 50}, {100, 51}, {149, 1},
		{150, 200}, {349, 1}, {350, 0}, {37, 256}, {0, 0},
	} {
		dst := make([]byte, c.n)
		n, err := f.pd.Gather(f.sgl, uint64(c.off), dst)
		if err != nil || n != c.n || !bytes.Equal(dst, f.want[c.off:c.off+c.n]) {
			t.Errorf("Gather(off %d, %d bytes) = %d, %v; data ok %v", c.off, c.n, n, err, bytes.Equal(dst, f.want[c.off:c.off+c.n]))
		}
	}
	// Asking for more than the message holds.
	dst := make([]byte, 60)
	if n, err := f.pd.Gather(f.sgl, 300, dst); err != ErrLength || n != 50 || !bytes.Equal(dst[:50], f.want[300:]) {
		t.Errorf("Gather past the end = %d, %v; want 50, ErrLength", n, err)
	}
	if n, err := f.pd.Gather(f.sgl, 1000, dst); err != ErrLength || n != 0 {
		t.Errorf("Gather beyond the message = %d, %v; want 0, ErrLength", n, err)
	}
	if n, err := f.pd.Gather(nil, 0, dst); err != ErrLength || n != 0 {
		t.Errorf("Gather from no SGEs = %d, %v", n, err)
	}
}

func TestScatter(t *testing.T) {
	f := newSGFixture(t, AccessLocalWrite)
	msg := make([]byte, 350)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	// Place the message in pieces of 64 bytes, like MTU-sized packets.
	for off := 0; off < len(msg); off += 64 {
		end := min(off+64, len(msg))
		n, err := f.pd.Scatter(f.sgl, uint64(off), msg[off:end])
		if err != nil || n != end-off {
			t.Fatalf("Scatter(off %d) = %d, %v", off, n, err)
		}
	}
	got := make([]byte, 350)
	if _, err := f.pd.Gather(f.sgl, 0, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("message read back differs: %v", err)
	}
	if f.a[9] != 9 || f.a[110] != 110 || f.a[499] != 499%256 || f.a[700] != 700%256 || f.b[50] != 250 {
		t.Fatal("Scatter wrote outside the SGEs")
	}
	if n, err := f.pd.Scatter(f.sgl, 300, make([]byte, 51)); err != ErrLength || n != 50 {
		t.Errorf("Scatter past the end = %d, %v; want 50, ErrLength", n, err)
	}
	if n, err := f.pd.Scatter(f.sgl, 0, nil); err != nil || n != 0 {
		t.Errorf("zero-length Scatter = %d, %v", n, err)
	}
}

func TestSGEErrors(t *testing.T) {
	f := newSGFixture(t, AccessLocalWrite)
	ro := mustReg(t, f.pd, make([]byte, 64), 0x3000, 0)
	other := mustReg(t, f.pd.Table().AllocPD(), make([]byte, 64), 0x4000, AccessLocalWrite)
	good := f.sgl[0]
	for _, c := range []struct {
		name    string
		bad     SGE
		gather  error
		scatter error
	}{
		{"bad key", SGE{Addr: 0x1000, Length: 8, LKey: 0x77777777}, ErrBadKey, ErrBadKey},
		{"stale key byte", SGE{Addr: 0x1000, Length: 8, LKey: f.ma.LKey() + 1}, ErrBadKey, ErrBadKey},
		{"other pd", SGE{Addr: 0x4000, Length: 8, LKey: other.LKey()}, ErrPD, ErrPD},
		{"read only", SGE{Addr: 0x3000, Length: 8, LKey: ro.LKey()}, nil, ErrAccess},
		{"below mr", SGE{Addr: 0x0fff, Length: 8, LKey: f.ma.LKey()}, ErrBounds, ErrBounds},
		// Only the first 8 bytes are copied, but the SGE as a whole is
		// out of bounds.
		{"sge longer than mr", SGE{Addr: 0x1000, Length: 2000, LKey: f.ma.LKey()}, ErrBounds, ErrBounds},
		{"wraps", SGE{Addr: ^uint64(0) - 3, Length: 8, LKey: f.ma.LKey()}, ErrBounds, ErrBounds},
	} {
		t.Run(c.name, func(t *testing.T) {
			sgl := []SGE{good, c.bad}
			buf := make([]byte, 108)
			n, err := f.pd.Gather(sgl, 0, buf)
			if err != c.gather || err != nil && n != 100 {
				t.Errorf("Gather = %d, %v; want 100, %v", n, err, c.gather)
			}
			n, err = f.pd.Scatter(sgl, 0, buf)
			if err != c.scatter || err != nil && n != 100 {
				t.Errorf("Scatter = %d, %v; want 100, %v", n, err, c.scatter)
			}
			// The bad SGE is not checked when the range does not reach it.
			if _, err := f.pd.Gather(sgl, 0, buf[:100]); err != nil {
				t.Errorf("Gather of the good SGE only = %v", err)
			}
			if _, err := f.pd.CheckSGEs(sgl, 0); err != c.gather {
				t.Errorf("CheckSGEs(0) = %v, want %v", err, c.gather)
			}
			if _, err := f.pd.CheckSGEs(sgl, AccessLocalWrite); err != c.scatter {
				t.Errorf("CheckSGEs(LOCAL_WRITE) = %v, want %v", err, c.scatter)
			}
		})
	}
}

func TestRemoteReadWrite(t *testing.T) {
	pd := newTestTable(t, 0).AllocPD()
	buf := make([]byte, 256)
	m := mustReg(t, pd, buf, 0x7000, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead)
	if err := pd.WriteRemote(m.RKey(), 0x7000+250, []byte("abcdef")); err != nil {
		t.Fatal(err)
	}
	if string(buf[250:]) != "abcdef" {
		t.Fatalf("memory = %q", buf[250:])
	}
	got := make([]byte, 6)
	if err := pd.ReadRemote(m.RKey(), 0x7000+250, got); err != nil || string(got) != "abcdef" {
		t.Fatalf("ReadRemote = %q, %v", got, err)
	}
	if err := m.Read(0x7000+250, got); err != nil || string(got) != "abcdef" {
		t.Fatalf("Read = %q, %v", got, err)
	}
	if err := m.Write(0x7000, []byte("xy")); err != nil || string(buf[:2]) != "xy" {
		t.Fatalf("Write: %v, memory %q", err, buf[:2])
	}
}
