package oob

import (
	"errors"

	"github.com/sroce/sroce/internal/cli"
	"github.com/sroce/sroce/verbs"
)

// Command lines of ibv_rc_pingpong and ibv_ud_pingpong (rdma-core 44.0).
// Their parsing is lenient, like the tools': numbers go through strtoul or
// strtol without checking for trailing text.

// PingpongParams are the parsed options of a pingpong tool.
type PingpongParams struct {
	UD         bool   // ibv_ud_pingpong (else ibv_rc_pingpong)
	ServerName string // operand: empty for the server
	Port       int    // -p, --port
	IBDev      string // -d, --ib-dev (sroce: the interface)
	IBPort     int    // -i, --ib-port
	Size       uint32 // -s, --size
	MTU        int    // -m, --mtu in bytes (RC only; UD uses the port MTU)
	RxDepth    uint32 // -r, --rx-depth
	Iters      uint32 // -n, --iters
	SL         int    // -l, --sl
	Events     bool   // -e, --events
	GIDIndex   int    // -g, --gid-idx; -1: no GID
	Check      bool   // -c, --chk: validate the received buffer
	// Queues is sroce's --queues: the receive queues (engines) the
	// device uses; 0 means SROCE_QUEUES, else the default.
	Queues int
	// Help and Version report -h/--help and --version: the caller prints
	// the usage or the version and exits successfully.
	Help, Version bool
	// Unsupported lists options sroce does not implement (on-demand
	// paging, device memory, completion timestamps, the new post-send API).
	Unsupported []string
}

// rcPingpongOptions are ibv_rc_pingpong's options (rdma-core 44.0).
var rcPingpongOptions = []option{
	{'p', "port", true}, {'d', "ib-dev", true}, {'i', "ib-port", true}, {'s', "size", true},
	{'m', "mtu", true}, {'r', "rx-depth", true}, {'n', "iters", true}, {'l', "sl", true},
	{'e', "events", false}, {'g', "gid-idx", true}, {'o', "odp", false}, {'O', "iodp", false},
	{'P', "prefetch", false}, {'t', "ts", false}, {'c', "chk", false}, {'j', "dm", false},
	{'N', "new_send", false},
	{0, "device", true}, {0, "queues", true}, // sroce's own
	{'h', "help", false}, {0, "version", false},
}

// udPingpongOptions are ibv_ud_pingpong's options.
var udPingpongOptions = []option{
	{'p', "port", true}, {'d', "ib-dev", true}, {'i', "ib-port", true}, {'s', "size", true},
	{'r', "rx-depth", true}, {'n', "iters", true}, {'l', "sl", true}, {'e', "events", false},
	{'g', "gid-idx", true}, {'c', "chk", false},
	{0, "device", true}, {0, "queues", true}, // sroce's own
	{'h', "help", false}, {0, "version", false},
}

// ParsePingpong parses the arguments of ibv_rc_pingpong (ud false) or
// ibv_ud_pingpong (ud true). A *UsageError means the tool prints its usage
// and exits with status 1.
func ParsePingpong(ud bool, args []string) (PingpongParams, error) {
	p := PingpongParams{UD: ud, Port: PingpongPort, IBPort: PingpongIBPort, Size: RCPingpongSize,
		MTU: RCPingpongMTU, RxDepth: PingpongRxDepth, Iters: PingpongIters, SL: PingpongSL, GIDIndex: PingpongGIDIdx}
	opts := rcPingpongOptions
	if ud {
		p.Size, p.MTU = UDPingpongSize, 0
		opts = udPingpongOptions
	}
	strtoul := func(s string) uint64 {
		v, _ := cStrtol(s)
		return uint64(v)
	}
	strtol := func(s string) int {
		v, _ := cStrtol(s)
		return int(int32(v))
	}
	operands, err := cli.Getopt(args, specs(opts), false, func(o cli.Opt) (bool, error) {
		switch o.Long {
		case "help":
			p.Help = true
			return true, nil
		case "version":
			p.Version = true
			return true, nil
		}
		val := o.Value
		short := o.Short
		if o.Long == "device" {
			short = 'd'
		}
		switch short {
		case 'p':
			v := strtoul(val)
			if v > 65535 {
				return false, flagErr(o, errors.New("the port is above 65535"))
			}
			p.Port = int(v)
		case 'd':
			p.IBDev = val
		case 'i':
			p.IBPort = strtol(val)
			if p.IBPort < 1 {
				return false, flagErr(o, errors.New("the port is below 1"))
			}
		case 's':
			p.Size = uint32(strtoul(val))
		case 'm':
			m := strtol(val)
			if _, ok := verbs.MTUFromBytes(m); !ok {
				return false, flagErr(o, errors.New("the MTU is not 256, 512, 1024, 2048 or 4096"))
			}
			p.MTU = m
		case 'r':
			p.RxDepth = uint32(strtoul(val))
		case 'n':
			p.Iters = uint32(strtoul(val))
		case 'l':
			p.SL = strtol(val)
		case 'e':
			p.Events = true
		case 'g':
			p.GIDIndex = strtol(val)
		case 'c':
			p.Check = true
		case 0: // --queues, the long-only option left (--device is -d)
			v, rest := cStrtol(val)
			if rest != "" || v < 1 || v > 1<<16 {
				return false, flagErr(o, errors.New("not a positive number"))
			}
			p.Queues = int(v)
		default:
			p.Unsupported = append(p.Unsupported, "-"+string(o.Short))
		}
		return false, nil
	})
	if err != nil || p.Help || p.Version {
		return p, asUsageErr(err)
	}
	switch len(operands) {
	case 0:
	case 1:
		p.ServerName = operands[0]
	default:
		return p, usageErr("more than one server name: %q", operands)
	}
	return p, nil
}
