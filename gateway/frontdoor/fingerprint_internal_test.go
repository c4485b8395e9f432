package frontdoor

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/gradiopool/gradiopool/gradio"
	"github.com/gradiopool/gradiopool/internal/logbuf"
)

// testConfig is a Gradio 5 config with endpoint /upper whose input is of
// type inType; the volatile fields come from the arguments.
func testConfig(t *testing.T, inType string, appID uint64, root, label string) *gradio.Config {
	t.Helper()
	raw := fmt.Sprintf(`{"version":"5.49.1","protocol":"sse_v3","api_prefix":"/gradio_api","app_id":%d,"root":%q,
		"components":[{"id":1,"type":%q,"props":{"label":%q}},{"id":2,"type":"textbox","props":{"label":"out"}},{"id":3,"type":"button","props":{}}],
		"dependencies":[{"id":0,"api_name":"upper","inputs":[1],"outputs":[2],"backend_fn":true,"types":{"generator":false}},
		{"id":1,"api_name":"count","inputs":[1],"outputs":[2],"backend_fn":true,"types":{"generator":true}}]}`, appID, root, inType, label)
	c, err := gradio.ParseConfig([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReferenceIsTheMajorityAndAFixedReplicaComesBack: the reference is
// the app most replicas serve, not merely the first listed; the odd
// replica is reported once, and serves again once its app matches.
func TestReferenceIsTheMajorityAndAFixedReplicaComesBack(t *testing.T) {
	var logs logbuf.Buffer
	f := newTestDoor(t, Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	odd := testConfig(t, "number", 1, "http://r0", "n")
	f.adopt([]candidate{{"r0", odd}, {"r1", testConfig(t, "textbox", 2, "http://r1", "a")}, {"r2", testConfig(t, "textbox", 3, "http://r2", "b")}}, "test")
	if f.fps.refReplica != "r1" {
		t.Errorf("reference %s, want r1 (two of three replicas serve its app)", f.fps.refReplica)
	}
	mm := f.mismatched()
	if len(mm) != 1 || mm["r0"] == nil || mm["r0"].Reference != "r1" {
		t.Fatalf("mismatched %v, want r0 against r1", mm)
	}
	err := f.checkApp("r0", odd)
	var me *mismatchError
	if !errors.As(err, &me) || !errors.Is(err, errConfigMismatch) || !strings.Contains(err.Error(), "replica r0 serves a different app than replica r1") {
		t.Errorf("checkApp(r0) = %v", err)
	}
	if n := strings.Count(logs.String(), `"level":"ERROR"`); n != 1 {
		t.Errorf("%d error lines, want 1 (once per config):\n%s", n, logs.String())
	}
	// r0 reconnects with the right app (a new config).
	if err := f.checkApp("r0", testConfig(t, "textbox", 4, "http://r0", "c")); err != nil {
		t.Errorf("r0 with the reference app: %v", err)
	}
	if mm := f.mismatched(); len(mm) != 0 {
		t.Errorf("mismatched %v after r0 was fixed", mm)
	}
	if !strings.Contains(logs.String(), "serves the reference app again") {
		t.Errorf("no log line says r0 is back:\n%s", logs.String())
	}
	if st := f.Stats(); len(st.Mismatched) != 0 {
		t.Errorf("stats %+v", st)
	}
}
