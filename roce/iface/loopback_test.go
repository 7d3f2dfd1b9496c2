package iface

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/nsutil"
)

// openPair opens a port on each end of a fresh veth pair in two namespaces
// over AF_XDP.
func openPair(t *testing.T) (a, b *Port) {
	return openPairWith(t, "sroce-iflo", func(int) Options { return Options{Mode: ModeXDP} })
}

// openPairWith opens a port with opts(0) on end A of a fresh veth pair in
// two namespaces named after prefix, and one with opts(1) on end B.
func openPairWith(t *testing.T, prefix string, opts func(side int) Options) (a, b *Port) {
	t.Helper()
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	open := func(side int, ns *nsutil.Namespace, ifname string, p **Port) {
		t.Helper()
		if err := ns.Do(func() (err error) {
			*p, err = Open(context.Background(), ifname, opts(side))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { (*p).Close() })
	}
	open(0, pair.A, pair.Veth.NameA, &a)
	open(1, pair.B, pair.Veth.NameB, &b)
	return a, b
}

// TestOwnGIDAH asks for an address vector to every GID of the port from
// every source GID of its IP version, as UCX probes a device and as
// rdma-core's test suite connects two QPs of one device: each succeeds at
// once with the port's own MAC (loopback, as on rxe), and an RC SEND and
// WRITE between two QPs of the port move their data.
func TestOwnGIDAH(t *testing.T) {
	a, _ := openPair(t)
	gids := a.GIDs()
	if len(gids) < 2 {
		t.Fatalf("GID table %v", gids)
	}
	for _, d := range gids {
		for _, s := range gids {
			if d.GID.IsIPv4() != s.GID.IsIPv4() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ah, err := a.AHAttr(ctx, d.GID, s.Index)
			cancel()
			if err != nil {
				t.Fatalf("AH from GID %d to the port's own GID %d (%v): %v", s.Index, d.Index, d.GID, err)
			}
			if !bytes.Equal(ah.DMAC[:], a.MAC()) || ah.DGID != d.GID || int(ah.SGIDIndex) != s.Index {
				t.Errorf("AH from GID %d to own GID %d: DMAC %x DGID %v SGID index %d; want the port's MAC %x",
					s.Index, d.Index, ah.DMAC, ah.DGID, ah.SGIDIndex, a.MAC())
			}
		}
	}
	rcRoundTrip(t, a, a)
}

// TestLinkLocalAH resolves a peer's link-local IPv6 GID (GID index 0, as
// UCX uses it) from the port's own link-local GID: the neighbour is found
// on the port's interface, with no route needed.
func TestLinkLocalAH(t *testing.T) {
	a, b := openPair(t)
	ga, gb := a.GIDs(), b.GIDs()
	if len(ga) == 0 || len(gb) == 0 || !ga[0].GID.Addr().IsLinkLocalUnicast() || !gb[0].GID.Addr().IsLinkLocalUnicast() {
		t.Fatalf("GID 0 is not link-local: A %v, B %v", ga, gb)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ah, err := a.AHAttr(ctx, gb[0].GID, 0)
	if err != nil {
		t.Fatalf("AH to the peer's link-local GID %v: %v", gb[0].GID, err)
	}
	if !bytes.Equal(ah.DMAC[:], b.MAC()) {
		t.Fatalf("AH to the peer's link-local GID: DMAC %x, want the peer's %x", ah.DMAC, b.MAC())
	}
}

// TestTwoPortsOfOneHost opens ports on two interfaces of one namespace (a
// second veth pair inside it) and runs an RC SEND and WRITE between them:
// the address vector to the other interface's address is resolved to its
// port, and the frames go from one device to the other in process, as the
// kernel's stack loops a packet to an address of its own host.
func TestTwoPortsOfOneHost(t *testing.T) {
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-iflo"})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, argv := range [][]string{
		{"ip", "link", "add", "srx0", "type", "veth", "peer", "name", "srx1"},
		{"ip", "addr", "add", "10.98.0.1/24", "dev", "srx0"},
		{"ip", "link", "set", "srx0", "up"},
		{"ip", "link", "set", "srx1", "up"},
	} {
		if out, err := pair.A.Exec(ctx, argv...); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
	var a, c *Port
	if err := pair.A.Do(func() (err error) {
		if a, err = Open(context.Background(), pair.Veth.NameA, Options{Mode: ModeXDP}); err != nil {
			return err
		}
		c, err = Open(context.Background(), "srx0", Options{Mode: ModeXDP})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer c.Close()
	gc, _ := c.GID(c.DefaultGIDIndex())
	ah, err := a.AHAttr(ctx, gc, a.DefaultGIDIndex())
	if err != nil {
		t.Fatalf("AH to the other port's GID %v: %v", gc, err)
	}
	if !bytes.Equal(ah.DMAC[:], c.MAC()) {
		t.Fatalf("AH to the other port: DMAC %x, want its MAC %x", ah.DMAC, c.MAC())
	}
	rcRoundTrip(t, a, c)
}
