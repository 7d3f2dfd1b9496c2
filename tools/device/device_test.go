package device

import (
	"net/netip"
	"strings"
	"testing"
)

// TestParseSpec checks the -d forms and their errors.
func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    Spec
		wantErr string
	}{
		{"", Spec{}, ""},
		{"veth0", Spec{Ifname: "veth0"}, ""},
		{"lo@127.0.0.2", Spec{Ifname: "lo", Addr: netip.MustParseAddr("127.0.0.2")}, ""},
		{"eth0@fd00::1", Spec{Ifname: "eth0", Addr: netip.MustParseAddr("fd00::1")}, ""},
		{"lo@nope", Spec{}, `"nope" after @ in the device "lo@nope" is not an IP address`},
		{"@127.0.0.1", Spec{}, `the device "@127.0.0.1" names no interface before @`},
	} {
		got, err := ParseSpec(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("ParseSpec(%q) error = %v, want %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// TestLinkMode checks that a bad SROCE_LINK is named in the error.
func TestLinkMode(t *testing.T) {
	t.Setenv(EnvLink, "bogus")
	if _, err := LinkMode(); err == nil || !strings.HasPrefix(err.Error(), EnvLink+": ") {
		t.Errorf("LinkMode with %s=bogus: %v", EnvLink, err)
	}
	t.Setenv(EnvLink, "udp")
	if _, err := LinkMode(); err != nil {
		t.Errorf("LinkMode with %s=udp: %v", EnvLink, err)
	}
}
