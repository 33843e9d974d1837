package nenyax

/*
#include "nenyax.h"
*/
import "C"

import "unsafe"

// The plugin ABI of nenyax.h (docs/plugins-abi.md), taken from the header by cgo.
const (
	// PluginABIVersion is NENYAX_PLUGIN_ABI_VERSION, the version of the plugin descriptor.
	PluginABIVersion = C.NENYAX_PLUGIN_ABI_VERSION
	// JudgeVtableVersion is NENYAX_JUDGE_VTABLE_VERSION, the version of a judge plugin's vtable.
	JudgeVtableVersion = C.NENYAX_JUDGE_VTABLE_VERSION
	// LearnerPluginVtableVersion is NENYAX_LEARNER_PLUGIN_VTABLE_VERSION, the version of a
	// learner plugin's vtable.
	LearnerPluginVtableVersion = C.NENYAX_LEARNER_PLUGIN_VTABLE_VERSION
	// PluginThreadSafe is NENYAX_PLUGIN_THREAD_SAFE: the plugin's callbacks may run concurrently.
	PluginThreadSafe = C.NENYAX_PLUGIN_THREAD_SAFE
	// PluginKindJudge is NENYAX_PLUGIN_KIND_JUDGE, the kind code of judge plugins.
	PluginKindJudge = C.NENYAX_PLUGIN_KIND_JUDGE
	// TelemetryVtableVersion is NENYAX_TELEMETRY_VTABLE_VERSION, the version of a telemetry sink plugin's vtable.
	TelemetryVtableVersion = C.NENYAX_TELEMETRY_VTABLE_VERSION
	// HubVtableVersion is NENYAX_HUB_VTABLE_VERSION, the version of a hub plugin's vtable.
	HubVtableVersion = C.NENYAX_HUB_VTABLE_VERSION
	// PluginKindTelemetry is NENYAX_PLUGIN_KIND_TELEMETRY, the kind code of telemetry sink plugins.
	PluginKindTelemetry = C.NENYAX_PLUGIN_KIND_TELEMETRY
	// PluginKindHub is NENYAX_PLUGIN_KIND_HUB, the kind code of hub plugins.
	PluginKindHub = C.NENYAX_PLUGIN_KIND_HUB
	// DriverVtableVersion is NENYAX_DRIVER_VTABLE_VERSION, the version of an in-process driver's vtable.
	DriverVtableVersion = C.NENYAX_DRIVER_VTABLE_VERSION
	// SandboxVtableVersion is NENYAX_SANDBOX_VTABLE_VERSION, the version of a sandbox backend's vtable.
	SandboxVtableVersion = C.NENYAX_SANDBOX_VTABLE_VERSION
	// IsolationProcess is NENYAX_ISOLATION_PROCESS, a sandbox plugin's level: a limited process group.
	IsolationProcess = C.NENYAX_ISOLATION_PROCESS
	// IsolationJail is NENYAX_ISOLATION_JAIL, a sandbox plugin's level: namespaces and a private file system view.
	IsolationJail = C.NENYAX_ISOLATION_JAIL
	// IsolationContainer is NENYAX_ISOLATION_CONTAINER, a sandbox plugin's level: containers of images.
	IsolationContainer = C.NENYAX_ISOLATION_CONTAINER
	// IsolationMicrovm is NENYAX_ISOLATION_MICROVM, a sandbox plugin's level: guest kernels.
	IsolationMicrovm = C.NENYAX_ISOLATION_MICROVM
)

// LoadPlugin loads a plugin library (a shared library exporting nenyax_plugin_entry) and
// registers the plugins it lists; loading the same file again does nothing.
func LoadPlugin(path string) error {
	p, n := input(path)
	return takeError(C.nenyax_plugin_load(p, n))
}

// RegisterPlugin registers a plugin implemented in C in this process: descriptor points to a
// nenyax_plugin_t (see nenyax.h), which is copied; its user_data must stay valid for the life
// of the process. A Go implementation needs cgo-exported callbacks in its vtable.
func RegisterPlugin(descriptor unsafe.Pointer) error {
	return takeError(C.nenyax_plugin_register((*C.nenyax_plugin_t)(descriptor)))
}

// PluginsJSON lists the plugins loaded or registered so far:
// [{"kind", "name", "version", "source"}].
func PluginsJSON() (string, error) {
	var out C.nenyax_string_t
	if err := takeError(C.nenyax_plugins_json(&out)); err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}

// CheckPlugin holds a plugin to its kind's conformance checks, as `nenyax plugin-check` does:
// the JSON report when it conforms, an error (status CONFIG) naming every failed check when not.
func CheckPlugin(kind, name string) (string, error) {
	k, kn := input(kind)
	nm, nn := input(name)
	var out C.nenyax_string_t
	if err := takeError(C.nenyax_plugin_check(k, kn, nm, nn, &out)); err != nil {
		return "", err
	}
	return string(takeBytes(&out)), nil
}
