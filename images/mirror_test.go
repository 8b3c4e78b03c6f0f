package images

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The host this project is developed on: deb822 file, with the security
// archive in a second stanza and snapshot URLs in comments.
const debianSources = `Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`

func TestHostMirror(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{
			name:  "deb822 host file",
			files: map[string]string{"sources.list.d/debian.sources": debianSources},
			want:  "http://deb.debian.org/debian",
		},
		{
			name: "deb822 security first, disabled and deb-src stanzas skipped",
			files: map[string]string{"sources.list.d/a.sources": `Types: deb
URIs: http://security.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Enabled: no
Types: deb
URIs: http://off.example/debian
Suites: bookworm

Types: deb
URIs:
 http://mirror.local/debian/
 http://second.local/debian
Suites: bookworm
`},
			want: "http://mirror.local/debian",
		},
		{
			name: "classic sources.list with options and comments",
			files: map[string]string{"sources.list": `# local mirror
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.corp:3142/debian bookworm main # comment
deb http://deb.debian.org/debian-security bookworm-security main
`},
			want: "http://mirror.corp:3142/debian",
		},
		{
			name: "deb822 wins over sources.list",
			files: map[string]string{
				"sources.list":                  "deb http://classic.example/debian bookworm main\n",
				"sources.list.d/debian.sources": debianSources,
			},
			want: "http://deb.debian.org/debian",
		},
		{
			name:  "only security and unusable schemes",
			files: map[string]string{"sources.list": "deb http://deb.debian.org/debian-security bookworm-security main\ndeb cdrom:[Debian]/ bookworm main\n"},
			want:  "",
		},
		{
			name:  "nothing configured",
			files: map[string]string{"other": ""},
			want:  "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeFiles(t, tt.files)
			got := hostMirror(filepath.Join(dir, "sources.list.d"), filepath.Join(dir, "sources.list"))
			if got != tt.want {
				t.Errorf("hostMirror = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestResolveMirror(t *testing.T) {
	dir := writeFiles(t, map[string]string{"sources.list": "deb http://host.mirror/debian bookworm main\n"})
	oldDir, oldList := aptSourcesDir, aptSourcesList
	t.Cleanup(func() { aptSourcesDir, aptSourcesList = oldDir, oldList })
	aptSourcesDir, aptSourcesList = filepath.Join(dir, "none"), filepath.Join(dir, "sources.list")

	if got, err := ResolveMirror("https://configured.example/debian/"); err != nil || got != "https://configured.example/debian" {
		t.Errorf("configured mirror: got %q, %v", got, err)
	}
	if got, err := ResolveMirror(""); err != nil || got != "http://host.mirror/debian" {
		t.Errorf("host mirror: got %q, %v", got, err)
	}
	aptSourcesList = filepath.Join(dir, "missing")
	if got, err := ResolveMirror(""); err != nil || got != DefaultMirror {
		t.Errorf("default mirror: got %q, %v", got, err)
	}
	for _, bad := range []string{"deb.debian.org/debian", "ftp://x/debian", `http://x/"debian`, "http://x/de bian"} {
		if _, err := ResolveMirror(bad); err == nil || !strings.Contains(err.Error(), "mirror") {
			t.Errorf("ResolveMirror(%q) = %v, want a clear mirror error", bad, err)
		}
	}
}
