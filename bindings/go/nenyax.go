package nenyax

/*
#include <stdlib.h>
#include "nenyax.h"

#if NENYAX_VERSION_MAJOR != 0
#error "this Go package speaks the nenyax C ABI 0.x; the nenyax.h found has another major version"
#endif
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"
)

// HeaderVersion is the version of nenyax.h this package was compiled against.
const HeaderVersion = C.NENYAX_VERSION_STRING

// Version returns the version of the linked library, e.g. "0.1.0".
func Version() string { return C.GoString(C.nenyax_version()) }

// VersionNumber returns the linked library's version as MAJOR*1000000 + MINOR*1000 + PATCH.
func VersionNumber() uint32 { return uint32(C.nenyax_version_number()) }

// ProtocolVersion returns the contract version the library writes, e.g. "0.1".
func ProtocolVersion() string { return C.GoString(C.nenyax_protocol_version()) }

func init() {
	// 0.x: a new minor version may change the ABI, so MAJOR.MINOR must match. Only a
	// dynamically linked library can differ from the header.
	const header = uint32(C.NENYAX_VERSION_NUMBER)
	if lib := VersionNumber(); lib/1000 != header/1000 {
		panic(fmt.Sprintf("nenyax: the linked libnenyax is %s but this package was compiled against nenyax.h %s",
			Version(), HeaderVersion))
	}
}

// Status is the stable code of an error, mirroring nenyax_status_t.
type Status int32

// The statuses of nenyax_status_t; values are never reused or renumbered.
const (
	StatusOK                Status = C.NENYAX_STATUS_OK
	StatusInvalidArgument   Status = C.NENYAX_STATUS_INVALID_ARGUMENT
	StatusInvalidURI        Status = C.NENYAX_STATUS_INVALID_URI
	StatusUnknownScheme     Status = C.NENYAX_STATUS_UNKNOWN_SCHEME
	StatusDriverUnavailable Status = C.NENYAX_STATUS_DRIVER_UNAVAILABLE
	StatusUnknownTarget     Status = C.NENYAX_STATUS_UNKNOWN_TARGET
	StatusUnknownParameter  Status = C.NENYAX_STATUS_UNKNOWN_PARAMETER
	StatusInvalidParameter  Status = C.NENYAX_STATUS_INVALID_PARAMETER
	StatusUnsupported       Status = C.NENYAX_STATUS_UNSUPPORTED
	StatusPolicyMismatch    Status = C.NENYAX_STATUS_POLICY_MISMATCH
	StatusPolicy            Status = C.NENYAX_STATUS_POLICY
	StatusInvalidAction     Status = C.NENYAX_STATUS_INVALID_ACTION
	StatusEnvironment       Status = C.NENYAX_STATUS_ENVIRONMENT
	StatusNonFiniteScore    Status = C.NENYAX_STATUS_NON_FINITE_SCORE
	StatusJudge             Status = C.NENYAX_STATUS_JUDGE
	StatusDefine            Status = C.NENYAX_STATUS_DEFINE
	StatusEndpoint          Status = C.NENYAX_STATUS_ENDPOINT
	StatusProtocol          Status = C.NENYAX_STATUS_PROTOCOL
	StatusConfig            Status = C.NENYAX_STATUS_CONFIG
	StatusIO                Status = C.NENYAX_STATUS_IO
	StatusCallback          Status = C.NENYAX_STATUS_CALLBACK
	StatusPanic             Status = C.NENYAX_STATUS_PANIC
	StatusCudaUnavailable   Status = C.NENYAX_STATUS_CUDA_UNAVAILABLE
	StatusCuda              Status = C.NENYAX_STATUS_CUDA
	StatusCapacity          Status = C.NENYAX_STATUS_CAPACITY
	StatusTraining          Status = C.NENYAX_STATUS_TRAINING
)

var statusNames = [...]string{
	"OK", "InvalidArgument", "InvalidURI", "UnknownScheme", "DriverUnavailable",
	"UnknownTarget", "UnknownParameter", "InvalidParameter", "Unsupported", "PolicyMismatch",
	"Policy", "InvalidAction", "Environment", "NonFiniteScore", "Judge", "Define", "Endpoint",
	"Protocol", "Config", "IO", "Callback", "Panic", "CudaUnavailable", "Cuda", "Capacity", "Training",
}

func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", int32(s))
}

// Error is a failure reported by the library: a stable Status and a readable Message (the
// library's message, which starts with the error kind, e.g. "UnknownParameter: ...").
// Err is the Go error behind a StatusCallback failure (e.g. what a Run callback returned).
type Error struct {
	Status  Status
	Message string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil && e.Status == StatusCallback {
		return "nenyax: " + e.Message + ": " + e.Err.Error()
	}
	return "nenyax: " + e.Message
}

// Unwrap returns the Go error behind a callback failure, if any.
func (e *Error) Unwrap() error { return e.Err }

// IsStatus reports whether err is (or wraps) a *Error with the given status.
func IsStatus(err error, status Status) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// takeError converts a C error into a Go one and frees the C object at once.
func takeError(e *C.nenyax_error_t) error {
	if e == nil {
		return nil
	}
	defer C.nenyax_error_free(e)
	var n C.size_t
	msg := C.nenyax_error_message(e, &n)
	return &Error{Status: Status(C.nenyax_error_code(e)), Message: C.GoStringN(msg, C.int(n))}
}

func closedError(what string) error {
	return &Error{Status: StatusInvalidArgument, Message: "use of a closed " + what}
}

var emptyInput = [1]byte{}

// input passes a Go string to C as (ptr, len) without copying; C only reads it during the
// call. An empty string is a valid pointer with length 0.
func input(s string) (*C.char, C.size_t) {
	if len(s) == 0 {
		return (*C.char)(unsafe.Pointer(&emptyInput[0])), 0
	}
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

// optJSON marshals optional options; nil (or an empty result) passes NULL for the defaults.
func optJSON(v any) (string, error) {
	if v == nil {
		return "", nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", &Error{Status: StatusInvalidArgument, Message: "options do not encode as JSON: " + err.Error()}
	}
	if string(b) == "null" {
		return "", nil
	}
	return string(b), nil
}

// optInput is input for optional JSON: an empty string is NULL (the defaults).
func optInput(s string) (*C.char, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	return input(s)
}

// takeBytes copies a library string and frees it.
func takeBytes(s *C.nenyax_string_t) []byte {
	defer C.nenyax_string_free(s)
	if s.ptr == nil {
		return nil
	}
	return C.GoBytes(unsafe.Pointer(s.ptr), C.int(s.len))
}

func decode(what string, data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return &Error{Status: StatusProtocol, Message: fmt.Sprintf("the library's %s JSON does not decode: %v", what, err)}
	}
	return nil
}
