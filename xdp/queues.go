// Multi-queue interfaces: one socket per receive queue, one steering
// program and XSKMAP shared by all of them. The Group owns the sockets and
// the program; each socket is then driven by its own goroutine.

package xdp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	"github.com/sroce/sroce/bpf"
	"golang.org/x/sys/unix"
)

// QueueCount returns the number of receive queues of the interface ifname
// in the calling thread's network namespace: the rx plus combined channels
// reported by ethtool (ETHTOOL_GCHANNELS), or, for drivers without it, the
// queue count from rtnetlink (IFLA_NUM_RX_QUEUES), or /sys/class/net.
func QueueCount(ifname string) (int, error) {
	if n, err := ethtoolRxChannels(ifname); err == nil && n > 0 {
		return n, nil
	}
	if n, err := netlinkRxQueues(ifname); err == nil && n > 0 {
		return n, nil
	}
	// sysfs shows the namespace it was mounted in, so it is the last resort.
	m, err := filepath.Glob(filepath.Join("/sys/class/net", ifname, "queues", "rx-*"))
	if err == nil && len(m) > 0 {
		return len(m), nil
	}
	return 0, fmt.Errorf("xdp: cannot find the queue count of %s", ifname)
}

// ethtoolChannels is struct ethtool_channels.
type ethtoolChannels struct {
	cmd                                         uint32
	maxRx, maxTx, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// ifreqData is struct ifreq with the ifr_data member.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

func ethtoolRxChannels(ifname string) (int, error) {
	if len(ifname) >= unix.IFNAMSIZ {
		return 0, unix.EINVAL
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	var ifr ifreqData
	copy(ifr.name[:], ifname)
	ifr.data = uintptr(unsafe.Pointer(&ch))
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	if e != 0 {
		return 0, e
	}
	return int(ch.rxCount + ch.combinedCount), nil
}

func netlinkRxQueues(ifname string) (int, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return 0, err
	}
	rib, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	if err != nil {
		return 0, err
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		if m.Header.Type != syscall.RTM_NEWLINK || len(m.Data) < syscall.SizeofIfInfomsg {
			continue
		}
		info := (*syscall.IfInfomsg)(unsafe.Pointer(&m.Data[0]))
		if int(info.Index) != ifi.Index {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&m)
		if err != nil {
			return 0, err
		}
		for _, a := range attrs {
			if a.Attr.Type == unix.IFLA_NUM_RX_QUEUES && len(a.Value) >= 4 {
				return int(*(*uint32)(unsafe.Pointer(&a.Value[0]))), nil
			}
		}
	}
	return 0, os.ErrNotExist
}

// Group is one socket per receive queue of an interface plus the steering
// program they share.
type Group struct {
	// Sockets holds the socket of queue i at index i.
	Sockets  []*Socket
	steering *bpf.Steering
}

// OpenAll attaches one steering program to ifname and opens a socket on
// each of its receive queues (QueueCount). opts.Steering must be nil.
func OpenAll(ifname string, opts Options) (*Group, error) {
	return OpenQueues(ifname, 0, opts)
}

// OpenQueues attaches one steering program to ifname and opens a socket
// on each of its first n receive queues (n zero or negative: all of them,
// QueueCount). The program's XSKMAP covers every queue of the interface;
// frames that arrive on a queue without a socket go to the kernel.
// opts.Steering must be nil.
func OpenQueues(ifname string, n int, opts Options) (*Group, error) {
	if opts.Steering != nil || opts.NoSteering {
		return nil, errors.New("xdp: OpenQueues attaches its own steering program")
	}
	all, err := QueueCount(ifname)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		n = all
	}
	if n > all {
		return nil, fmt.Errorf("xdp: %s has %d receive queues, %d asked for", ifname, all, n)
	}
	st, err := bpf.Attach(ifname, bpf.Options{Queues: all, Mode: opts.AttachMode})
	if err != nil {
		return nil, fmt.Errorf("xdp: %w", err)
	}
	g := &Group{steering: st}
	opts.Steering = st
	for q := 0; q < n; q++ {
		s, err := Open(ifname, q, opts)
		if err != nil {
			g.Close()
			return nil, err
		}
		s.attach = st.Mode()
		g.Sockets = append(g.Sockets, s)
	}
	return g, nil
}

// AttachMode returns how the shared steering program is attached.
func (g *Group) AttachMode() bpf.AttachMode { return g.steering.Mode() }

// Close closes every socket, then detaches the steering program.
func (g *Group) Close() error {
	var errs []error
	for _, s := range g.Sockets {
		if err := s.Close(); !errors.Is(err, ErrClosed) {
			errs = append(errs, err)
		}
	}
	g.Sockets = nil
	if g.steering != nil {
		errs = append(errs, g.steering.Close())
		g.steering = nil
	}
	return errors.Join(errs...)
}

// String describes the group, e.g. "eth0: 4 queues, copy mode, driver attach".
func (g *Group) String() string {
	var b strings.Builder
	if len(g.Sockets) == 0 {
		return "closed group"
	}
	name, _ := g.Sockets[0].Interface()
	fmt.Fprintf(&b, "%s: %d queues, %s mode, %s attach", name, len(g.Sockets), g.Sockets[0].Mode(), g.AttachMode())
	return b.String()
}
