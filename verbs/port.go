package verbs

// PortState is the state of a port (enum ibv_port_state).
type PortState uint8

// Port states.
const (
	PortDown   PortState = 1
	PortActive PortState = 4
)

// PortAttr describes a port (a subset of struct ibv_port_attr).
type PortAttr struct {
	State      PortState
	MaxMTU     MTU
	ActiveMTU  MTU
	GIDTblLen  int
	PKeyTblLen int
	LinkMTU    int // the interface MTU
}

// DeviceAttr describes a device (a subset of struct ibv_device_attr).
type DeviceAttr struct {
	MaxQP            int
	MaxQPWR          int
	MaxSGE           int
	MaxInlineData    int
	MaxCQ            int
	MaxCQE           int
	MaxMR            int
	MaxPD            int
	MaxQPRdAtom      int
	MaxQPInitRdAtom  int
	MaxSRQ           int
	MaxSRQWR         int
	MaxMsgSize       uint64
	PhysPortCnt      int
	AtomicCapability string
	// Multicast limits: groups, QPs attached to one group, attachments
	// in all.
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
}
