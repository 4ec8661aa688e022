// Command probert is a runtime for bcpgw's end-to-end tests of what a
// sandbox lets a runtime do (the TriOnyx compatibility tests: fs_read,
// fs_write and network enforced). It is built by the tests that use it and
// never installed. When it starts, before it says ready, it runs the
// probes of PROBERT_PROBES in order and appends one JSON line per probe to
// PROBERT_LOG (a file it must be able to write, in its workdir), then
// behaves as a runtime that answers every turn with an empty result.
//
//	PROBERT_PROBES a JSON array of {op, path, data, target}:
//	  read     read the file path
//	  list     list the directory path
//	  write    create or replace the file path with data
//	  connect  ask the egress proxy in HTTPS_PROXY to CONNECT to target
//	           (host:port); without a proxy, dial target directly
//	PROBERT_LOG    required: where the results go, one
//	               {op, path, target, ok, error, status, data} per line
//	               (status: the proxy's HTTP status; data: what read got)
//
// The probes run once per process; the log of all of them is written
// with a final line {op: "done"}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/bcpgw/bcpgw/runtime"
)

type probe struct {
	Op     string `json:"op"`
	Path   string `json:"path,omitempty"`
	Data   string `json:"data,omitempty"`
	Target string `json:"target,omitempty"`
}

type outcome struct {
	probe
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	Status int    `json:"status,omitempty"`
}

func run(p probe) outcome {
	o := outcome{probe: p}
	var err error
	switch p.Op {
	case "read":
		var b []byte
		b, err = os.ReadFile(p.Path)
		o.Data = string(b)
	case "list":
		_, err = os.ReadDir(p.Path)
	case "write":
		err = os.WriteFile(p.Path, []byte(p.Data), 0o644)
	case "connect":
		o.Status, err = connect(p.Target)
	default:
		err = fmt.Errorf("unknown op %q", p.Op)
	}
	o.OK = err == nil
	if err != nil {
		o.Error = err.Error()
	}
	return o
}

// connect asks the proxy to CONNECT to target and returns its status.
func connect(target string) (int, error) {
	proxy := os.Getenv("HTTPS_PROXY")
	if proxy == "" {
		c, err := net.DialTimeout("tcp", target, 5*time.Second)
		if err != nil {
			return 0, err
		}
		return 0, c.Close()
	}
	u, err := url.Parse(proxy)
	if err != nil {
		return 0, err
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("proxy: %s", resp.Status)
	}
	return resp.StatusCode, nil
}

func main() {
	logPath := os.Getenv("PROBERT_LOG")
	if logPath == "" {
		fmt.Fprintln(os.Stderr, "probert: PROBERT_LOG is required")
		os.Exit(2)
	}
	var probes []probe
	if s := os.Getenv("PROBERT_PROBES"); s != "" {
		if err := json.Unmarshal([]byte(s), &probes); err != nil {
			fmt.Fprintln(os.Stderr, "probert: PROBERT_PROBES:", err)
			os.Exit(2)
		}
	}
	f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probert:", err)
		os.Exit(2)
	}
	enc := json.NewEncoder(f)
	for _, p := range probes {
		_ = enc.Encode(run(p))
	}
	_ = enc.Encode(outcome{probe: probe{Op: "done"}, OK: true})
	f.Close()
	runtime.Main(runtime.Handler{
		Prompt: func(context.Context, *runtime.Client, runtime.Prompt) error { return nil },
	})
}
