// Package xdp is an AF_XDP socket for sroce, written on golang.org/x/sys/unix.
//
// An AF_XDP socket receives the frames that an XDP program (package bpf)
// redirects from one receive queue of a network interface, and transmits
// frames on that queue, through rings shared with the kernel and a block of
// packet memory, the UMEM, registered with the socket. Open sets everything
// up for one queue (UMEM, the four rings, the steering program, the bind);
// OpenAll does it for every queue of an interface.
//
// Frame memory. The UMEM is split into equal chunks. Half of them are for
// receiving: they cycle fill ring -> kernel -> rx ring -> caller (Receive
// hands out Frames pointing into the UMEM) -> Release -> fill ring. The other
// half are for transmitting: they cycle free list -> tx ring -> kernel ->
// completion ring -> free list. Every chunk has an owner at all times and the
// socket checks each transition, so a chunk cannot be lost or used twice
// without a panic saying so.
//
// Chunk size and the largest frame. The kernel accepts chunks of 2048 bytes
// up to the page size (4096 on x86-64; 8192 gets EINVAL on 6.18, in huge
// pages too). In copy mode (the only mode on veth) it stores a received
// frame at offset 256 (XDP_PACKET_HEADROOM) of a chunk, so one chunk holds
// chunk-256 bytes: 3840. A RoCEv2 frame at path MTU 4096 is about 4.2 KB
// (4096 payload, Ethernet 14 (+4 VLAN), IPv6 40, UDP 8, BTH 12, up to 28
// bytes of extended headers, ICRC 4), so the socket uses 4096-byte chunks
// with multi-buffer (XDP_USE_SG): the kernel spreads a longer frame over
// several chunks chained with XDP_PKT_CONTD (transmit does the same). Frames
// up to 3840 bytes are handed out in place; longer ones are gathered into a
// per-socket buffer (one copy). MaxFrameSize is DefaultMaxFrameSize, 7680
// bytes, unless Options say otherwise. Without multi-buffer (kernels before
// 6.6, or Options.NoMultiBuffer) the limit is 3840 and the kernel drops
// longer frames, counting them in Stats.RxDropped.
//
// Concurrency. A Socket serves one receiving goroutine (Receive, Release,
// ReceiveCopy, Wait) and one transmitting goroutine (Transmit, AllocTx,
// SubmitTx, FreeTx, Flush); they may be the same goroutine. Wake, Stats, Mode and
// Close may be called from anywhere.
//
// System calls on the data path. The kicks that never block (the transmit
// kick, sendto with MSG_DONTWAIT, and the fill ring's wake-up, recvfrom
// with MSG_DONTWAIT) are raw calls, made without the Go runtime's system
// call bookkeeping: when a process has been idle, the runtime's monitor
// thread sleeps, and every call through the bookkeeping wakes it (a futex
// wake and a thread switch per call). For a receiver whose only work is
// answering with an ACK now and then, that was a large part of its CPU
// time, and on a one-CPU machine it took the CPU from the sender's frames:
// between two one-vCPU guests it cost a third of the 64 KiB write bandwidth.
// The waits for frames go through the runtime's network poller instead.
package xdp
