package agents

import (
	"bytes"

	meta "github.com/yuin/goldmark-meta"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/parser"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// frontmatter is the YAML block at the top of a definition, as found by
// goldmark-meta's block parser.
type frontmatter struct {
	yaml      []byte // the lines between the two --- lines
	closed    bool   // a closing --- line was found
	bodyStart int    // byte offset just past the closing --- line
}

var frontmatterKey = parser.NewContextKey()

// frontmatterParser lets goldmark-meta decide where the block starts and
// ends (its Open and Continue), but keeps the raw lines instead of letting
// meta's Close decode them with yaml.v2, which would lose line numbers and
// strictness. The block is decoded with yaml.v3 afterwards.
type frontmatterParser struct {
	meta parser.BlockParser
}

func (p frontmatterParser) Trigger() []byte { return p.meta.Trigger() }

// isFence reports whether line is exactly "---" (trailing white space
// allowed). goldmark-meta alone accepts any line of dashes, even indented,
// which would end the frontmatter inside a YAML block scalar or at a bare
// "-" list item.
func isFence(line []byte) bool {
	return string(bytes.TrimRight(line, " \t\r\n")) == "---"
}

func (p frontmatterParser) Open(parent ast.Node, r text.Reader, pc parser.Context) (ast.Node, parser.State) {
	if line, _ := r.PeekLine(); !isFence(line) {
		return nil, parser.NoChildren
	}
	n, st := p.meta.Open(parent, r, pc)
	if n != nil {
		pc.Set(frontmatterKey, &frontmatter{})
	}
	return n, st
}

func (p frontmatterParser) Continue(n ast.Node, r text.Reader, pc parser.Context) parser.State {
	line, seg := r.PeekLine()
	if !isFence(line) {
		n.Lines().Append(seg)
		return parser.Continue | parser.NoChildren
	}
	st := p.meta.Continue(n, r, pc)
	if st == parser.Close {
		fm := pc.Get(frontmatterKey).(*frontmatter)
		fm.closed = true
		fm.bodyStart = seg.Stop
	}
	return st
}

func (p frontmatterParser) Close(n ast.Node, r text.Reader, pc parser.Context) {
	fm := pc.Get(frontmatterKey).(*frontmatter)
	var buf bytes.Buffer
	lines := n.Lines()
	for i := 0; i < lines.Len(); i++ {
		seg := lines.At(i)
		buf.Write(seg.Value(r.Source()))
	}
	fm.yaml = buf.Bytes()
	n.Parent().RemoveChild(n.Parent(), n)
}

func (p frontmatterParser) CanInterruptParagraph() bool { return false }
func (p frontmatterParser) CanAcceptIndentedLine() bool { return false }

// markdownParser knows only the frontmatter block and paragraphs: the body
// is kept verbatim as the system prompt, so nothing else needs parsing.
var markdownParser = parser.NewParser(
	parser.WithBlockParsers(
		util.Prioritized(frontmatterParser{meta: meta.NewParser()}, 0),
		util.Prioritized(parser.NewParagraphParser(), 1000),
	),
)

// findFrontmatter returns the frontmatter block of src, or nil if src does
// not start with one.
func findFrontmatter(src []byte) *frontmatter {
	pc := parser.NewContext()
	markdownParser.Parse(text.NewReader(src), parser.WithContext(pc))
	fm, _ := pc.Get(frontmatterKey).(*frontmatter)
	return fm
}
