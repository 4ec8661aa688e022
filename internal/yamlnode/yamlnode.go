// Package yamlnode holds what the YAML files of bcpgw (agent definitions,
// the notify file) share in reading yaml.Node trees for errors that name
// their line.
package yamlnode

import "gopkg.in/yaml.v3"

// Describe names a node's kind for error messages: "a map", "a list",
// "an integer", "a string"...
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	switch n.Tag {
	case "!!null":
		return "nothing"
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	}
	return "a string"
}
