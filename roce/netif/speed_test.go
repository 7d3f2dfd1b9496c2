package netif

import "testing"

// TestSpeedUnknown checks that an interface without a speed (lo) and one
// that does not exist report none.
func TestSpeedUnknown(t *testing.T) {
	for _, name := range []string{"lo", "sroce-no-such0", "", "a-name-far-too-long-for-linux"} {
		if s, ok := Speed(name); ok {
			t.Errorf("Speed(%q) = %d Mbit/s, want none", name, s)
		}
	}
}
