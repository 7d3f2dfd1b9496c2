package rxeguest

import (
	"os/exec"
	"runtime"
	"sync"
)

// The processes started here (qemu, tcpdump, debootstrap) carry SIGKILL as
// their parent-death signal so they never outlive a killed test. Linux sends
// that signal when the forking thread exits, not the process, and Go ends a
// thread when a goroutine exits while locked to it, which is what code that
// switches network namespaces does. A qemu forked from such a thread would
// be killed in the middle of a test. So they are all forked from one thread
// that is locked for the life of the process and runs nothing else.

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

// startCmd is cmd.Start on the spawner thread.
func startCmd(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread must not exit
			for r := range spawnCh {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	spawnCh <- spawnReq{cmd, done}
	return <-done
}
