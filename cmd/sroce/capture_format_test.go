package main

// Capture file format constants the tests use to build and edit captures
// byte by byte (package capture reads them).

const (
	magicPcapMicro  = 0xa1b2c3d4 // classic pcap, microseconds, little-endian
	magicPcapngSHB  = 0x0a0d0d0a // pcapng section header block type
	pcapngByteOrder = 0x1a2b3c4d // pcapng byte-order magic
	ngBlockIDB      = 0x00000001 // interface description
	ngBlockEPB      = 0x00000006 // enhanced packet
)
