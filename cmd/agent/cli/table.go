package cli

import (
	"io"
	"strings"

	"github.com/charmbracelet/x/ansi"
)

// table prints aligned columns that fit a width: when a row is too wide,
// the flexible column (the last one, usually a prompt or a detail) is cut
// first, then the whole line. Cells may hold colour; widths are measured
// without it. Cells must already be escaped.
type table struct {
	w     io.Writer
	width int // 0: no limit
	rows  [][]string
}

func (t *table) row(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) flush() error {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r[:max(len(r)-1, 0)] {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], ansi.StringWidth(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		var line strings.Builder
		for i, c := range r {
			if i == len(r)-1 {
				if t.width > 0 {
					c = fit(c, max(t.width-ansi.StringWidth(line.String()), 1))
				}
				line.WriteString(c)
				break
			}
			line.WriteString(c)
			line.WriteString(strings.Repeat(" ", widths[i]-ansi.StringWidth(c)+2))
		}
		b.WriteString(fit(strings.TrimRight(line.String(), " "), t.width))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(t.w, b.String())
	return err
}
