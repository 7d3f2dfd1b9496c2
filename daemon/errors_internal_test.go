package daemon

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/roce"
	"golang.org/x/sys/unix"
)

// TestClassify checks each class of request error and the errno the
// client gets for it, through the wraps errors take on their way.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		class errClass
		errno unix.Errno
	}{
		{"protocol broken", misbehaved("REG_MR: %w", &memFault{reason: "not sealed"}), classMisbehaviour, unix.EPROTO},
		{"unknown handle", unix.EINVAL, classRefusal, unix.EINVAL},
		{"engine busy", fmt.Errorf("dealloc: %w", roce.ErrBusy), classRefusal, unix.EBUSY},
		{"engine short", fmt.Errorf("create: %w", roce.ErrNoResources), classShortage, unix.ENOMEM},
		{"mmap short", fmt.Errorf("REG_MR: %w", fmt.Errorf("mapping the memfd: %w", unix.ENOMEM)), classShortage, unix.ENOMEM},
		{"descriptors short", fmt.Errorf("dup for the reply: %w", unix.EMFILE), classShortage, unix.EMFILE},
		{"memfd short", internalf("memfd for cq: %w", unix.ENFILE), classShortage, unix.ENFILE},
		{"sealing failed", internalf("sealing the memfd for qp: %w", unix.EPERM), classInternal, unix.EPERM},
		{"layout failed", internalf("laying out a QP's rings: %w", errors.New("stride")), classInternal, unix.EIO},
		{"process gone", fmt.Errorf("gone (%w): opening /proc/1: %w", unix.ESRCH, unix.ENOENT), classRefusal, unix.ESRCH},
	} {
		class, errno := classify(tc.err)
		if class != tc.class || errno != tc.errno {
			t.Errorf("%s (%v): class %d errno %v, want class %d errno %v", tc.name, tc.err, class, errno, tc.class, tc.errno)
		}
	}
}

// TestTableComplete checks that every operation the protocol names is in
// the request table, and nothing else.
func TestTableComplete(t *testing.T) {
	n := 0
	for op := ctl.Op(0); op < 1024; op++ {
		named := !strings.HasPrefix(op.String(), "op ")
		if named {
			n++
		}
		if named != (methods[op] != nil) {
			t.Errorf("%s: named by the protocol %v, in the table %v", op, named, methods[op] != nil)
		}
	}
	if n < 50 {
		t.Errorf("only %d operations named by the protocol", n)
	}
}
