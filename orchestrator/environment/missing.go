package environment

import (
	"fmt"
	"regexp"
	"strings"
)

// notFoundRe finds the program a shell could not run: bash says
// "bash: line 1: go: command not found", dash "sh: 1: go: not found",
// env "env: 'go': No such file or directory".
var notFoundRe = []*regexp.Regexp{
	regexp.MustCompile(`(?m)^(?:[^:\n]*: )?(?:line \d+: |\d+: )?([A-Za-z0-9_.+-]+): (?:command )?not found\s*$`),
	regexp.MustCompile(`(?m)env: '?([A-Za-z0-9_.+-]+)'?: No such file or directory`),
}

// MissingProgram returns the program an exit-127 command's output says
// was not found, or "".
func MissingProgram(output string) string {
	for _, re := range notFoundRe {
		if m := re.FindAllStringSubmatch(output, -1); len(m) > 0 {
			return m[len(m)-1][1]
		}
	}
	return ""
}

// debianPackageOf maps common programs to the Debian package that has them.
var debianPackageOf = map[string]string{
	"go": "golang-go", "gofmt": "golang-go", "python3": "python3", "python": "python-is-python3",
	"pip": "python3-pip", "pip3": "python3-pip", "pytest": "python3-pytest", "pytest-3": "python3-pytest",
	"node": "nodejs", "npm": "npm", "npx": "npm", "cargo": "cargo", "rustc": "rustc",
	"make": "make", "gcc": "gcc", "cc": "gcc", "g++": "g++", "c++": "g++", "clang": "clang",
	"cmake": "cmake", "java": "default-jdk-headless", "javac": "default-jdk-headless", "mvn": "maven",
	"ruby": "ruby", "curl": "curl", "wget": "wget", "jq": "jq", "rg": "ripgrep", "zip": "zip", "unzip": "unzip",
	"perl": "perl", "php": "php-cli", "sqlite3": "sqlite3",
}

// MissingNote is the note added to an exit-127 result: which program was
// missing and how to put it into the sandbox.
func MissingNote(output string) string {
	prog := MissingProgram(output)
	if prog == "" {
		return "note: exit status 127 means a program was not found in the sandbox image; add the Debian package that provides it to `packages:` in " + File + " (see `agent env init`)"
	}
	pkg := debianPackageOf[prog]
	if pkg == "" {
		pkg = "the Debian package that provides it"
	} else {
		pkg = "`" + pkg + "`"
	}
	return fmt.Sprintf("note: %q is not installed in the sandbox image (exit status 127); add %s to `packages:` in %s, then the next task builds an image with it (`agent env build` builds it now)", strings.TrimSpace(prog), pkg, File)
}
