package main

// The daemon's log (a file reopened on SIGHUP, a level and a format that
// SIGHUP may change) and its notifications to systemd (sd_notify).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// logSink is where the log goes: a file (reopened by Reopen, so that a
// rotated log is let go) or standard error.
type logSink struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	stderr io.Writer
}

// openLogSink opens path for appending (created 0640), or uses stderr when
// path is empty.
func openLogSink(path string, stderr io.Writer) (*logSink, error) {
	s := &logSink{path: path, stderr: stderr}
	if path == "" {
		return s, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("--log-file: %w", err)
	}
	s.f = f
	return s, nil
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		return s.f.Write(p)
	}
	return s.stderr.Write(p)
}

// Reopen opens the log file at path again (path "" is standard error),
// closing the one in use; on failure the log stays where it was.
func (s *logSink) Reopen(path string) error {
	if path == "" {
		s.mu.Lock()
		old := s.f
		s.f, s.path = nil, ""
		s.mu.Unlock()
		if old != nil {
			old.Close()
		}
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	s.mu.Lock()
	old := s.f
	s.f, s.path = f, path
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return nil
}

// Close closes the log file, if any.
func (s *logSink) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}

// logHandler writes text or JSON records (SetJSON switches, also for the
// loggers derived before) at a level that may change (its LevelVar).
type logHandler struct {
	text, json slog.Handler
	useJSON    *atomic.Bool
}

func newLogHandler(w io.Writer, level *slog.LevelVar, json bool) *logHandler {
	o := &slog.HandlerOptions{Level: level}
	h := &logHandler{text: slog.NewTextHandler(w, o), json: slog.NewJSONHandler(w, o), useJSON: &atomic.Bool{}}
	h.useJSON.Store(json)
	return h
}

func (h *logHandler) cur() slog.Handler {
	if h.useJSON.Load() {
		return h.json
	}
	return h.text
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.cur().Enabled(ctx, l)
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.cur().Handle(ctx, r)
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{text: h.text.WithAttrs(as), json: h.json.WithAttrs(as), useJSON: h.useJSON}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{text: h.text.WithGroup(name), json: h.json.WithGroup(name), useJSON: h.useJSON}
}

// parseLevel parses a log level: debug, info, warn or error.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// notifier sends sd_notify(3) messages to the socket in NOTIFY_SOCKET
// (a unix datagram socket; "@" starts an abstract name), when set.
type notifier struct {
	addr string
	log  *slog.Logger
}

func newNotifier(log *slog.Logger) *notifier {
	return &notifier{addr: os.Getenv("NOTIFY_SOCKET"), log: log}
}

// send sends the lines of a notification; a failure is logged once per
// message, never fatal.
func (n *notifier) send(lines ...string) {
	if n == nil || n.addr == "" {
		return
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.addr, Net: "unixgram"})
	if err == nil {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		_, err = c.Write([]byte(strings.Join(lines, "\n") + "\n"))
		c.Close()
	}
	if err != nil {
		n.log.Warn("the notification to the service manager failed", "socket", n.addr, "message", strings.Join(lines, " "), "err", err)
	}
}

// monotonicUsec is CLOCK_MONOTONIC in µs, as RELOADING=1 carries it.
func monotonicUsec() string {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return fmt.Sprintf("MONOTONIC_USEC=%d", ts.Nano()/1000)
}
