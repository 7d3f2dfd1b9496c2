package linkcap

import "testing"

func TestString(t *testing.T) {
	for c, want := range map[Caps]string{
		0:                            "none",
		WaitReady | Lend:             "wait-ready|lend-rx|lend-tx",
		Groups | DeliversToSelf:      "groups|delivers-to-self",
		ICRCBlind | 1<<20 | WriteNow: "write-now|icrc-blind|0x100000",
	} {
		if got := c.String(); got != want {
			t.Errorf("Caps(%#x).String() = %q, want %q", uint32(c), got, want)
		}
	}
}
