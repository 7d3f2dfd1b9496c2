#!/bin/sh
# PID 1 of an rxe guest. It mounts the pseudo file systems, brings eth0 up
# with the address given on the kernel command line (sroce.ip=ADDR/LEN),
# creates the rdma_rxe device rxe0 on eth0 and then starts one command agent
# per virtio-serial port named sroce.agent.N. Kernel parameters read here:
#   sroce.name=NAME  hostname
#   sroce.ip=PREFIX  IPv4 (or IPv6) address of eth0 with prefix length
#   sroce.mtu=N      MTU of eth0 (default 1500)
#   sroce.share=TAG  a 9p share (virtio) to mount read-only on /mnt/host
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C

# The initramfs hands over /proc, /sys and /dev already mounted.
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /run/sroce

log() { echo "sroce-init: $*" > /dev/console; }

param() {
	for w in $(cat /proc/cmdline); do
		case $w in "$1="*) echo "${w#*=}" ;; esac
	done
}
NAME=$(param sroce.name)
IP=$(param sroce.ip)
MTU=$(param sroce.mtu)
SHARE=$(param sroce.share)

[ -n "$NAME" ] && hostname "$NAME"
modprobe -a virtio_net virtio_console rdma_rxe ib_uverbs
# What the tests impair eth0 with: netem under a prio qdisc for egress, an
# ingress qdisc with u32 filters and gact actions for ingress.
modprobe -a sch_netem sch_prio sch_ingress cls_u32 act_gact || log "traffic control modules missing"
if [ -n "$SHARE" ]; then
	mkdir -p /mnt/host
	modprobe -a 9pnet_virtio 9p
	mount -t 9p -o trans=virtio,version=9p2000.L,ro "$SHARE" /mnt/host || log "mounting the share $SHARE failed"
fi

ip link set lo up
i=0
while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -n "$MTU" ] && ip link set eth0 mtu "$MTU"
ip link set eth0 up
[ -n "$IP" ] && ip addr add "$IP" dev eth0
rdma link add rxe0 type rxe netdev eth0 || log "rdma link add failed"

# Wait until GID index 1 (the IPv4-mapped RoCEv2 GID) is populated.
gid=/sys/class/infiniband/rxe0/ports/1/gids/1
i=0
while [ $i -lt 100 ]; do
	g=$(cat $gid 2>/dev/null)
	case $g in "" | 0000:0000:0000:0000:0000:0000:0000:0000) ;; *) break ;; esac
	sleep 0.1
	i=$((i + 1))
done
log "eth0 $IP rxe0 gid1 ${g:-none}"

# Ready before the agents start: the host takes the first answer of an
# agent to mean the guest is set up, and reads this file then.
echo ok > /run/sroce/ready
i=0
while [ -z "$(ls /sys/class/virtio-ports 2>/dev/null)" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
for p in /sys/class/virtio-ports/*; do
	case $(cat "$p/name" 2>/dev/null) in
	sroce.agent.*) /sbin/sroce-agent "/dev/${p##*/}" </dev/null >/dev/null 2>&1 & ;;
	esac
done
log ready

while :; do
	wait
	sleep 1
done
