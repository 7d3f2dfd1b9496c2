// Package rxeguest boots Debian guests whose kernel runs rdma_rxe, so that
// tests on a host without RDMA can talk to the reference implementation
// (rdma-core, perftest) over real RoCEv2 traffic.
//
// The guest image is a Debian bookworm root made with debootstrap (6.1
// kernel, rdma-core, perftest, ibverbs-utils, a small libibverbs program,
// ImmTool, and an LD_PRELOAD library, LingerLib), turned into an ext4
// image with mkfs.ext4 -d and cached outside the repository in CacheDir
// (/var/cache/sroce/rxe-guest, or $SROCE_CACHE) under a hash of the
// recipe:
//
//	img, err := rxeguest.EnsureImage(ctx) // first time: ~2-3 minutes
//
// Guests run under qemu-system-x86_64 with TCG (KVM is not needed), each
// on a copy-on-write overlay of the image, with one virtio-net NIC backed by
// a tap device in a network namespace. At boot the guest brings eth0 up with
// the configured address, loads rdma_rxe and creates rxe0 on eth0 (GID
// index 0: IPv6 link-local, index 1: the IPv4-mapped RoCEv2 GID).
//
//	pair, err := rxeguest.BootPair(ctx, img) // two guests on one bridge
//	defer pair.Close()
//	srv, err := pair.A.Start(ctx, "ibv_rc_pingpong -g 1")
//	res, err := pair.B.Run(ctx, "ibv_rc_pingpong -g 1 192.0.2.1")
//	res, err = srv.Wait(ctx)
//
// Commands reach the guest through virtio-serial ports bound to unix
// sockets; a shell agent in the guest runs each script with /bin/sh and
// sends back stdout, stderr and the exit status (see guest/agent.sh).
//
// Topologies: Boot alone puts a guest's tap in a namespace of its own; a
// LAN is a namespace with a bridge, LAN.Boot adds guests to it and
// LAN.AddHost adds a host namespace with a veth on the bridge, where a
// host-side program (sroce) can run next to the guests. StartCapture runs
// tcpdump on any interface of these namespaces. Config.Share mounts a host
// directory in the guest (9p) for host-built programs; Guest.Pause stops
// a guest's qemu for a while, as a starved host would.
//
// Everything here needs root, qemu-system-x86_64, debootstrap, mkfs.ext4,
// ip and (for captures) tcpdump: tests call Skip first. Close methods kill
// qemu and delete the namespaces; qemu and tcpdump also die with the test
// process, and namespaces left by a killed process are removed by the next
// NewNetns.
package rxeguest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Tools that the package runs on the host.
var hostTools = []string{"qemu-system-x86_64", "debootstrap", "mkfs.ext4", "ip", "tcpdump", "unshare", "chroot"}

var pathOnce sync.Once

// fixPath makes sure the sbin directories, where ip, mkfs.ext4, chroot and
// debootstrap live, are searched even when the caller's PATH lacks them.
func fixPath() {
	pathOnce.Do(func() {
		path := os.Getenv("PATH")
		dirs := filepath.SplitList(path)
		for _, d := range []string{"/usr/local/sbin", "/usr/sbin", "/sbin"} {
			if !slices.Contains(dirs, d) {
				path += string(os.PathListSeparator) + d
			}
		}
		os.Setenv("PATH", path)
	})
}

// Available reports why guests cannot be used here, or nil if they can.
func Available() error {
	fixPath()
	if os.Geteuid() != 0 {
		return errors.New("rxe guests need root (network namespaces, tap devices, debootstrap)")
	}
	var missing []string
	for _, t := range hostTools {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("rxe guests need %s (apt-get install qemu-system-x86 debootstrap e2fsprogs iproute2 tcpdump)",
			strings.Join(missing, ", "))
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("rxe guests need /dev/net/tun: %w", err)
	}
	return nil
}

// TB is the part of testing.TB that Skip needs.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
}

// Skip skips the test if Available reports a problem.
func Skip(t TB) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
}
