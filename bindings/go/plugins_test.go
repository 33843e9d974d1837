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

func TestCheckPluginHoldsAJudgeToItsKindsChecks(t *testing.T) {
	report, err := CheckPlugin("judge", "exact")
	if err != nil || !strings.Contains(report, `"name":"discriminates","passed":true`) {
		t.Fatalf("CheckPlugin(judge, exact): %q, %v", report, err)
	}
	_, err = CheckPlugin("judge", "no_such_judge")
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusConfig || !strings.Contains(e.Message, "no judge `no_such_judge`") {
		t.Fatalf("CheckPlugin of an unknown judge: %v", err)
	}
}
