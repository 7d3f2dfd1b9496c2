package cm

import (
	"testing"
	"time"
)

func TestStateNames(t *testing.T) {
	seen := map[string]bool{}
	for s := StateIdle; s <= StateSIDRREQRcvd; s++ {
		n := s.String()
		if n == "" || seen[n] {
			t.Errorf("state %d: name %q", s, n)
		}
		seen[n] = true
	}
	if StateEstablished.String() != "ESTABLISHED" || State(200).String() != "state 200" {
		t.Errorf("%v %v", StateEstablished, State(200))
	}
}

func TestTimeouts(t *testing.T) {
	for _, c := range []struct {
		t    uint8
		want time.Duration
	}{
		{0, 4096 * time.Nanosecond},
		{1, 8192 * time.Nanosecond},
		{14, 67108864 * time.Nanosecond}, // ~67 ms
		{20, 4294967296 * time.Nanosecond},
		{31, 8796093022208 * time.Nanosecond},
		{32, 8796093022208 * time.Nanosecond},
		{255, 8796093022208 * time.Nanosecond},
	} {
		if got := TimeoutDuration(c.t); got != c.want {
			t.Errorf("TimeoutDuration(%d) = %v, want %v", c.t, got, c.want)
		}
	}
	if got := ResponseWait(14, 20); got != 2*TimeoutDuration(14)+TimeoutDuration(20) || got <= 4*time.Second {
		t.Errorf("ResponseWait(14, 20) = %v", got)
	}
	if got := MRAWait(14, 24); got != TimeoutDuration(24)+TimeoutDuration(14) {
		t.Errorf("MRAWait(14, 24) = %v", got)
	}
}
