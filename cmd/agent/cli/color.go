package cli

// colors styles text with SGR codes when enabled (a terminal, no NO_COLOR,
// not TERM=dumb) and returns it unchanged otherwise. The text it is given
// is already escaped (termtext), so these are the only sequences written.
type colors struct{ on bool }

func (c colors) sgr(code, s string) string {
	if !c.on || s == "" {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func (c colors) Bold(s string) string   { return c.sgr("1", s) }
func (c colors) Dim(s string) string    { return c.sgr("2", s) }
func (c colors) Red(s string) string    { return c.sgr("31", s) }
func (c colors) Green(s string) string  { return c.sgr("32", s) }
func (c colors) Yellow(s string) string { return c.sgr("33", s) }
func (c colors) Cyan(s string) string   { return c.sgr("36", s) }

// State colours a task state the way gh colours issue states.
func (c colors) State(s string) string {
	switch s {
	case "merged", "review":
		return c.Green(s)
	case "kept":
		return c.Cyan(s)
	case "running", "created", "interrupted":
		return c.Yellow(s)
	case "failed":
		return c.Red(s)
	case "discarded":
		return c.Dim(s)
	}
	return s
}

// Verdict colours a doctor verdict.
func (c colors) Verdict(v string) string {
	switch v {
	case VerdictOK:
		return c.Green(v)
	case VerdictWarn:
		return c.Yellow(v)
	case VerdictFail:
		return c.Red(v)
	}
	return v
}

// DiffLine colours one line of a unified diff like git does.
func (c colors) DiffLine(l string) string {
	switch {
	case len(l) >= 3 && (l[:3] == "+++" || l[:3] == "---"):
		return c.Bold(l)
	case len(l) >= 4 && l[:4] == "diff":
		return c.Bold(l)
	case len(l) >= 2 && l[:2] == "@@":
		return c.Cyan(l)
	case len(l) >= 1 && l[0] == '+':
		return c.Green(l)
	case len(l) >= 1 && l[0] == '-':
		return c.Red(l)
	}
	return l
}
