package main

import (
	"fmt"
	"io"
	"strings"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/tokentop/tokentop/tui"
)

// asciiLocale reports whether the locale says the terminal cannot show
// UTF-8: LC_ALL, else LC_CTYPE, else LANG names a charset other than
// UTF-8 ("C", "POSIX", "en_US.ISO-8859-1"). An unset locale is not taken
// as such: SSH often does not forward LANG to terminals that are UTF-8.
func asciiLocale(getenv func(string) string) bool {
	loc := ""
	for _, name := range []string{"LC_ALL", "LC_CTYPE", "LANG"} {
		if v := getenv(name); v != "" {
			loc = v
			break
		}
	}
	if loc == "" {
		return false
	}
	l := strings.ToLower(loc)
	return !strings.Contains(l, "utf-8") && !strings.Contains(l, "utf8")
}

// printSummary leaves the console's one-screen summary on the terminal
// after it quit, unless the report is going to stdout (the summary would
// corrupt it).
func printSummary(w io.Writer, final tea.Model, reportPath string) {
	m, ok := final.(tui.Model)
	if !ok || reportPath == "-" {
		return
	}
	if s := m.Summary(); s != "" {
		fmt.Fprint(w, s)
	}
}
