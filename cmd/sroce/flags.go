package main

// Checks of flag values that several commands share; each says what is
// wrong in the words of package cli's own errors.

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/tools/device"
)

// badValue is the message for a value a flag does not take: `invalid
// value "-1" for --queues: want a positive number`.
func badValue(flag string, val any, why string) string {
	return fmt.Sprintf("invalid value %q for %s: %s", fmt.Sprint(val), flag, why)
}

// parseEngine reads --engine: "" leaves the choice to SROCE_ENGINE (whose
// errors name the variable), anything else must be an engine mode.
func parseEngine(s string) (roce.EngineMode, string) {
	if s == "" {
		m, err := device.Engine()
		if err != nil {
			return m, err.Error()
		}
		return m, ""
	}
	m, err := roce.ParseEngineMode(s)
	if err != nil {
		return m, badValue("--engine", s, "want auto, sleep, spin, adaptive or inline")
	}
	return m, ""
}

// linkModes is the usage lines' "auto|xdp|udp": the link modes of iface's
// table of link kinds.
var linkModes = iface.ModeChoices("|")

// linkModeHelp is the link flags' help: "auto, xdp or udp".
var linkModeHelp = iface.ModeChoices(", ")

// linkKindList lists the link modes, one a line, for a command's about
// text: auto, then each kind of iface's table with its description.
func linkKindList() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-6s the first of the others that works, in this order", iface.ModeAuto)
	for _, k := range iface.Kinds() {
		fmt.Fprintf(&b, "\n  %-6s %s", k.Mode, k.Description)
	}
	return b.String()
}

// parseLinkMode reads a link flag (--link, --mode).
func parseLinkMode(flag, s string) (iface.Mode, string) {
	m, err := iface.ParseMode(s)
	if err != nil {
		return m, badValue(flag, s, "want "+iface.ModeChoices(", "))
	}
	return m, ""
}

// checkListenAddr checks a host:port a command will listen on, before
// anything is opened: the port must be a number from 0 to 65535 (or a
// service name) and the host empty, an IP address or a name.
func checkListenAddr(flag, addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return badValue(flag, addr, "want HOST:PORT, e.g. :9464 or 127.0.0.1:9464")
	}
	if strings.Trim(port, "0123456789") == "" {
		if _, err := strconv.ParseUint(port, 10, 16); err != nil && port != "" {
			return badValue(flag, addr, "the port is not a number from 0 to 65535")
		}
	} else if _, err := net.LookupPort("tcp", port); err != nil {
		return badValue(flag, addr, "the port is neither a number nor a service name")
	}
	if host != "" && strings.ContainsAny(host, " /\\[]") {
		return badValue(flag, addr, "the host is neither an address nor a name")
	}
	return ""
}
