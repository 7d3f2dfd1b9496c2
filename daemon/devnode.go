package daemon

// Device nodes: an entry /dev/infiniband/<dev_name> for each served
// device, because some programs look for one before they use a device
// that libibverbs listed. UCX (uct_ib_device_is_accessible in 1.13's
// uct/ib/base/ib_md.c) skips every device whose
// /dev/infiniband/<ibv_device.dev_name> is not a character device it may
// read and write. The drop-in libibverbs names the device's dev_name
// DevNodeName(name, guid), never the kernel's uverbsN, so the entry never
// collides with a kernel device's node on a host that also has kernel RDMA
// devices.
//
// The entry is a symbolic link to /dev/null. Nothing opens it to reach
// the device (the drop-in library talks to the daemon over its socket), so
// it only has to pass stat (a character device, as stat follows the link)
// and access(R_OK|W_OK) for every user, which /dev/null does; and a program
// or tool that does open it gets /dev/null's harmless semantics. A link,
// rather than a node made with mknod of /dev/null's numbers, needs no
// CAP_MKNOD and works where /dev is mounted nodev; it carries /dev/null's
// permissions, which udev and the kernel keep at 0666.
//
// The daemon removes only the entries it made, when their device goes
// away and when it closes; an entry that exists already (another daemon's
// device of the same name and GUID, or one left by a daemon that was
// killed) is left alone. It removes /dev/infiniband itself only if it made
// the directory and the directory is empty.

import (
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
)

// DevNodeDir is where the kernel's RDMA devices have their nodes and where
// the daemon command asks for the devices' entries (Options.DevNodeDir).
const DevNodeDir = "/dev/infiniband"

// devNodeTarget is what each entry links to.
const devNodeTarget = "/dev/null"

// DevNodeName is the dev_name the drop-in libibverbs gives the device
// named name (sroce_<interface>) whose node GUID is guid: the name and the
// GUID's bytes in hex, so two daemons serving interfaces of one name in
// two network namespaces (whose MACs, so GUIDs, differ) get two entries.
// shim/libibverbs/device.c builds the same string.
func DevNodeName(name string, guid [8]byte) string {
	return name + "." + hex.EncodeToString(guid[:])
}

// devNodes makes and removes the served devices' entries in dir.
type devNodes struct {
	dir string // "" when the daemon makes no entries

	log *slog.Logger

	mu      sync.Mutex
	made    map[string]string // device name -> the path of the entry made for it
	madeDir bool              // dir was made by the daemon
	warned  bool              // the one line saying entries cannot be made was logged
}

// add makes the entry of device name with GUID guid, if it does not exist.
func (n *devNodes) add(name string, guid [8]byte) {
	if n.dir == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.made[name]; ok {
		return
	}
	err := os.Mkdir(n.dir, 0o755)
	if err == nil {
		n.madeDir = true
	} else if !errors.Is(err, os.ErrExist) {
		n.warn(err)
		return
	}
	path := filepath.Join(n.dir, DevNodeName(name, guid))
	if err := os.Symlink(devNodeTarget, path); err != nil {
		if !errors.Is(err, os.ErrExist) {
			n.warn(err)
		}
		return
	}
	if n.made == nil {
		n.made = make(map[string]string)
	}
	n.made[name] = path
}

// warn logs once that the entries cannot be made.
func (n *devNodes) warn(err error) {
	if n.warned {
		return
	}
	n.warned = true
	n.log.Warn("cannot make the devices' entries in "+n.dir+" (the daemon is not root?): "+
		"programs that look for them, such as UCX, will not use the devices; the daemon carries on",
		"err", err)
}

// remove removes the entry made for device name, if the daemon made one.
func (n *devNodes) remove(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.removeLocked(name)
}

func (n *devNodes) removeLocked(name string) {
	path, ok := n.made[name]
	if !ok {
		return
	}
	delete(n.made, name)
	// Only the link made here: if something replaced it meanwhile, it is
	// not the daemon's to remove.
	if t, err := os.Readlink(path); err == nil && t == devNodeTarget {
		os.Remove(path)
	}
}

// close removes every entry made, and the directory if it was made here
// and is empty now.
func (n *devNodes) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for name := range n.made {
		n.removeLocked(name)
	}
	if n.madeDir {
		n.madeDir = false
		os.Remove(n.dir) // fails, as it should, if anything else is in it
	}
}
