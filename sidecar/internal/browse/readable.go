package browse

import (
	"bytes"
	"io"
	"net/url"
	"strings"
	"unicode"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
	"golang.org/x/net/html/charset"
)

// Page is the readable part of an HTML document.
type Page struct {
	Title string
	Text  string // paragraphs separated by blank lines, list items as "- …"
	Links []Link // http(s) links in document order, without duplicates
}

// Link is one hyperlink.
type Link struct {
	Text string
	URL  string // absolute
}

// maxLinks bounds the links kept from one page.
const maxLinks = 200

// skipped are elements whose content is never text a reader wants: code, styling,
// embedded objects, and page furniture (navigation, forms, asides).
var skipped = map[atom.Atom]bool{
	atom.Script: true, atom.Style: true, atom.Noscript: true, atom.Template: true,
	atom.Svg: true, atom.Math: true, atom.Iframe: true, atom.Object: true, atom.Embed: true,
	atom.Canvas: true, atom.Head: true, atom.Nav: true, atom.Form: true, atom.Button: true,
	atom.Select: true, atom.Textarea: true, atom.Input: true, atom.Aside: true,
	atom.Footer: true, atom.Dialog: true, atom.Audio: true, atom.Video: true,
}

// blocks start and end a paragraph.
var blocks = map[atom.Atom]bool{
	atom.P: true, atom.Div: true, atom.Section: true, atom.Article: true, atom.Main: true,
	atom.Header: true, atom.H1: true, atom.H2: true, atom.H3: true, atom.H4: true,
	atom.H5: true, atom.H6: true, atom.Ul: true, atom.Ol: true, atom.Li: true,
	atom.Dl: true, atom.Dt: true, atom.Dd: true, atom.Blockquote: true, atom.Pre: true,
	atom.Table: true, atom.Tr: true, atom.Figure: true, atom.Figcaption: true,
	atom.Address: true, atom.Details: true, atom.Summary: true, atom.Hr: true, atom.Body: true,
}

// Readable parses an HTML document (in the charset its bytes, meta tags or
// contentType declare) and returns its title, readable text and links. Relative links
// are resolved against base (and the document's <base href>). Scripts, styles,
// navigation, forms, asides, footers and hidden elements are left out; when the page
// has a <main> (or else exactly one <article>) only that is read, as the rest is
// usually furniture.
func Readable(body []byte, contentType string, base *url.URL) (Page, error) {
	r, err := charset.NewReader(bytes.NewReader(body), contentType)
	if err != nil {
		r = bytes.NewReader(body) // unknown charset: read it as UTF-8
	}
	doc, err := html.Parse(r)
	if err != nil {
		return Page{}, err
	}
	ex := &extractor{base: base, seen: map[string]bool{}}
	if b := find(doc, atom.Base); b != nil {
		if href := attr(b, "href"); href != "" && base != nil {
			if u, err := base.Parse(href); err == nil {
				ex.base = u
			}
		}
	}
	var p Page
	if t := find(doc, atom.Title); t != nil {
		p.Title = collapse(textOf(t))
	}
	root := find(doc, atom.Main)
	if root == nil {
		if arts := findAll(doc, atom.Article); len(arts) == 1 {
			root = arts[0]
		}
	}
	if root == nil {
		root = find(doc, atom.Body)
	}
	if root == nil {
		root = doc
	}
	ex.walk(root)
	ex.flush(true)
	p.Text = strings.Join(ex.paras, "\n\n")
	p.Links = ex.links
	return p, nil
}

type extractor struct {
	base   *url.URL
	paras  []string
	cur    strings.Builder // the paragraph being written, whitespace not yet collapsed
	pre    int             // depth inside <pre>
	prefix string          // what starts the current paragraph ("- ", "## ")
	links  []Link
	seen   map[string]bool
}

// flush ends the paragraph being written. The prefix a block set (a list item's
// "- ") waits for the block's first text unless the block itself ends.
func (e *extractor) flush(end bool) {
	var s string
	if e.pre > 0 {
		s = strings.Trim(e.cur.String(), "\n")
	} else {
		s = collapse(e.cur.String())
	}
	if s != "" {
		e.paras = append(e.paras, e.prefix+s)
	}
	e.cur.Reset()
	if s != "" || end {
		e.prefix = ""
	}
}

func (e *extractor) walk(n *html.Node) {
	switch n.Type {
	case html.TextNode:
		e.cur.WriteString(n.Data)
		return
	case html.ElementNode:
		if skipped[n.DataAtom] || hidden(n) {
			return
		}
	case html.CommentNode, html.DoctypeNode:
		return
	}
	block := n.Type == html.ElementNode && blocks[n.DataAtom]
	if block {
		e.flush(false)
		switch n.DataAtom {
		case atom.Li:
			e.prefix = "- "
		case atom.H1:
			e.prefix = "# "
		case atom.H2:
			e.prefix = "## "
		case atom.H3, atom.H4, atom.H5, atom.H6:
			e.prefix = "### "
		case atom.Blockquote:
			e.prefix = "> "
		case atom.Pre:
			e.pre++
		}
	}
	switch n.DataAtom {
	case atom.Br:
		e.cur.WriteString("\n")
	case atom.Td, atom.Th:
		e.cur.WriteString(" | ")
	case atom.Img:
		if alt := collapse(attr(n, "alt")); alt != "" {
			e.cur.WriteString(" [image: " + alt + "] ")
		}
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		e.walk(c)
	}
	if n.Type == html.ElementNode && n.DataAtom == atom.A {
		e.addLink(n)
	}
	if block {
		e.flush(true)
		if n.DataAtom == atom.Pre {
			e.pre--
		}
	}
}

func (e *extractor) addLink(n *html.Node) {
	href := strings.TrimSpace(attr(n, "href"))
	if href == "" || len(e.links) >= maxLinks {
		return
	}
	u, err := url.Parse(href)
	if err != nil {
		return
	}
	if e.base != nil {
		u = e.base.ResolveReference(u)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return // javascript:, mailto:, data: and relative links without a base
	}
	u.Fragment = ""
	s := u.String()
	if e.seen[s] {
		return
	}
	e.seen[s] = true
	text := collapse(textOf(n))
	if text == "" {
		text = collapse(attr(n, "title"))
	}
	e.links = append(e.links, Link{Text: text, URL: s})
}

// hidden reports whether the author hid n from readers.
func hidden(n *html.Node) bool {
	for _, a := range n.Attr {
		switch strings.ToLower(a.Key) {
		case "hidden":
			return true
		case "aria-hidden":
			if strings.EqualFold(strings.TrimSpace(a.Val), "true") {
				return true
			}
		case "style":
			st := strings.ToLower(strings.ReplaceAll(a.Val, " ", ""))
			if strings.Contains(st, "display:none") || strings.Contains(st, "visibility:hidden") {
				return true
			}
		}
	}
	return false
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Namespace == "" && strings.EqualFold(a.Key, key) {
			return a.Val
		}
	}
	return ""
}

// textOf is all text below n except in skipped elements.
func textOf(n *html.Node) string {
	var b strings.Builder
	var rec func(*html.Node)
	rec = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
			b.WriteByte(' ')
			return
		}
		if n.Type == html.ElementNode && n.DataAtom != atom.Title && (skipped[n.DataAtom] || hidden(n)) {
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			rec(c)
		}
	}
	rec(n)
	return b.String()
}

func find(n *html.Node, a atom.Atom) *html.Node {
	if n.Type == html.ElementNode && n.DataAtom == a {
		return n
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if f := find(c, a); f != nil {
			return f
		}
	}
	return nil
}

func findAll(n *html.Node, a atom.Atom) []*html.Node {
	var out []*html.Node
	var rec func(*html.Node)
	rec = func(n *html.Node) {
		if n.Type == html.ElementNode && n.DataAtom == a {
			out = append(out, n)
			return
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			rec(c)
		}
	}
	rec(n)
	return out
}

// collapse folds runs of whitespace and control characters into single spaces.
func collapse(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
}

// plain is text of a non-HTML page, decoded from its charset, with control
// characters other than newlines and tabs removed.
func plain(body []byte, contentType string) string {
	var r io.Reader = bytes.NewReader(body)
	if dr, err := charset.NewReader(r, contentType); err == nil {
		r = dr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		b = body
	}
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return -1
	}, strings.ToValidUTF8(string(b), "\uFFFD"))
}
