package notify

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The notifications section of docs/operating.md stays true: its example
// file loads, the kinds it names exist, and its verification snippets,
// in Go and in Python, accept what the notifier signs and refuse a
// tampered body.

const operatingPage = "../../docs/operating.md"

// docBlocks returns the fenced blocks of lang in the notifications
// section of the page.
func docBlocks(t *testing.T, lang string) (section string, blocks []string) {
	t.Helper()
	b, err := os.ReadFile(operatingPage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	start := strings.Index(page, "### Notifications")
	if start < 0 {
		t.Fatal("docs/operating.md has no Notifications section")
	}
	section = page[start:]
	if end := strings.Index(section[3:], "\n### "); end >= 0 {
		section = section[:end+3]
	}
	re := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```")
	for _, m := range re.FindAllStringSubmatch(section, -1) {
		blocks = append(blocks, m[1])
	}
	return section, blocks
}

func TestDocsNotifyFileLoads(t *testing.T) {
	section, blocks := docBlocks(t, "yaml")
	if len(blocks) == 0 {
		t.Fatal("no yaml block in the Notifications section")
	}
	for _, b := range blocks {
		ts, err := Parse("operating.md", []byte(b), func(name string) string {
			if strings.HasSuffix(name, "_URL") {
				return "https://hooks.slack.com/services/T/B/X"
			}
			return testSecret()
		})
		if err != nil {
			t.Errorf("the example notify file does not load:\n%v", err)
			continue
		}
		if len(ts.List) != 3 || ts.List[0].Format != FormatNtfy || ts.List[1].Format != FormatSlack || !ts.List[2].Signed() {
			t.Errorf("the example's targets: %v", ts.Names())
		}
	}
	// Every kind of the table exists (or is a refusal code).
	rows := regexp.MustCompile("(?m)^\\| (`[^|]+)\\|").FindAllStringSubmatch(section, -1)
	if len(rows) < 5 {
		t.Fatalf("found %d rows in the kinds table", len(rows))
	}
	for _, row := range rows {
		for _, k := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(row[1], -1) {
			if strings.HasPrefix(k[1], "bcpgw_") {
				continue // the metrics table, in the next section
			}
			if err := CheckPattern(k[1]); err != nil {
				t.Errorf("docs name kind %s: %v", k[1], err)
			}
		}
	}
}

// signedSample is a notification as the notifier signs it.
func signedSample() (id, ts, sig string, body []byte) {
	body = []byte(`{"id":"bcpgw-0123456789abcdef-42","seq":42,"kind":"approval_queued"}`)
	id, ts = "bcpgw-0123456789abcdef-42", "1760000000"
	return id, ts, Sign(testKey, id, 1760000000, body), body
}

func TestDocsPythonVerifies(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	_, blocks := docBlocks(t, "python")
	if len(blocks) != 1 {
		t.Fatalf("%d python blocks, want 1", len(blocks))
	}
	id, ts, sig, body := signedSample()
	headers, _ := json.Marshal(map[string]string{"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": "v1,bm9wZQ== " + sig})
	script := blocks[0] + `
import json, sys, time
time.time = lambda: 1760000010
headers = json.loads(sys.argv[2])
verify(sys.argv[1], headers, sys.argv[3].encode())
try:
    verify(sys.argv[1], headers, sys.argv[3].encode() + b" ")
except ValueError:
    print("ok")
`
	out, err := exec.Command(py, "-c", script, testSecret(), string(headers), string(body)).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("the Python snippet: %v\n%s", err, out)
	}
}

func TestDocsGoVerifies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go")
	}
	_, blocks := docBlocks(t, "go")
	if len(blocks) != 1 {
		t.Fatalf("%d go blocks, want 1", len(blocks))
	}
	dir := t.TempDir()
	id, _, _, body := signedSample()
	src := `package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

` + blocks[0] + `
func main() {
	h := http.Header{}
	h.Set("webhook-id", os.Args[2])
	h.Set("webhook-timestamp", os.Args[3])
	h.Set("webhook-signature", os.Args[4])
	body := []byte(os.Args[5])
	if err := verify(os.Args[1], h, body); err != nil {
		fmt.Println("refused:", err)
		os.Exit(1)
	}
	if verify(os.Args[1], h, append(body, ' ')) == nil {
		fmt.Println("a tampered body verified")
		os.Exit(1)
	}
	fmt.Println("ok")
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module verify\n\ngo 1.24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The snippet refuses stale timestamps: sign the sample now.
	now := time.Now().Unix()
	sig := Sign(testKey, id, now, body)
	ts := strconv.FormatInt(now, 10)
	cmd := exec.Command(goBin, "run", ".", testSecret(), id, ts, sig, string(body))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("the Go snippet: %v\n%s", err, out)
	}
}
