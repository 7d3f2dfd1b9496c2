package iface

import (
	"strings"
	"testing"
)

// TestLinkKindsTable checks that the modes Open and the command line
// take come from the table of link kinds.
func TestLinkKindsTable(t *testing.T) {
	if got := ModeChoices("|"); got != "auto|xdp|udp" {
		t.Errorf("ModeChoices(|) = %q", got)
	}
	if got := ModeChoices(", "); got != "auto, xdp or udp" {
		t.Errorf("ModeChoices(, ) = %q", got)
	}
	for _, k := range Kinds() {
		if k.Open == nil || k.Title == "" || k.Description == "" {
			t.Errorf("kind %q lacks an opener, a title or a description", k.Mode)
		}
		if m, err := ParseMode(strings.ToUpper(string(k.Mode))); err != nil || m != k.Mode {
			t.Errorf("ParseMode(%q) = %q, %v", k.Mode, m, err)
		}
		if !strings.Contains(ModeSentence(), string(k.Mode)+" ("+k.Description+")") {
			t.Errorf("ModeSentence %q does not describe %q", ModeSentence(), k.Mode)
		}
	}
	if _, err := ParseMode("tcp"); err == nil || !strings.Contains(err.Error(), "want auto, xdp or udp") {
		t.Errorf("ParseMode(tcp): %v", err)
	}
	if kindOf(ModeXDP).Permitted == nil || kindOf(ModeUDP).Permitted != nil || !kindOf(ModeXDP).MultiQueue || kindOf(ModeUDP).MultiQueue {
		t.Error("AF_XDP must need privileges and take several queues, the UDP link neither")
	}
}
