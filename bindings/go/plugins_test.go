package nenyax

import (
	"errors"
	"strings"
	"testing"
)

func TestPluginLoadErrorsAreTypedAndTheListIsJSON(t *testing.T) {
	err := LoadPlugin("/nonexistent/libnope.so")
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusConfig || !strings.Contains(e.Message, "cannot be read") {
		t.Fatalf("LoadPlugin of a missing file: %v", err)
	}
	if err := RegisterPlugin(nil); err == nil || !strings.Contains(err.Error(), "plugin is NULL") {
		t.Fatalf("RegisterPlugin(nil): %v", err)
	}
	list, err := PluginsJSON()
	if err != nil || !strings.HasPrefix(list, "[") {
		t.Fatalf("PluginsJSON: %q, %v", list, err)
	}
	if PluginABIVersion != 1 || JudgeVtableVersion != 1 || PluginKindJudge != 3 {
		t.Fatalf("constants: %d %d %d", PluginABIVersion, JudgeVtableVersion, PluginKindJudge)
	}
}
