package netif

// Benchmarks of the netlink requests behind opening a device (Lookup) and
// creating an address handle (RouteTo, then ResolveNeighbor of a neighbour
// the kernel already knows). Privileged, like netns_test.go: run as root
//
//	go test -run '^$' -bench . ./roce/netif

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/nsutil"
)

// benchTopo is the pair of netns_test.go with B's MAC in A's neighbour
// table and, with extra > 0, that many more permanent IPv4 neighbours on
// A's end (a busy LAN).
func benchTopo(b *testing.B, extra int) *topo {
	tp := newTopo(b, nsutil.VethConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := tp.hA.ResolveNeighbor(ctx, "veth0", tp.ipB); err != nil {
		b.Fatal(err)
	}
	if extra == 0 {
		return tp
	}
	var cmds strings.Builder
	for i := range extra {
		fmt.Fprintf(&cmds, "neigh add 198.18.%d.%d lladdr 02:00:00:00:%02x:%02x dev veth0 nud permanent\n",
			i/250, i%250+1, i>>8, i&0xff)
	}
	file := filepath.Join(b.TempDir(), "neigh.batch")
	if err := os.WriteFile(file, []byte(cmds.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	if out, err := tp.A.Exec(ctx, "ip", "-batch", file); err != nil {
		b.Fatalf("ip -batch: %v\n%s", err, out)
	}
	return tp
}

func BenchmarkLookup(b *testing.B) {
	tp := benchTopo(b, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tp.hA.Lookup("veth0"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRouteTo(b *testing.B) {
	tp := benchTopo(b, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tp.hA.RouteTo(tp.ipB); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkNeighbor(b *testing.B) {
	for _, extra := range []int{0, 1000} {
		b.Run(fmt.Sprintf("table=%d", extra+1), func(b *testing.B) {
			tp := benchTopo(b, extra)
			b.ReportAllocs()
			for b.Loop() {
				if _, found, err := tp.hA.Neighbor(tp.Veth.IndexA, tp.ipB); err != nil || !found {
					b.Fatal(found, err)
				}
			}
		})
	}
}

// BenchmarkResolvePath is the whole of an address handle's lookups: the
// route, the outgoing link, and the known neighbour's MAC.
func BenchmarkResolvePath(b *testing.B) {
	for _, extra := range []int{0, 1000} {
		b.Run(fmt.Sprintf("table=%d", extra+1), func(b *testing.B) {
			tp := benchTopo(b, extra)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tp.hA.ResolvePath(ctx, tp.ipB); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
