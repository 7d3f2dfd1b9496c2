package netns

import (
	"fmt"
	"strconv"
	"strings"
)

// rpingDefaultSize is rping's default message size (-S).
const rpingDefaultSize = 64

// rpingData returns the text of rping's ping number n with messages of
// size bytes: "rdma-ping-N: " and then the printable characters from 'A'
// to 'z' in a cycle, starting n characters further each ping, up to size-1
// bytes (the last byte is the string's end).
func rpingData(n, size int) string {
	b := []byte(fmt.Sprintf("rdma-ping-%d: ", n))
	c := 'A' + n%('z'-'A'+1)
	for len(b) < size-1 {
		b = append(b, byte(c))
		if c++; c > 'z' {
			c = 'A'
		}
	}
	return string(b[:max(0, size-1)])
}

// rpingArgs is rping's command line after its name: a server (-s)
// listening on addr or a client (-c) of addr, n verified pings (-C, -v).
func rpingArgs(server bool, addr string, port, n int) []string {
	role := "-c"
	if server {
		role = "-s"
	}
	return []string{role, "-a", addr, "-p", strconv.Itoa(port), "-C", strconv.Itoa(n), "-v"}
}

// The prefixes of the lines with which rping -v shows each ping's data.
const (
	rpingServerPrefix = "server ping data: "
	rpingClientPrefix = "ping data: "
)

// checkRpingOutput checks what an rping side printed with -v: exactly
// count lines starting with prefix (rpingClientPrefix or
// rpingServerPrefix), the pings 0 to count-1 in order, each with
// the text rping puts in it. It returns what is wrong, or "".
func checkRpingOutput(out, prefix string, count, size int) string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			got = append(got, strings.TrimPrefix(l, prefix))
		}
	}
	if len(got) != count {
		return fmt.Sprintf("%d lines %q, want %d", len(got), prefix, count)
	}
	for n, l := range got {
		if want := rpingData(n, size); l != want {
			return fmt.Sprintf("ping %d: %q, want %q", n, l, want)
		}
	}
	return ""
}
