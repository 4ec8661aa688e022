package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// buildInfo is what a binary knows of how it was built.
type buildInfo struct {
	Version  string // the module version, or "devel"
	Commit   string // the VCS revision; empty when not stamped
	Time     string // the commit's time (RFC 3339); may be empty
	Modified bool   // built from a tree with uncommitted changes
	Go       string // the Go version and platform
}

// readBuildInfo reads the build information go build embeds: the module
// version (a tag, a pseudo-version, or "(devel)"), and the VCS settings,
// present when built from a checkout with stamping on (make build).
func readBuildInfo() buildInfo {
	b := buildInfo{Version: "devel", Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		b.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// version is the module version the binary was built from, or "devel".
func version() string { return readBuildInfo().Version }

// versionText is what bcpgw version and bcpgw --version print: the
// version, the commit (and whether the tree had uncommitted changes) and
// the Go version.
func versionText() string {
	b := readBuildInfo()
	var s strings.Builder
	fmt.Fprintf(&s, "%s %s\n", programName, b.Version)
	switch {
	case b.Commit == "":
		s.WriteString("commit unknown (built without version control information: make build in a git checkout stamps it)\n")
	default:
		fmt.Fprintf(&s, "commit %s", b.Commit)
		if b.Time != "" {
			fmt.Fprintf(&s, " (%s)", b.Time)
		}
		if b.Modified {
			s.WriteString(", dirty: built with uncommitted changes")
		}
		s.WriteString("\n")
	}
	fmt.Fprintf(&s, "built with %s\n", b.Go)
	return s.String()
}

// addVersion gives root a --version flag and a version command, both
// printing versionText.
func addVersion(root *cobra.Command) {
	root.Version = versionText()
	root.SetVersionTemplate("{{.Version}}")
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionText())
			return err
		},
	})
}
