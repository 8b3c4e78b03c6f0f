package images

import (
	"context"
	"fmt"
	"sort"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
)

// Info describes one project image as the engine has it.
type Info struct {
	// Name is the project name ("sandbox"), or the LabelImage value of an
	// extra labelled image.
	Name    string `json:"name"`
	Ref     string `json:"ref"`
	Present bool   `json:"present"`
	// The fields below are zero when the image is missing.
	ID      string    `json:"id,omitempty"`
	Size    int64     `json:"size,omitempty"`
	Created time.Time `json:"created,omitzero"`
	// Build is the LabelBuild value: how the image was made.
	Build string `json:"build,omitempty"`
	// Backend is the LabelBackend value of a llama-server image.
	Backend string `json:"backend,omitempty"`
}

// List reports every project image — present or missing — and, after
// them, any other tag carrying the project's image label (e.g. a second
// tag of a built image).
func List(ctx context.Context, eng Engine) ([]Info, error) {
	var out []Info
	known := map[string]bool{}
	for _, d := range Definitions() {
		known[d.Ref] = true
		info := Info{Name: d.Name, Ref: d.Ref}
		im, err := eng.ImageInspect(ctx, d.Ref)
		switch {
		case err == nil:
			info.Present, info.ID, info.Size = true, im.ID, im.Size
			info.Created, _ = time.Parse(time.RFC3339Nano, im.Created)
			if im.Config != nil {
				info.Build, info.Backend = im.Config.Labels[LabelBuild], im.Config.Labels[LabelBackend]
			}
			if info.Backend == "" {
				info.Backend = d.Backend // built before images carried the label
			}
		case !cerrdefs.IsNotFound(err):
			return nil, fmt.Errorf("inspecting %s: %w", d.Ref, err)
		}
		out = append(out, info)
	}
	sums, err := eng.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelImage))})
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	var extra []Info
	for _, s := range sums {
		for _, tag := range s.RepoTags {
			if known[tag] || tag == "<none>:<none>" {
				continue
			}
			extra = append(extra, Info{
				Name: s.Labels[LabelImage], Ref: tag, Present: true, ID: s.ID, Size: s.Size,
				Created: time.Unix(s.Created, 0).UTC(), Build: s.Labels[LabelBuild], Backend: s.Labels[LabelBackend],
			})
		}
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i].Ref < extra[j].Ref })
	return append(out, extra...), nil
}
