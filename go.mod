module github.com/sroce/sroce

go 1.26.0

require (
	github.com/cilium/ebpf v0.22.0 // indirect
	github.com/gopacket/gopacket v1.7.7 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
