package cm

import "strconv"

// RejReason is a REJ's reason code.
type RejReason uint16

// REJ reasons, with the IBTA's numbers.
const (
	RejNoQP                     RejReason = 1
	RejNoEEC                    RejReason = 2
	RejNoResources              RejReason = 3
	RejTimeout                  RejReason = 4
	RejUnsupported              RejReason = 5
	RejInvalidCommID            RejReason = 6
	RejInvalidCommInstance      RejReason = 7
	RejInvalidServiceID         RejReason = 8
	RejInvalidTransportType     RejReason = 9
	RejStaleConn                RejReason = 10
	RejRDCNotExist              RejReason = 11
	RejInvalidGID               RejReason = 12
	RejInvalidLID               RejReason = 13
	RejInvalidSL                RejReason = 14
	RejInvalidTrafficClass      RejReason = 15
	RejInvalidHopLimit          RejReason = 16
	RejInvalidPacketRate        RejReason = 17
	RejInvalidAltGID            RejReason = 18
	RejInvalidAltLID            RejReason = 19
	RejInvalidAltSL             RejReason = 20
	RejInvalidAltTrafficClass   RejReason = 21
	RejInvalidAltHopLimit       RejReason = 22
	RejInvalidAltPacketRate     RejReason = 23
	RejPortCMRedirect           RejReason = 24
	RejPortRedirect             RejReason = 25
	RejInvalidMTU               RejReason = 26
	RejInsufficientRespRes      RejReason = 27
	RejConsumerDefined          RejReason = 28
	RejInvalidRNRRetry          RejReason = 29
	RejDuplicateLocalCommID     RejReason = 30
	RejInvalidClassVersion      RejReason = 31
	RejInvalidFlowLabel         RejReason = 32
	RejInvalidAltFlowLabel      RejReason = 33
	RejVendorOptionNotSupported RejReason = 35
)

var rejText = map[RejReason]string{
	RejNoQP:                     "no QP available",
	RejNoEEC:                    "no EE context available",
	RejNoResources:              "no resources available",
	RejTimeout:                  "timeout",
	RejUnsupported:              "unsupported request",
	RejInvalidCommID:            "invalid communication ID",
	RejInvalidCommInstance:      "invalid communication instance",
	RejInvalidServiceID:         "invalid service ID",
	RejInvalidTransportType:     "invalid transport service type",
	RejStaleConn:                "stale connection",
	RejRDCNotExist:              "RDC does not exist",
	RejInvalidGID:               "primary remote port GID rejected",
	RejInvalidLID:               "primary remote port LID rejected",
	RejInvalidSL:                "invalid primary SL",
	RejInvalidTrafficClass:      "invalid primary traffic class",
	RejInvalidHopLimit:          "invalid primary hop limit",
	RejInvalidPacketRate:        "invalid primary packet rate",
	RejInvalidAltGID:            "alternate remote port GID rejected",
	RejInvalidAltLID:            "alternate remote port LID rejected",
	RejInvalidAltSL:             "invalid alternate SL",
	RejInvalidAltTrafficClass:   "invalid alternate traffic class",
	RejInvalidAltHopLimit:       "invalid alternate hop limit",
	RejInvalidAltPacketRate:     "invalid alternate packet rate",
	RejPortCMRedirect:           "port and CM redirection",
	RejPortRedirect:             "port redirection not supported",
	RejInvalidMTU:               "invalid path MTU",
	RejInsufficientRespRes:      "insufficient responder resources",
	RejConsumerDefined:          "consumer reject",
	RejInvalidRNRRetry:          "invalid RNR retry count",
	RejDuplicateLocalCommID:     "duplicate local communication ID",
	RejInvalidClassVersion:      "invalid class version",
	RejInvalidFlowLabel:         "invalid primary flow label",
	RejInvalidAltFlowLabel:      "invalid alternate flow label",
	RejVendorOptionNotSupported: "vendor option not supported",
}

// String describes the reason in words, as "consumer reject".
func (r RejReason) String() string {
	if s, ok := rejText[r]; ok {
		return s
	}
	return "reject reason " + strconv.Itoa(int(r))
}
