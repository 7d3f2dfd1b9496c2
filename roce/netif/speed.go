package netif

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolCmd is struct ethtool_cmd (ETHTOOL_GSET), up to the fields
// Speed reads, with the rest of its 44 bytes.
type ethtoolCmd struct {
	cmd         uint32
	supported   uint32
	advertising uint32
	speed       uint16
	duplex      uint8
	port        uint8
	phyAddress  uint8
	transceiver uint8
	autoneg     uint8
	mdioSupport uint8
	maxTxPkt    uint32
	maxRxPkt    uint32
	speedHi     uint16
	_           [14]byte
}

// ifreqData is struct ifreq with the ifr_data member.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

// Speed returns the link speed of interface ifname in the calling
// thread's network namespace, in Mbit/s, as its driver reports it through
// ethtool (ETHTOOL_GSET); false when it reports none (veth without a
// peer, lo, a link that is down) or the interface has no ethtool. sysfs's
// speed file would show the namespace sysfs was mounted in instead.
func Speed(ifname string) (uint32, bool) {
	if len(ifname) == 0 || len(ifname) >= unix.IFNAMSIZ {
		return 0, false
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	cmd := ethtoolCmd{cmd: unix.ETHTOOL_GSET}
	var ifr ifreqData
	copy(ifr.name[:], ifname)
	ifr.data = uintptr(unsafe.Pointer(&cmd))
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return 0, false
	}
	s := uint32(cmd.speedHi)<<16 | uint32(cmd.speed)
	if s == 0 || s == 0xffffffff || s == 0xffff {
		return 0, false // SPEED_UNKNOWN
	}
	return s, true
}
